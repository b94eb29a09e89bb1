"""`larbinpy bench --soak SECONDS`: does a recrawling daemon stay the same size as it runs?

It serves the changing web (`changing.py`, its answers not recorded: the server must not grow
either) from a child process and runs the daemon (`larbinpy -c conf`) on it with `recrawl on`,
a small `recrawlMin`, a short `waitDuration`, `output warc` and the crawl log on, so that it
revisits thousands of pages a second. Every `--every` seconds it samples the daemon: RSS from
`/proc/PID/status` (RssAnon: the heap, what a leak grows; RssFile and RssShmem: mapped files,
e.g. the schedule's index, shared memory when the state is on tmpfs), open descriptors
(`/proc/PID/fd`), the bytes `stateDir` takes, and the revisits so far (status.json). It plays
the operator's rotation as it goes: closed WARC files are deleted and the crawl log is moved
aside and reopened (SIGHUP), then deleted, as logrotate would; those bytes are counted, not
kept (they grow by design: `warcMaxSize`, logrotate).

After `--warmup` seconds (the first pass, the caches filling), each figure's least-squares
slope against the revisits is reported per million revisits, with its range; the bars are
issue 45's: the heap grows at most `ANON_BAR` bytes a million revisits, the descriptors not at
all (beyond the WARC file's turnover), `stateDir` stays under `state_bound(pages)`. The daemon
is stopped by SIGTERM at the end and must exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from larbinpy.bench.changing import KINDS, ChangingServer
from larbinpy.bench.recrawl import (
    STOP_TIMEOUT,
    daemon,
    daemon_config,
    free_port,
    status_json,
    stop_daemon,
)
from larbinpy.outputs.cdxj import MERGE_FAN

# the options `--soak` gives other defaults: many pages on few hosts, a fetch a host every
# 20 ms, WARCs written (the crawl log is always on)
DEFAULTS = {"pages": 120, "per_host": 1, "wait": 0.02, "output": "warc", "connections": 64,
            "recrawl_min": 0.2, "recrawl_max": 30.0, "hosts_per_kind": 4}
ANON_BAR = 1 << 20  # bytes of heap a million revisits may add after the warm-up
FD_SLACK = 2  # descriptors a sample may differ by (a WARC file being replaced, a connection)
WARC_MAX = 16 << 20  # warcMaxSize: files close often, so the rotation deletes them often
FIGURES = ("anon", "file", "shmem", "fds", "state")


def state_bound(pages: int) -> int:
    """The most `stateDir` may take for a crawl of `pages` pages, whatever its length: a fixed
    part (the seen-sets' bitmaps, the schedule's index, the databases' pages) and a part per
    page (its records in the schedule's files, one live and one stale between two
    checkpoints; the FIFOs and the done-record between two checkpoints)."""
    return 64 * (1 << 20) + 4096 * pages


def proc_status(pid: int) -> dict[str, int]:
    """RssAnon, RssFile, RssShmem, VmRSS of a process, in bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile", "RssShmem", "VmRSS"):
                out[name] = int(value.split()[0]) * 1024
    return out


def descriptors(pid: int) -> int:
    """Open file descriptors of a process."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def disk_bytes(folder: Path) -> int:
    """Bytes allocated to every file under `folder` (st_blocks: what the disk gives)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with suppress(FileNotFoundError):
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def revisits_of(status: dict[str, Any] | None) -> int | None:
    """Revisits so far, from status.json's `recrawl.revisits` (None: no answer)."""
    if not status or not status.get("recrawl"):
        return None
    return int(sum(status["recrawl"].get("revisits", {}).values()))


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 when xs do not vary)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


class Rotation:
    """The operator's rotation: closed WARCs deleted, the crawl log moved, reopened and
    deleted; the bytes each held counted."""

    def __init__(self, save: Path, crawl_log: Path) -> None:
        self.save, self.crawl_log = save, crawl_log
        self.warc_bytes = self.log_bytes = self.warcs = 0

    def rotate(self, pid: int) -> None:
        """Delete closed WARCs; move the crawl log aside, SIGHUP, delete the old one."""
        for path in self.save.glob("*.warc.gz"):  # closed (an open one ends in .open)
            with suppress(FileNotFoundError):
                self.warc_bytes += path.stat().st_size
                path.unlink()
                self.warcs += 1
        old = self.crawl_log.with_name(self.crawl_log.name + ".1")
        if self.crawl_log.exists():
            self.crawl_log.replace(old)
            os.kill(pid, signal.SIGHUP)

    def finish_old(self) -> None:
        """Delete the moved crawl log (by now the daemon writes the new one)."""
        old = self.crawl_log.with_name(self.crawl_log.name + ".1")
        with suppress(FileNotFoundError):
            self.log_bytes += old.stat().st_size
            old.unlink()


def sample(pid: int, port: int, state: Path, t0: float) -> dict[str, Any] | None:
    """One sample of the daemon (None if status.json did not answer)."""
    revisits = revisits_of(status_json(port))
    if revisits is None:
        return None
    mem = proc_status(pid)
    return {"t": round(time.monotonic() - t0, 2), "revisits": revisits,
            "anon": mem.get("RssAnon", 0), "file": mem.get("RssFile", 0),
            "shmem": mem.get("RssShmem", 0), "rss": mem.get("VmRSS", 0),
            "fds": descriptors(pid), "state": disk_bytes(state)}


def run_soak(args: argparse.Namespace, conf: Path, workdir: Path, port: int
             ) -> tuple[int, list[dict[str, Any]], Rotation]:
    """The daemon for `args.soak` seconds once it answers, sampled; then SIGTERM: (exit code,
    samples, the rotation's counts)."""
    rotation = Rotation(workdir / "save", workdir / "crawl.jsonl")
    samples: list[dict[str, Any]] = []
    with daemon(conf, workdir, port) as proc:
        t0 = time.monotonic()
        while time.monotonic() < t0 + args.soak and proc.poll() is None:
            rotation.rotate(proc.pid)
            time.sleep(min(args.every, max(0.0, t0 + args.soak - time.monotonic())))
            rotation.finish_old()
            got = sample(proc.pid, port, workdir / "state", t0)
            if got is not None:
                samples.append(got)
                if args.progress:
                    print(json.dumps(got), file=sys.stderr, flush=True)
        code = stop_daemon(proc, workdir)
    return code, samples, rotation


def analyse(samples: list[dict[str, Any]], warmup: float, pages: int) -> dict[str, Any]:
    """Per figure: its value at the end of the warm-up and at the end, its range after the
    warm-up, and its slope per million revisits; the revisits a second; the bars."""
    steady = [s for s in samples if s["t"] >= warmup]
    out: dict[str, Any] = {"samples": len(samples), "steady_samples": len(steady),
                           "warnings": []}
    if len(steady) < 3:
        out["warnings"].append("fewer than 3 samples after the warm-up: no slopes")
        return out
    first, last = steady[0], steady[-1]
    done = last["revisits"] - first["revisits"]
    span = last["t"] - first["t"]
    out.update(revisits=last["revisits"], steady_revisits=done, steady_s=round(span, 1),
               revisits_per_s=round(done / span, 1) if span else None)
    xs = [float(s["revisits"]) for s in steady]
    for name in FIGURES:
        ys = [float(s[name]) for s in steady]
        out[name] = {"start": int(first[name]), "end": int(last[name]), "min": int(min(ys)),
                     "max": int(max(ys)), "per_million": round(slope(xs, ys) * 1e6, 1)}
    out["state_bound"] = state_bound(pages)
    out["bars"] = {
        "anon_per_million": out["anon"]["per_million"] <= ANON_BAR,
        # flat: the end where the start was; between, a closed WARC file's index sort may
        # hold its merge's runs open for a moment (at most MERGE_FAN)
        "fds_flat": abs(out["fds"]["end"] - out["fds"]["start"]) <= FD_SLACK
        and out["fds"]["max"] - out["fds"]["min"] <= FD_SLACK + MERGE_FAN,
        "state_under_bound": max(s["state"] for s in samples) <= out["state_bound"],
    }
    return out


def soak_bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Serve the changing web, run the daemon on it for `--soak` seconds, sample, measure."""
    kinds = tuple(args.kinds.split(",")) if args.kinds else KINDS
    with ChangingServer(workdir, kinds=kinds, hosts_per_kind=args.hosts_per_kind,
                        pages=args.pages, seed=args.seed, answers=False,
                        rate=args.change_rate,
                        lifetime=args.soak + 2 * STOP_TIMEOUT + 60) as server:
        port = free_port()
        conf = workdir / "larbin.conf"
        conf.write_text(daemon_config(args, server, workdir, port)
                        + f"warcMaxSize {WARC_MAX}\n")
        code, samples, rotation = run_soak(args, conf, workdir, port)
    pages = len(kinds) * args.hosts_per_kind * args.pages
    warmup = args.warmup if args.warmup is not None else min(300.0, args.soak / 4)
    result = analyse(samples, warmup, pages)
    result.update(seconds=args.soak, warmup_s=warmup, pages=pages,
                  hosts=len(kinds) * args.hosts_per_kind, wait=args.wait,
                  recrawl_min=args.recrawl_min, recrawl_max=args.recrawl_max,
                  output=args.output, change_rate=args.change_rate, exit_code=code,
                  warcs_deleted=rotation.warcs,
                  warc_bytes=rotation.warc_bytes, crawl_log_bytes=rotation.log_bytes,
                  trace=samples if args.json else None)
    if code != 0:
        result["warnings"].append(f"the daemon exited with code {code} after SIGTERM")
    return result


def _mb(n: float) -> str:
    """Bytes as MB with two decimals."""
    return f"{n / 1e6:.2f} MB"


def report_text(r: dict[str, Any]) -> str:
    """The human-readable report."""
    lines = [f"larbinpy bench --soak {r['seconds']:g}: {r['pages']} pages on {r['hosts']} hosts, "
             f"waitDuration {r['wait']:g}, recrawlMin {r['recrawl_min']:g}, recrawlMax "
             f"{r['recrawl_max']:g}, output {r['output']}, crawl log on; warm-up "
             f"{r['warmup_s']:g} s; SIGTERM exit code {r['exit_code']}"]
    if "steady_revisits" in r:
        lines.append(f"  revisits {r['revisits']:,} ({r['steady_revisits']:,} after the warm-up, "
                     f"in {r['steady_s']:g} s: {r['revisits_per_s']:,} a second)")
        for name, what in (("anon", "RssAnon (heap)"), ("file", "RssFile"),
                           ("shmem", "RssShmem"), ("state", "stateDir")):
            f = r[name]
            lines.append(f"  {what:15} {_mb(f['start'])} -> {_mb(f['end'])} (range "
                         f"{_mb(f['min'])}-{_mb(f['max'])}), slope {f['per_million'] / 1e6:+.3f}"
                         f" MB per million revisits")
        f = r["fds"]
        lines.append(f"  descriptors     {f['start']} -> {f['end']} (range {f['min']}-{f['max']}), "
                     f"slope {f['per_million']:+.1f} per million revisits")
        bars = r["bars"]
        lines.append(f"  bars: heap <= {ANON_BAR / 1e6:.2f} MB a million revisits "
                     f"{'ok' if bars['anon_per_million'] else 'ABOVE'}; descriptors flat "
                     f"{'ok' if bars['fds_flat'] else 'NO'}; stateDir <= {_mb(r['state_bound'])}"
                     f" {'ok' if bars['state_under_bound'] else 'ABOVE'}")
    lines.append(f"  rotated away: {r['warcs_deleted']} WARC files ({_mb(r['warc_bytes'])}), "
                 f"crawl logs {_mb(r['crawl_log_bytes'])}")
    lines += [f"WARNING: {w}" for w in r["warnings"]]
    return "\n".join(lines)


def add_options(p: argparse.ArgumentParser) -> None:
    """The options of `--soak` on the bench's parser (it shares --recrawl's too)."""
    g = p.add_argument_group("--soak")
    g.add_argument("--soak", type=float, default=0.0, metavar="SECONDS",
                   help="instead: a recrawling daemon on the changing web for SECONDS, its "
                        "heap, mapped files, descriptors and stateDir sampled; their slopes "
                        "per million revisits after --warmup (larbinpy/bench/soak.py); there "
                        "--hosts-per-kind, --pages, --wait, --output, --recrawl-min, --recrawl-max "
                        "default to 4, 120, 0.02, warc, 0.2 and 30")
    g.add_argument("--warmup", type=float, default=None,
                   help="--soak: seconds before the slopes are taken [a quarter, at most 300]")
    g.add_argument("--every", type=float, default=10.0,
                   help="--soak: seconds between two samples [10]")
    g.add_argument("--change-rate", type=float, default=None, metavar="PER_S",
                   help="--soak: every page changes this often a second, instead of the "
                        "change-rate web's mixture (more changed pages a revisit)")
    g.add_argument("--progress", action="store_true",
                   help="--soak: print each sample (JSON) on stderr as it is taken")
