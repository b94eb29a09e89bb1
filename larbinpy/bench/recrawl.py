"""`larbinpy bench --recrawl`: how fresh the daemon keeps its copy of a web that changes.

It serves the changing web (`changing.py`: pages changing at known Poisson rates behind honest,
absent and lying validators) from a child process, starts the daemon (`larbinpy -c conf`) on it
with `recrawl on`, a short `waitDuration` and small `recrawlMin`/`recrawlMax` (seconds stand in
for hours), lets it crawl `--seconds`, stops it with SIGTERM (it must exit 0), then computes
from the crawl log and the server's log of every answer and every change:

* the copy's time-averaged freshness over the steady part of the run (after the first pass:
  from the time the last never-fetched page was fetched to the SIGTERM). A page's copy is the
  version of the last 200 the crawler logged for it (the server's log says which version that
  answer carried; a 304 keeps the copy); it is fresh while that version is the page's current
  one. A page never fetched is never fresh;
* beside it, from the true rates (Cho & Garcia-Molina: a page of rate lambda revisited every I
  is fresh a share (1 - e^(-lambda I)) / (lambda I) of the time): uniform revisiting and the
  optimum at the crawler's own budget (its page fetches a second per site in that window), and
  the optimum at the sites' full capacity (connectionsPerHost / waitDuration a second);
* the validator share (revisits to the honest validator-giving hosts, `etag` and `lm`, whose copy
  had a strong validator, carrying If-None-Match or If-Modified-Since), the 304 share of those
  same revisits that found the page unchanged (a copy whose only validator is weak has nothing
  to send back), per kind of host too; politeness gaps (a request
  starting less than waitDuration after the end of the host's previous one, from the server);
  with --restart, pages the restarted daemon fetched before their `next`.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from larbinpy.bench.changing import HONEST_VALIDATORS, KINDS, ChangingServer
from larbinpy.frontier.freshness import mean_freshness, optimal_allocation, uniform

GAP_TOLERANCE = 0.02  # s: the server stamps an answer's end a little after the crawler saw it
LOG_ROUNDING = 0.001  # s: the crawl log's times are rounded to the millisecond
STOP_TIMEOUT = 60.0  # s the daemon has to exit after SIGTERM
RESUME_TOLERANCE = 1.0  # s: a revisit after a restart may come this much before its `next`
# the bench's options that --recrawl gives other defaults: a small web, one fetch at a time a
# host every quarter second, nothing written but the crawl log
DEFAULTS = {"pages": 40, "per_host": 1, "wait": 0.25, "output": "none", "connections": 64}
FIRST_PASS_SHARE = 0.5  # a warning when the first pass takes more of the run than this


# --- the theory (Cho & Garcia-Molina): larbinpy/frontier/freshness.py -------------------------


def optimal_freshness(rates: Sequence[float], budget: float) -> float:
    """Mean freshness of the pages at the intervals that maximise it for `budget` fetches/s."""
    return mean_freshness(rates, optimal_allocation(rates, budget))


# --- what happened --------------------------------------------------------------------------


def copy_freshness(changes: Sequence[float], copies: Sequence[tuple[float, int]],
                   start: float, end: float) -> float:
    """Share of [start, end] during which the copy was the page's current version. `changes`:
    sorted change times (version k is current from the k-th change on); `copies`: sorted
    (time the crawler had it, version it got)."""
    if end <= start:
        return 0.0
    fresh = 0.0
    for i, (t, version) in enumerate(copies):
        held_until = copies[i + 1][0] if i + 1 < len(copies) else end
        lo, hi = max(t, start), min(held_until, end)
        if hi <= lo:
            continue
        # the copy is fresh while `version` is current: from its making to the next change
        born = changes[version - 1] if version > 0 else -math.inf
        dies = changes[version] if version < len(changes) else math.inf
        fresh += max(0.0, min(hi, dies) - max(lo, born))
    return fresh / (end - start)


@dataclass(slots=True)
class Answer:
    """One answer of the changing web's log."""

    start: float
    end: float
    host: str
    path: str
    status: int
    version: int
    inm: bool
    ims: bool


def answers_of(truth: dict[str, Any]) -> list[Answer]:
    """The server's answers, in the order they started."""
    return sorted((Answer(a[0], a[1], a[2], a[3], a[4], a[5], bool(a[6]), bool(a[7]))
                   for a in truth["answers"]), key=lambda a: a.start)


def page_lines(lines: Iterable[dict[str, Any]], urls: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Crawl-log lines of the web's pages, per URL, in time order."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        if line.get("url") in urls:
            out[line["url"]].append(line)
    for got in out.values():
        got.sort(key=lambda line: line["t"])
    return out


def copies_of(lines: list[dict[str, Any]], answered: list[Answer]) -> tuple[list[tuple[float,
                                                                                      int]], int]:
    """The copy's versions over time: each crawl-log 200 takes the version of the server's last
    200 for that page started before the line; (copies, 200 lines with no such answer)."""
    ok = [a for a in answered if a.status == 200]
    starts = [a.start for a in ok]
    copies: list[tuple[float, int]] = []
    unmatched = 0
    for line in lines:
        if line.get("status") != 200:
            continue  # a 304 or a failure keeps the copy as it was
        # the line's `t` is rounded to the millisecond, so it may read a little before the
        # answer's start; two fetches of one page are never a millisecond apart
        i = bisect.bisect_right(starts, line["t"] + LOG_ROUNDING) - 1
        if i < 0:
            unmatched += 1
            continue
        copies.append((ok[i].end, ok[i].version))
    return copies, unmatched


def politeness_gaps(answers: list[Answer], wait: float) -> dict[str, Any]:
    """Per host, the least time from the end of an answer to the start of a later one (robots.txt
    included); the gaps shorter than `wait` (less GAP_TOLERANCE)."""
    by_host: dict[str, list[Answer]] = defaultdict(list)
    for a in answers:
        by_host[a.host].append(a)
    least = math.inf
    short: list[dict[str, Any]] = []
    for host, got in by_host.items():
        ends: list[float] = []  # sorted ends of the answers started so far
        for a in got:  # in start order
            i = bisect.bisect_right(ends, a.start)
            if i:
                gap = a.start - ends[i - 1]
                least = min(least, gap)
                if gap < wait - GAP_TOLERANCE:
                    short.append({"host": host, "path": a.path, "gap_s": round(gap, 4)})
            bisect.insort(ends, a.end)
    return {"least_gap_s": None if least == math.inf else round(least, 4),
            "short_gaps": len(short), "examples": short[:5]}


ETAG_KINDS = ("etag", "false-304", "etag-churn")  # the kinds that send an ETag


def validator_figures(answers: list[Answer], pages: list[dict[str, Any]]
                      ) -> dict[str, dict[str, Any]]:
    """Per kind of host: revisits (a page's answers after its first 200) and the share carrying
    a validator, of all and of those whose copy had a strong one (an ETag; a Last-Modified at
    least a second before the answer's Date, RFC 9110 8.8.2.2: a later one is weak); unchanged
    revisits (the page's version is the copy's, the last 200's) and the share of them answered
    304, of all and of those whose copy had a strong validator; 304s for a page that had
    changed."""
    kinds = {p["host"]: p["kind"] for p in pages}
    changes = {(p["host"], p["path"]): p["changes"] for p in pages}
    copy: dict[tuple[str, str], tuple[int, bool]] = {}  # page -> (version, strong validator)
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for a in answers:
        if a.version < 0:
            continue  # robots.txt, a 404
        key, kind = (a.host, a.path), kinds[a.host]
        c = per[kind]
        if key in copy:
            version, strong = copy[key]
            sent = a.inm or a.ims
            c["revisits"] += 1
            c["with_validator"] += sent
            c["strong_revisits"] += strong
            c["strong_with_validator"] += strong and sent
            unchanged = a.version == version
            c["unchanged"] += unchanged
            c["unchanged_304"] += unchanged and a.status == 304
            # a copy with a weak validator only (a Last-Modified under a second old) has
            # nothing that may be sent back: its 304 share is not the crawler's to make
            c["strong_unchanged"] += unchanged and strong
            c["strong_unchanged_304"] += unchanged and strong and a.status == 304
            c["changed_304"] += not unchanged and a.status == 304
        if a.status == 200:
            copy[key] = (a.version, kind in ETAG_KINDS or _strong_lm(kind, changes[key],
                                                                      a.version, a.start))
    out = {}
    for kind, c in per.items():
        out[kind] = {**c, "validator_share": _share(c["with_validator"], c["revisits"]),
                     "strong_validator_share": _share(c["strong_with_validator"],
                                                      c["strong_revisits"]),
                     "not_modified_share_all": _share(c["unchanged_304"], c["unchanged"]),
                     "not_modified_share": _share(c["strong_unchanged_304"],
                                                  c["strong_unchanged"])}
    return out


def _strong_lm(kind: str, changes: list[float], version: int, served: float) -> bool:
    """Whether the Last-Modified a 200 of `version` carried was a second or more before its
    Date (the changing web's LM is the version's change time; lm-now's is the Date)."""
    if kind not in ("lm", "lm-coarse"):
        return False
    if version == 0:
        return True  # made BIRTH seconds before the server started
    return math.floor(served) - math.floor(changes[version - 1]) >= 1


def _share(part: int, whole: int) -> float | None:
    """part / whole, rounded; None when there is no whole."""
    return round(part / whole, 4) if whole else None


def analyse(truth: dict[str, Any], lines: list[dict[str, Any]], end: float, wait: float,
            per_host: int, bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """Every figure of the recrawl bench from the server's log (`truth`), the crawl log's
    lines, the time the crawl was stopped, the politeness settings, and (for the reachable
    optimum) recrawlMin and recrawlMax."""
    pages = truth["pages"]
    by_url = {p["url"]: p for p in pages}
    got = page_lines(lines, set(by_url))
    answers = answers_of(truth)
    per_page: dict[tuple[str, str], list[Answer]] = defaultdict(list)
    for a in answers:
        per_page[(a.host, a.path)].append(a)
    firsts = [got[u][0]["t"] for u in by_url if got.get(u)]
    first_pass = max(firsts) if firsts else end
    window = end - first_pass
    result: dict[str, Any] = {"pages": len(pages), "fetched": len(firsts),
                              "first_pass_s": round(first_pass - truth["t0"], 2),
                              "steady_s": round(window, 2), "warnings": []}
    if len(firsts) < len(pages):
        result["warnings"].append(f"{len(pages) - len(firsts)} pages were never fetched")
    fresh: dict[str, float] = {}
    unmatched = 0
    for url, p in by_url.items():
        copies, missing = copies_of(got.get(url, []), per_page[(p["host"], p["path"])])
        unmatched += missing
        fresh[url] = copy_freshness(p["changes"], copies, first_pass, end)
    if unmatched:
        result["warnings"].append(f"{unmatched} crawl-log 200s with no answer in the server's log")
    budgets = site_budgets(got, by_url, first_pass, end)
    result["sites"] = theory_per_site(pages, budgets, per_host / wait if wait > 0 else 0.0)
    if bounds is not None:
        reachable(result["sites"], pages, answers, wait, per_host, bounds)
    result["freshness"] = _mean(fresh.values())
    for name in ("uniform", "optimum", "optimum_full") + (("optimum_reachable",) if bounds
                                                          else ()):
        result[name] = _weighted(result["sites"], name)
    if bounds is not None:
        result["over_optimum_reachable"] = _ratio(result["freshness"],
                                                  result["optimum_reachable"])
    result["over_uniform"] = _ratio(result["freshness"], result["uniform"])
    result["over_optimum"] = _ratio(result["freshness"], result["optimum"])
    result["over_optimum_full"] = _ratio(result["freshness"], result["optimum_full"])
    result["kinds"] = kind_table(pages, fresh, budgets, validator_figures(answers, pages))
    honest = [result["kinds"][k] for k in HONEST_VALIDATORS if k in result["kinds"]]
    result["validator_share_all"] = _share(sum(k.get("with_validator", 0) for k in honest),
                                           sum(k.get("revisits", 0) for k in honest))
    result["validator_share"] = _share(sum(k.get("strong_with_validator", 0) for k in honest),
                                       sum(k.get("strong_revisits", 0) for k in honest))
    result["not_modified_share_all"] = _share(sum(k.get("unchanged_304", 0) for k in honest),
                                              sum(k.get("unchanged", 0) for k in honest))
    result["not_modified_share"] = _share(
        sum(k.get("strong_unchanged_304", 0) for k in honest),
        sum(k.get("strong_unchanged", 0) for k in honest))
    result["politeness"] = politeness_gaps(answers, wait)
    result["outcomes"] = dict(Counter(line["kind"] for g in got.values() for line in g))
    if window < FIRST_PASS_SHARE * (end - truth["t0"]):
        result["warnings"].append("the first pass took more than half the run: the steady "
                                  "part is short")
    return result


def site_budgets(got: dict[str, list[dict[str, Any]]], by_url: dict[str, dict[str, Any]],
                 start: float, end: float) -> dict[str, float]:
    """Page fetches a second per host after `start` (the first pass's last fetch is not
    counted) until `end`, from the crawl log."""
    count: Counter[str] = Counter()
    for url, lines in got.items():
        count[by_url[url]["host"]] += sum(start < line["t"] <= end for line in lines)
    span = end - start
    return {host: (n / span if span > 0 else 0.0) for host, n in count.items()}


def theory_per_site(pages: list[dict[str, Any]], budgets: dict[str, float],
                    capacity: float) -> dict[str, dict[str, Any]]:
    """Per host: its budget, and uniform / optimum at it and at full capacity."""
    rates: dict[str, list[float]] = defaultdict(list)
    for p in pages:
        rates[p["host"]].append(p["rate"])
    out = {}
    for host, rs in rates.items():
        b = budgets.get(host, 0.0)
        out[host] = {"pages": len(rs), "fetches_per_s": round(b, 3),
                     "uniform": uniform(rs, b), "optimum": optimal_freshness(rs, b),
                     "optimum_full": optimal_freshness(rs, capacity)}
    return out


def reachable(sites: dict[str, dict[str, Any]], pages: list[dict[str, Any]],
              answers: list[Answer], wait: float, per_host: int,
              bounds: tuple[float, float]) -> None:
    """Per host, the optimum a schedule can reach: intervals within recrawlMin..recrawlMax
    (`bounds`), at the fetches a second the host's politeness lets through,
    connectionsPerHost / (waitDuration + its mean answer time, from the server's clock)."""
    took: dict[str, list[float]] = defaultdict(list)
    for a in answers:
        took[a.host].append(a.end - a.start)
    rates: dict[str, list[float]] = defaultdict(list)
    for p in pages:
        rates[p["host"]].append(p["rate"])
    for host, rs in rates.items():
        times = took.get(host) or [0.0]
        cycle = wait + sum(times) / len(times)
        capacity = per_host / cycle if cycle > 0 else math.inf
        sites[host]["capacity_reachable"] = round(capacity, 3)
        sites[host]["optimum_reachable"] = mean_freshness(
            rs, optimal_allocation(rs, capacity, *bounds))


def kind_table(pages: list[dict[str, Any]], fresh: dict[str, float], budgets: dict[str, float],
               validators: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind of host: pages, fetches a second per host, copy freshness, validator figures."""
    out: dict[str, dict[str, Any]] = {}
    for kind in dict.fromkeys(p["kind"] for p in pages):
        mine = [p for p in pages if p["kind"] == kind]
        hosts = {p["host"] for p in mine}
        out[kind] = {"pages": len(mine), "hosts": len(hosts),
                     "fetches_per_s_per_host": round(_mean(budgets.get(h, 0.0)
                                                           for h in hosts), 3),
                     "freshness": _mean(fresh[p["url"]] for p in mine),
                     **validators.get(kind, {})}
    return out


def _mean(values: Iterable[float]) -> float:
    """Mean, rounded (0 for nothing)."""
    vs = list(values)
    return round(sum(vs) / len(vs), 4) if vs else 0.0


def _weighted(sites: dict[str, dict[str, Any]], name: str) -> float:
    """A per-site freshness averaged over every page."""
    total = sum(s["pages"] for s in sites.values())
    return round(sum(s[name] * s["pages"] for s in sites.values()) / total, 4) if total else 0.0


def _ratio(a: float, b: float) -> float | None:
    """a / b, rounded; None when b is 0."""
    return round(a / b, 4) if b else None


# --- the run --------------------------------------------------------------------------------


def recrawl_keys() -> bool:
    """Whether this larbinpy has the recrawl keys (before it, the bench measures a first pass)."""
    from larbinpy.config import KEYS

    return "recrawl" in KEYS


def daemon_config(args: argparse.Namespace, server: ChangingServer, workdir: Path,
                  http_port: int) -> str:
    """larbin.conf for the daemon: every host's root a seed, recrawl on when it exists."""
    seeds = workdir / "seeds.txt"
    seeds.write_text("".join(server.url(h) + "\n" for h in server.hosts()))
    text = (f"UserAgent larbinpy-bench\ndnsServers 127.0.0.1:{server.dns_port}\n"
            f"allowNetworks 127.0.0.0/8 end\npagesConnexions {args.connections}\n"
            f"connectionsPerHost {args.per_host}\nwaitDuration {args.wait}\n"
            f"depthInSite 5\nseedFile {seeds}\nhttpPort {http_port}\ninputPort 0\n"
            f"output {args.output}\nsaveDir {workdir / 'save'}\n"
            f"stateDir {workdir / 'state'}\ncrawlLog {workdir / 'crawl.jsonl'}\n")
    if recrawl_keys():
        text += (f"recrawl on\nrecrawlMin {args.recrawl_min}\n"
                 f"recrawlMax {args.recrawl_max}\n")
    return text


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for the daemon's status port)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status_json(port: int) -> dict[str, Any] | None:
    """The daemon's status.json, or None if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=5) as r:
            return dict(json.load(r))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def daemon(conf: Path, workdir: Path, http_port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`larbinpy -c conf` (its output in workdir/daemon.log), once its status port answers;
    killed on the way out if still running (`stop_daemon` stops it cleanly)."""
    with open(workdir / "daemon.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "larbinpy", "-q", "-c", str(conf)],
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            up_by = time.monotonic() + STOP_TIMEOUT  # a loaded machine starts slowly
            while (status_json(http_port) is None and proc.poll() is None
                   and time.monotonic() < up_by):
                time.sleep(0.05)
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def stop_daemon(proc: subprocess.Popen[bytes], workdir: Path) -> int:
    """SIGTERM to a daemon that must still run (an early exit is an error, with its log's
    end); its exit code."""
    if proc.poll() is not None:
        raise RuntimeError(f"the daemon exited early with code {proc.returncode}: "
                           + (workdir / "daemon.log").read_text()[-2000:])
    proc.send_signal(signal.SIGTERM)
    return proc.wait(STOP_TIMEOUT)


def run_daemon(conf: Path, seconds: float, workdir: Path, http_port: int
               ) -> tuple[int, float, dict[str, Any] | None]:
    """`larbinpy -c conf` for `seconds` once its status port answers, then SIGTERM: (exit
    code, time of the SIGTERM, the last status.json)."""
    with daemon(conf, workdir, http_port) as proc:
        deadline = time.monotonic() + seconds  # from when it answers: it handles SIGTERM
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        status = status_json(http_port) if proc.poll() is None else None
        stopped = time.time()
        code = stop_daemon(proc, workdir)
    return code, stopped, status


def read_crawl_log(path: Path) -> list[dict[str, Any]]:
    """Every line of the crawl log."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def recrawl_bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Serve the changing web, run the daemon on it (and again with --restart), measure."""
    kinds = tuple(args.kinds.split(",")) if args.kinds else KINDS
    restart: dict[str, Any] | None = None
    with ChangingServer(workdir, kinds=kinds, hosts_per_kind=args.hosts_per_kind,
                        pages=args.pages, seed=args.seed,
                        lifetime=args.seconds + args.restart + 2 * STOP_TIMEOUT + 60) as server:
        port = free_port()
        conf = workdir / "larbin.conf"
        conf.write_text(daemon_config(args, server, workdir, port))
        code, stopped, status = run_daemon(conf, args.seconds, workdir, port)
        if args.restart > 0:
            started = time.time()
            again, _, _ = run_daemon(conf, args.restart, workdir, port)
            restart = {"seconds": args.restart, "exit_code": again, "started": started}
        truth = server.truth()
    lines = read_crawl_log(workdir / "crawl.jsonl")
    result = analyse(truth, [line for line in lines if line["t"] <= stopped], stopped,
                     args.wait, args.per_host, (args.recrawl_min, args.recrawl_max))
    result.update(seconds=args.seconds, wait=args.wait, per_host=args.per_host,
                  recrawl_min=args.recrawl_min, recrawl_max=args.recrawl_max,
                  hosts_per_kind=args.hosts_per_kind, pages_per_host=args.pages,
                  seed=args.seed, exit_code=code, recrawl=recrawl_keys(),
                  status_recrawl=(status or {}).get("recrawl"))
    if restart is not None:
        restart.update(resumed_schedules(lines, stopped, restart.pop("started")))
        result["restart"] = restart
        if restart["exit_code"] != 0:
            result["warnings"].append(f"the restarted daemon exited with code "
                                      f"{restart['exit_code']} after SIGTERM")
    if code != 0:
        result["warnings"].append(f"the daemon exited with code {code} after SIGTERM")
    if not result["recrawl"]:
        result["warnings"].append("this larbinpy has no `recrawl` key: a first pass only")
    return result


def resumed_schedules(lines: list[dict[str, Any]], stopped: float, started: float
                      ) -> dict[str, Any]:
    """Did the restarted daemon keep the schedules? Per URL, the first fetch after the restart
    against the `next` of its last line before the stop: fetched before it (less
    RESUME_TOLERANCE) is early; URLs with no `next` cannot be judged."""
    last: dict[str, dict[str, Any]] = {}
    first_after: dict[str, dict[str, Any]] = {}
    for line in sorted(lines, key=lambda line: line["t"]):
        if line["t"] <= stopped:
            last[line["url"]] = line
        elif line["t"] >= started and line["url"] not in first_after:
            first_after[line["url"]] = line
    judged = early = 0
    examples: list[dict[str, Any]] = []
    for url, line in first_after.items():
        due = last.get(url, {}).get("next")
        if due is None:
            continue
        judged += 1
        if line["t"] < due - RESUME_TOLERANCE:
            early += 1
            if len(examples) < 5:
                examples.append({"url": url, "early_s": round(due - line["t"], 3)})
    return {"refetched": len(first_after), "judged": judged, "early": early,
            "examples": examples}


BARS = (("over_uniform", 1.03, "freshness / uniform at the same budget"),
        ("over_optimum_full", 0.95, "freshness / optimum at full capacity"),
        ("validator_share", 0.95, "revisits to honest hosts' strong validators sending it"),
        ("not_modified_share", 0.95, "their unchanged strong-validator copies answered 304"))


def report_text(r: dict[str, Any]) -> str:
    """The human-readable report: the figures, the bars, a table per kind of host."""
    lines = [f"larbinpy bench --recrawl: {r['pages']} pages ({r['hosts_per_kind']} hosts a "
             f"kind x {r['pages_per_host']} pages), {r['seconds']:g} s, waitDuration "
             f"{r['wait']:g}, connectionsPerHost {r['per_host']}, recrawlMin "
             f"{r['recrawl_min']:g}, recrawlMax {r['recrawl_max']:g}, seed {r['seed']}; "
             f"SIGTERM exit code {r['exit_code']}",
             f"  first pass ended {r['first_pass_s']:.1f} s in; steady part "
             f"{r['steady_s']:.1f} s; {r['fetched']} of {r['pages']} pages fetched",
             f"  freshness of the copy {r['freshness']:.4f}; uniform at the same budget "
             f"{r['uniform']:.4f}, optimum at the same budget {r['optimum']:.4f}, optimum at "
             f"full capacity {r['optimum_full']:.4f}"]
    if r.get("optimum_reachable") is not None:
        lines.append(f"  optimum reachable (intervals within recrawlMin..recrawlMax, at "
                     f"connectionsPerHost / (waitDuration + answer time) a second) "
                     f"{r['optimum_reachable']:.4f}: freshness x{r['over_optimum_reachable']:.4f}")
    for name, bar, what in BARS:
        value = r.get(name)
        verdict = "-" if value is None else ("ok" if value >= bar else "BELOW")
        shown = "n/a" if value is None else f"{value:.4f}"
        lines.append(f"  {what:54} {shown:>7} (bar {bar}) {verdict}")
    lines.append(f"  (weak Last-Modified included: validators on every revisit to those "
                 f"hosts {_pct(r.get('validator_share_all')).strip()}, unchanged pages "
                 f"answered 304 {_pct(r.get('not_modified_share_all')).strip()})")
    gaps = r["politeness"]
    lines.append(f"  politeness: {gaps['short_gaps']} gaps shorter than waitDuration (least "
                 f"{gaps['least_gap_s']} s)")
    lines.append(f"  {'kind':11} {'pages':>5} {'fetch/s':>7} {'fresh':>6} {'revisits':>8} "
                 f"{'valid.':>6} {'unch.':>6} {'304':>6} {'304chg':>6}")
    for kind, k in r["kinds"].items():
        lines.append(f"  {kind:11} {k['pages']:5} {k['fetches_per_s_per_host']:7.2f} "
                     f"{k['freshness']:6.3f} {k.get('revisits', 0):8} "
                     f"{_pct(k.get('validator_share'))} {k.get('unchanged', 0):6} "
                     f"{_pct(k.get('not_modified_share'))} {k.get('changed_304', 0):6}")
    lines.append(f"  crawl-log outcomes: {r['outcomes']}")
    if r.get("restart"):
        q = r["restart"]
        lines.append(f"  restart ({q['seconds']:g} s, exit code {q['exit_code']}): "
                     f"{q['refetched']} pages fetched again, {q['early']} of {q['judged']} "
                     f"with a `next` before it")
    if r.get("status_recrawl"):
        lines.append(f"  status.json recrawl: {r['status_recrawl']}")
    lines += [f"WARNING: {w}" for w in r["warnings"]]
    return "\n".join(lines)


def _pct(share: float | None) -> str:
    """A share as a 6-wide percentage."""
    return "   n/a" if share is None else f"{share:6.1%}"


def add_options(p: argparse.ArgumentParser) -> None:
    """The options of `--recrawl` on the bench's parser."""
    g = p.add_argument_group("--recrawl")
    g.add_argument("--recrawl", action="store_true",
                   help="instead: the daemon keeps a copy of a changing web fresh for "
                        "--seconds; its freshness against uniform and optimal revisiting, "
                        "validators, 304s, politeness (larbinpy/bench/recrawl.py); there "
                        "--pages, --per-host, --wait and --output default to 40, 1, 0.25 and "
                        "none")
    g.add_argument("--seconds", type=float, default=90.0, help="how long the daemon crawls [90]")
    g.add_argument("--hosts-per-kind", type=int, default=2,
                   help=f"hosts of each kind ({', '.join(KINDS)}) [2]")
    g.add_argument("--kinds", default="", help="comma-separated kinds of host [all]")
    g.add_argument("--recrawl-min", type=float, default=1.0, help="recrawlMin [1]")
    g.add_argument("--recrawl-max", type=float, default=60.0, help="recrawlMax [60]")
    g.add_argument("--seed", type=int, default=1, help="the changing web's seed [1]")
    g.add_argument("--restart", type=float, default=0.0, metavar="SECONDS",
                   help="then start the daemon again on its state for SECONDS: no page may be "
                        "fetched before the `next` its last crawl-log line gave [0: no]")
