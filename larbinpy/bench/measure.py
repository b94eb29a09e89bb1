"""`larbinpy bench`: how fast the crawler is against a local synthetic web, and at what cost.

It serves a synthetic web (`larbinpy.bench.synth`: N hosts x M pages, by default ~15 kB
each with 40 links, real DNS; `--page-shape dense` marks the same links up in ~3,000 DOM nodes
a 20 kB page, as real pages are) from a separate process, so serving CPU is not charged to the
crawler, then measures in this process:

* the crawl: a full larbinpy crawl of that web (every stage: input, hash set, sequencer, DNS,
  robots.txt, politeness, link extraction, output) -- wall time, CPU time (user + sys from
  getrusage) and peak RSS;
* the floor: a bare aiohttp loop fetching exactly the same page URLs with the same concurrency
  (N workers, connector limit and per-host limit), reading each body and doing nothing else.

The floor is measured in the same run, on the same machine and against the same server process,
so the crawl/floor ratios cancel out the machine's speed and the server's cost: they show what
the crawler itself adds on top of fetching. The crawl runs first because peak RSS
(ru_maxrss) is a process-lifetime figure; measured first, it is the crawl's peak.

Other modes: `--nodes` (clusters of processes, `cluster.py`) and `--micro`, `--frontier`,
`--hashset` (one structure alone, `micro.py`), `--seen` (the seen-set alone, `seen_bench`),
`--shared-ip` (thousands of hosts on one IP: does the crawl keep its pace, `shared_ip_bench`),
`--recrawl` (how fresh the daemon keeps a copy of a changing web, `recrawl.py`),
`--schedule` (the recrawl schedule alone on a simulated clock, `schedbench.py`),
`--news` (how soon the daemon finds new pages of a news web, beside two reference clients,
`news.py`), `--soak` (whether a recrawling daemon stays the same size as it runs,
`soak.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from larbinpy.bench import news, recrawl, soak
from larbinpy.bench.harness import HASH_BITS, HASH_FUNCTIONS, SynthServer
from larbinpy.bench.politeness import read_log
from larbinpy.bench.synth import PAGE_SHAPES, host_ip, host_name, synth_urls
from larbinpy.config import parse_int
from larbinpy.demo.web import StaticResolver
from larbinpy.runtime import missing_extra, run_loop, setup_logging, tune_allocator, tune_gc


@dataclass
class Run:
    """Figures of one measured run (crawl or floor)."""

    pages: int  # successful page fetches
    seconds: float  # wall time
    cpu_seconds: float  # user + sys CPU of this process
    sys_seconds: float  # the sys part of it (system calls: sockets, files)
    peak_rss_mb: float | None = None  # ru_maxrss at the end (None: not meaningful for this run)
    body_bytes: int | None = None  # bytes of the pages' bodies as received (crawl only)

    @property
    def pages_per_s(self) -> float:
        """Throughput."""
        return self.pages / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_ms_per_page(self) -> float:
        """CPU milliseconds spent per page."""
        return self.cpu_seconds / self.pages * 1000 if self.pages else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures, derived ones included."""
        return {
            **asdict(self),
            "pages_per_s": round(self.pages_per_s, 1),
            "cpu_ms_per_page": round(self.cpu_ms_per_page, 3),
            "cpu_s_per_1000_pages": round(self.cpu_ms_per_page, 3),  # same number, other unit
        }


# --- measuring ---


def cpu_seconds() -> tuple[float, float]:
    """(user + system, system) CPU time of this process so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_stime


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (ru_maxrss is KiB on Linux)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 1024 / 1024


def measured(make_coro: Callable[[], Coroutine[Any, Any, int]]) -> tuple[int, float, float, float]:
    """Run the coroutine made by `make_coro`; return (its result, wall s, CPU s, sys s)."""
    (cpu0, sys0), t0 = cpu_seconds(), time.perf_counter()
    result = run_loop(make_coro())
    wall = time.perf_counter() - t0
    cpu1, sys1 = cpu_seconds()
    return result, wall, cpu1 - cpu0, sys1 - sys0


# --- the crawl ---


def crawl_config(args: argparse.Namespace, server: SynthServer, workdir: Path) -> str:
    """larbin.conf text for crawling the synthetic web; every host's root is a seed."""
    seeds = workdir / "seeds.txt"
    port = server.http_port
    seeds.write_text("".join(f"http://{host_name(h)}:{port}/\n" for h in range(args.hosts)))
    return (
        f"UserAgent larbinpy-bench\n"
        f"dnsServers 127.0.0.1:{server.dns_port}\n"
        f"allowNetworks 127.0.0.0/8 end\n"
        f"pagesConnexions {args.connections}\n"
        f"connectionsPerHost {args.per_host}\n"
        f"waitDuration {args.wait}\n"
        + (f"maxSitesInMemory {args.sites_in_memory}\n" if args.sites_in_memory else "")
        + f"depthInSite 1000\n"
        f"startUrl http://{host_name(0)}:{port}/\n"
        f"seedFile {seeds}\n"
        f"exitAtEnd\n"
        f"httpPort 0\ninputPort 0\n"
        f"output {args.output}\n"
        + (f"requisites {args.requisites}\n" if args.requisites else "")
        + f"saveDir {workdir / 'save'}\nstateDir {workdir / 'state'}\n"
        f"hashSize {HASH_BITS}\nhashFunctions {HASH_FUNCTIONS}\n"
    )


def run_crawl(config_text: str, workdir: Path) -> tuple[Run, dict[str, int]]:
    """Crawl with a fresh Crawler on a fresh loop; return its figures and its outcomes."""
    from larbinpy.config import parse_config
    from larbinpy.crawler import Crawler

    cfg = parse_config(config_text, str(workdir / "larbin.conf"))
    crawlers: list[Crawler] = []

    async def crawl() -> int:
        """Build the crawler on the running loop, then crawl."""
        crawlers.append(Crawler(cfg, scratch=True))
        return await crawlers[0].run()

    # The process's one-off start-up is not the crawl's: like the imports above (and the
    # floor's), importing the event loop (which run_loop does lazily), tuning the allocator
    # and the collector (a full collection of everything imported) happen before the
    # measure. `larbinpy -c` tunes the collector once its crawler is built, so there the
    # crawler's own objects are frozen too; here they are not, which can only cost the crawl.
    loop_name()
    tune_allocator()
    tune_gc()
    code, wall, cpu, sys_cpu = measured(crawl)
    crawler = crawlers[0]
    if code != 0:
        raise RuntimeError(f"crawl exited with code {code}")
    outcomes = {str(k): v for k, v in crawler.stats.outcomes.items() if v}
    return (Run(outcomes.get("success", 0), wall, cpu, sys_cpu, peak_rss_mb(),
                crawler.stats.bytes), outcomes)


# --- the floor ---


async def fetch_all(urls: list[str], resolver: StaticResolver, connections: int,
                    per_host: int) -> int:
    """Fetch every URL with `connections` workers, reading bodies fully; return 200s."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for url in urls:
        queue.put_nowait(url)
    ok = 0
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=per_host,
                                     resolver=resolver)

    async def worker(session: aiohttp.ClientSession) -> None:
        """Take URLs until the queue is empty."""
        nonlocal ok
        while not queue.empty():
            url = queue.get_nowait()
            try:
                async with session.get(url) as resp:
                    await resp.read()
                    ok += resp.status == 200
            except (TimeoutError, aiohttp.ClientError):
                pass  # counted as missing: the report warns when ok != len(urls)

    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(connections)))
    return ok


async def fetch_all_http1(urls: list[str], ips: dict[str, str], connections: int) -> int:
    """The same loop with the crawler's own plain-HTTP client (`http1.py`); return 200s."""
    from larbinpy.net.http1 import FetchError, Http1Client, split_http_url

    async def resolve(host: str, port: int) -> list[str]:
        return [ips[host]]

    client = Http1Client({"User-Agent": "larbinpy-bench"}, resolve, keepalive=10,
                         connect_timeout=10, read_timeout=30, total_timeout=60)
    todo = list(reversed(urls))
    ok = 0

    async def worker() -> None:
        """Take URLs until none is left."""
        nonlocal ok
        while todo:
            parts = split_http_url(todo.pop())
            assert parts is not None
            try:
                async with await client.get(*parts) as resp:
                    async for _ in resp.content.iter_any():
                        pass
                    ok += resp.status == 200
            except FetchError:
                pass  # counted as missing: the report warns when ok != len(urls)

    await asyncio.gather(*(worker() for _ in range(connections)))
    client.close()
    return ok


def run_http1_floor(args: argparse.Namespace, server: SynthServer) -> Run:
    """The bare fetch loop with `http1.py` instead of aiohttp's session."""
    urls = list(synth_urls(args.hosts, args.pages, server.http_port))
    ips = {host_name(h): host_ip(h) for h in range(args.hosts)}
    ok, wall, cpu, sys_cpu = measured(lambda: fetch_all_http1(urls, ips, args.connections))
    return Run(ok, wall, cpu, sys_cpu)


def run_floor(args: argparse.Namespace, server: SynthServer) -> Run:
    """The bare fetch loop over the same page URLs as the crawl."""
    urls = list(synth_urls(args.hosts, args.pages, server.http_port))
    resolver = StaticResolver({host_name(h): [host_ip(h)] for h in range(args.hosts)})
    ok, wall, cpu, sys_cpu = measured(
        lambda: fetch_all(urls, resolver, args.connections, args.per_host))
    return Run(ok, wall, cpu, sys_cpu)


# --- report ---


def ratios(crawl: Run, floor: Run | None) -> dict[str, float]:
    """crawl/floor for throughput and CPU per page (empty without a floor)."""
    if floor is None or not floor.pages_per_s or not floor.cpu_ms_per_page:
        return {}
    return {
        "pages_per_s": round(crawl.pages_per_s / floor.pages_per_s, 3),
        "cpu_per_page": round(crawl.cpu_ms_per_page / floor.cpu_ms_per_page, 3),
    }


def report_text(result: dict[str, Any]) -> str:
    """The human-readable report."""
    lines = [f"larbinpy bench: {result['hosts']} hosts x {result['pages_per_host']} pages "
             f"({result['page_shape']}, {result['page_bytes']} bytes, "
             f"{result['links']} links), "
             f"{result['connections']} connections, {result['per_host']} per host, "
             f"output {result['output']} in {result.get('dir', '?')}, loop {result['loop']}"]
    if "bytes_written" in result:
        lines.append(f"  written: {result['bytes_written']:,} bytes (requisites "
                     f"{result['requisites']}: {result['outcomes'].get('requisite', 0)} fetched; "
                     f"{result['images']} images a page)")
    for name in ("crawl", "floor", "http1"):
        r = result.get(name)
        if r is None:
            continue
        rss = f", peak RSS {r['peak_rss_mb']:.0f} MB" if r["peak_rss_mb"] is not None else ""
        lines.append(
            f"  {name:5}: {r['pages']} pages in {r['seconds']:.2f} s = {r['pages_per_s']:.0f} "
            f"pages/s; CPU {r['cpu_seconds']:.2f} s (sys {r['sys_seconds']:.2f}) = "
            f"{r['cpu_ms_per_page']:.3f} ms/page "
            f"({r['cpu_s_per_1000_pages']:.2f} s per 1,000 pages){rss}"
        )
    if result.get("politeness"):
        q = result["politeness"]
        cpu = f"{q['cpu_pages_per_s']:.0f}" if q["cpu_pages_per_s"] else "?"
        lines.append(f"  politeness: ideal {q['ideal_pages_per_s']:.0f} pages/s "
                     f"({q['ips']} IPs, one fetch each every {q['wait']} s), budget "
                     f"{q['budget_pages_per_s']:.0f} (maxSitesInMemory {q['sites_in_memory']}), "
                     f"CPU {cpu} (pages a CPU second); achieved "
                     f"x{q['achieved_over_ideal']:.3f} of the ideal, "
                     f"x{q['achieved_over_bound']:.3f} of the lower of ideal and budget, "
                     f"over the whole run (start-up, robots.txt and the tail included); the "
                     f"middle 80% of the requests (robots.txt included) at "
                     f"{q['middle_requests_per_s']} a second")
        lines.append(f"  politeness gaps: {q['gaps']} of {q['requests']} requests (two starts "
                     f"on one IP under {q['wait']} s less {q['slack']} s; the shortest "
                     f"spacing {q['shortest_spacing']} s)")
    if result["ratios"]:
        q = result["ratios"]
        lines.append(f"  crawl/floor: pages/s x{q['pages_per_s']:.2f}, "
                     f"CPU per page x{q['cpu_per_page']:.2f}")
    if result.get("runs"):
        lines.append(spread_text(result["runs"]))
    lines.append(f"  crawl outcomes: {result['outcomes']}")
    lines += [f"WARNING: {w}" for w in result["warnings"]]
    return "\n".join(lines)


def spread_text(runs: list[dict[str, Any]]) -> str:
    """The range of every pair's figures (`--repeat`), under the median pair's."""
    def span(values: list[float], fmt: str) -> str:
        return f"{min(values):{fmt}}-{max(values):{fmt}}"

    text = (f"  over {len(runs)} runs (the median one above): crawl "
            f"{span([r['crawl']['cpu_ms_per_page'] for r in runs], '.3f')} ms/page")
    if all(r["ratios"] for r in runs):
        text += (f", floor {span([r['floor']['cpu_ms_per_page'] for r in runs], '.3f')} "
                 f"ms/page, crawl/floor pages/s "
                 f"x{span([r['ratios']['pages_per_s'] for r in runs], '.2f')}, CPU per page "
                 f"x{span([r['ratios']['cpu_per_page'] for r in runs], '.2f')}")
    return text


def loop_name() -> str:
    """Which event loop the runs use."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


# --- command line ---


def parser() -> argparse.ArgumentParser:
    """`larbinpy bench` options."""
    p = argparse.ArgumentParser(prog="larbinpy bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=200, help="synthetic hosts [200]")
    p.add_argument("--pages", type=int, default=100, help="pages per host [100]")
    p.add_argument("--page-bytes", type=int, default=15000,
                   help="size of a synthetic page in bytes [15000]")
    p.add_argument("--links", type=int, default=40, help="links on a synthetic page [40]")
    p.add_argument("--page-shape", choices=PAGE_SHAPES, default="plain",
                   help="plain: paragraphs of text, a few hundred nodes a page; dense: marked "
                        "up like a forum page, ~140 nodes a kB (~3,000 in 20 kB) [plain]")
    p.add_argument("--connections", type=int, default=64, help="pagesConnexions [64]")
    p.add_argument("--per-host", type=int, default=4, help="connectionsPerHost [4]")
    p.add_argument("--output", choices=("save", "none", "links", "warc", "mirror"),
                   default="save")
    p.add_argument("--requisites", choices=("on", "off"), default=None,
                   help="the crawl's `requisites` key [unset: on with --output warc]")
    p.add_argument("--images", type=int, default=0,
                   help="images on each synthetic page (requisites) [0]")
    p.add_argument("--dir", default=None,
                   help="where the crawl's saveDir and stateDir go (a temporary folder made "
                        "there, removed after; made if missing) [/dev/shm if it has room, "
                        "else the system's temporary directory]")
    p.add_argument("--http1-floor", action="store_true",
                   help="also measure the bare fetch loop with the crawler's own plain-HTTP "
                        "client (http1.py) instead of aiohttp's session")
    p.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                   help="also measure the bare aiohttp fetch loop [on]")
    p.add_argument("--wait", type=float, default=0.0,
                   help="waitDuration: > 0 measures politeness (use --per-host 1); the ideal "
                        "is one page per host every WAIT seconds [0]")
    p.add_argument("--ips", type=int, default=1000,
                   help="distinct loopback IPs of the synthetic web, hosts sharing them "
                        "round-robin; past 1,000 the server listens on one socket for all of "
                        "loopback (so --ips 200000 gives 200,000 hosts an IP each) [1000]")
    p.add_argument("--sites-in-memory", type=int, default=0, metavar="N",
                   help="the crawl's maxSitesInMemory [unset: the key's default]")
    p.add_argument("--shared-ip", type=int, metavar="N", default=0,
                   help="instead: crawl N pages of a web whose hosts all share one IP, each "
                        "page linking 8 random hosts of it (8N+1 hosts: new ones keep coming, "
                        "as behind wildcard DNS); pages/s and CPU per page in the first and "
                        "last thirds. With --wait 1 the IP allows one fetch (robots.txt "
                        "included) per second per --per-host place: keep N to a few hundred")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--micro", action="store_true",
                   help="instead: the URL normalizer (µs per link) and the link extractor (µs "
                        "per page) alone, on pages made in memory")
    p.add_argument("--frontier", type=int, metavar="N", default=0,
                   help="instead: push then pop N URLs through the disk frontier and the "
                        "per-site spill (100,000 sites)")
    p.add_argument("--hashset", type=int, metavar="N", default=0,
                   help="instead: N distinct URLs into a 2^28-bit hash set with K=1 and K=7; "
                        "false-positive rate on 1,000,000 other URLs against the formula")
    p.add_argument("--seen", type=int, metavar="N", default=0,
                   help="instead: N distinct URLs plus 4 duplicates each, a page of 50 links "
                        "at a time, through the seen-set (--seen-set, --seen-bits): "
                        "URLs lost, cost per link tested, peak RSS")
    p.add_argument("--schedule", type=parse_int, metavar="N", default=0,
                   help="instead: schedule N pages over 30 days (ETags, Last-Modified, "
                        "digests), then pop each when due on a simulated clock and put it "
                        "again: puts/s, pops/s, bytes a page on disk, peak RSS (--dir: where; "
                        "created when missing)")
    p.add_argument("--revisits", type=parse_int, metavar="M", default=0,
                   help="with --schedule: pop and put again M pages, not all N [N]")
    p.add_argument("--store", choices=("ours", "sqlite"), default="ours",
                   help="with --schedule: the store the workload drives: ours "
                        "(frontier/schedule.py) or SQLite with an index on the due time "
                        "(bench/schedstores.py) [ours]")
    p.add_argument("--kill9", type=float, metavar="S", default=0.0,
                   help="with --schedule: then pop and put again in a child process, kill it "
                        "with SIGKILL after S seconds, reopen the store: its time, and whether "
                        "exactly the pages in flight came back")
    p.add_argument("--seen-set", choices=("exact", "bitmap"), default="exact",
                   help="the seenSet of --seen [exact]")
    p.add_argument("--seen-bits", type=parse_int, default=0, metavar="BITS",
                   help="the hashSize of --seen, e.g. 2^30 [hashSize's default]")
    p.add_argument("--redis-seen", type=parse_int, metavar="N", default=0,
                   help="instead: N distinct URLs, pages of 50 links as --seen's, through a "
                        "cluster node's admission into a local redis-server (no crawl): URLs "
                        "lost, Redis CPU, commands and seen-set bytes a URL "
                        "(larbinpy/bench/redisfigures.py)")
    p.add_argument("--nodes", metavar="N[,N...]", default="",
                   help="instead: one larbinpy process (embedded), then clusters of N processes "
                        "sharing a local redis-server (larbinpy/bench/cluster.py)")
    p.add_argument("--repeat", type=int, default=1, metavar="R",
                   help="crawl and floor R times, alternating, against one server; report "
                        "the pair with the median CPU ratio and every pair's range (with "
                        "--nodes: every configuration R times, interleaved; the medians) [1]")
    recrawl.add_options(p)
    news.add_options(p)
    soak.add_options(p)
    return p


def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Serve, then crawl and fetch the floor `args.repeat` times, alternating; return the
    result object of the median pair, with every pair's figures under "runs"."""
    repeat = max(1, args.repeat)
    pairs: list[dict[str, Any]] = []
    serve = ("--max-ips", str(args.ips), "--wait", str(args.wait))
    with SynthServer(args.hosts, args.pages, workdir, page_bytes=args.page_bytes,
                     links=args.links, shape=args.page_shape, images=args.images,
                     serve_args=serve) as server:
        for r in range(repeat):
            where = workdir if repeat == 1 else workdir / f"run{r}"
            where.mkdir(exist_ok=True)
            pairs.append(bench_pair(args, server, where))
            if repeat > 1:
                shutil.rmtree(where)  # the run's files, outside any measure: /dev/shm is RAM
    # A pair's runs are adjacent in time, so their ratio cancels the machine's drift; the
    # median pair (the lower middle one for an even R) is the figure, the others show the
    # spread.
    middle = sorted(pairs, key=_pair_order)[(repeat - 1) // 2]
    # Peak RSS is the process's (ru_maxrss): only the first crawl's is that crawl's own, later
    # ones would add what the earlier runs left in the heap.
    crawl = {**middle["crawl"], "peak_rss_mb": pairs[0]["crawl"]["peak_rss_mb"]}
    result = {**middle, "crawl": crawl, "repeat": repeat,
              "warnings": list(dict.fromkeys(w for p in pairs for w in p["warnings"]))}
    if repeat > 1:
        result["runs"] = [{k: p[k] for k in ("crawl", "floor", "http1", "ratios")}
                          for p in pairs]
    return result


def politeness_figures(args: argparse.Namespace, config: str, crawl: Run,
                       seen: dict[str, Any]) -> dict[str, Any]:
    """The crawl's pages/s beside its three bounds: the politeness ideal (every IP of the web at
    work, one fetch each per wait and place), the sites-in-memory budget (that many sites at
    work at once) and the CPU (pages a CPU second); and the server's record (gaps, the pace of
    the middle 80% of the requests)."""
    from larbinpy.config import parse_config

    budget = parse_config(config, "bench.conf").max_sites_in_memory
    ideal = min(args.hosts, args.ips) * args.per_host / args.wait
    bound = min(ideal, budget * args.per_host / args.wait)
    return {"wait": args.wait, "ips": min(args.hosts, args.ips),
            "ideal_pages_per_s": round(ideal, 1),
            "sites_in_memory": budget,
            "budget_pages_per_s": round(budget * args.per_host / args.wait, 1),
            "cpu_pages_per_s": round(crawl.pages / crawl.cpu_seconds, 1)
            if crawl.cpu_seconds else None,
            "achieved_over_ideal": round(crawl.pages_per_s / ideal, 3),
            "achieved_over_bound": round(crawl.pages_per_s / bound, 3),
            "middle_requests_per_s": seen["middle_requests_per_s"],
            "requests": seen["requests"], "gaps": seen["gaps"],
            "shortest_spacing": seen["shortest_spacing"], "slack": seen["slack"]}


def _pair_order(pair: dict[str, Any]) -> float:
    """What ranks pairs for the median: the CPU ratio, or the crawl's CPU without a floor."""
    order: float = pair["ratios"].get("cpu_per_page", pair["crawl"]["cpu_ms_per_page"])
    return order


def bench_pair(args: argparse.Namespace, server: SynthServer, workdir: Path) -> dict[str, Any]:
    """One crawl, then the floor(s), against the running server: the result object."""
    if args.wait > 0:
        read_log(server.http_port, reset=True)  # (what an earlier pair's floor asked)
    config = crawl_config(args, server, workdir)
    crawl, outcomes = run_crawl(config, workdir)
    seen = read_log(server.http_port, reset=True) if args.wait > 0 else None
    written = sum(f.stat().st_size for f in (workdir / "save").rglob("*") if f.is_file())
    floor = run_floor(args, server) if args.floor else None
    http1 = run_http1_floor(args, server) if args.http1_floor else None
    expected = args.hosts * args.pages
    warnings = []
    if crawl.pages != expected:
        from larbinpy.frontier.seen import false_positive_rate

        lost = expected * false_positive_rate(HASH_BITS, HASH_FUNCTIONS, expected)
        warnings.append(f"crawl fetched {crawl.pages} pages, expected {expected} (at most "
                        f"about {lost:.2f} lost to false positives of the hash set)")
    for name, run in (("floor", floor), ("http1", http1)):
        if run is not None and run.pages != expected:
            warnings.append(f"{name} fetched {run.pages} pages, expected {expected}")
    politeness = politeness_figures(args, config, crawl, seen) if seen is not None else None
    if politeness and politeness["gaps"]:
        warnings.append(f"{politeness['gaps']} politeness gaps: two requests to one IP less "
                        f"than {args.wait} s apart")
    return {
        "hosts": args.hosts, "pages_per_host": args.pages, "expected_pages": expected,
        "page_bytes": args.page_bytes, "links": args.links, "page_shape": args.page_shape,
        "connections": args.connections, "per_host": args.per_host, "output": args.output,
        "images": args.images, "requisites": args.requisites or "default",
        "bytes_written": written,
        "loop": loop_name(), "cpus": os.cpu_count(),
        "crawl": crawl.as_dict(), "floor": floor.as_dict() if floor else None,
        "http1": http1.as_dict() if http1 else None,
        "ratios": ratios(crawl, floor), "outcomes": outcomes, "warnings": warnings,
        "politeness": politeness,
    }


def state_bench(args: argparse.Namespace) -> int:
    """`--micro` / `--frontier N` / `--hashset N`: single structures alone (`micro.py`)."""
    from larbinpy.bench import micro

    result: dict[str, Any] = {}
    if args.micro:
        result["urls"] = micro.bench_urls()
        result["extract"] = micro.bench_extract()
        result["extract_shapes"] = micro.bench_extract_shapes()
    if args.frontier:
        result["frontier"] = micro.bench_frontier(args.frontier, 100_000)
    if args.hashset:
        result["hashset"] = micro.bench_hashset(args.hashset)
    if args.schedule:
        from larbinpy.bench.schedbench import bench_schedule

        where = args.dir
        if where is not None:
            Path(where).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="larbinpy-schedule-", dir=where) as tmp:
            result["schedule"] = bench_schedule(args.schedule, Path(tmp) / "store",
                                                revisits=args.revisits, store=args.store,
                                                kill9=args.kill9)
    if args.seen:
        where = args.dir  # a disk: the store's real medium
        if where is not None:
            Path(where).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="larbinpy-seen-", dir=where) as tmp:
            result["seen"] = seen_bench(args.seen, Path(tmp), args.seen_set, args.seen_bits)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


SEEN_BATCH, SEEN_NEW = 50, 10  # links per page; of them new, the rest seen before
SEEN_WINDOW = 2000  # half the duplicates are among the last URLs (a site's navigation)
SEEN_TIMED_PAGES = 1000  # pages timed at once


def seen_bench(n: int, directory: Path, kind: str = "exact", bits: int = 0,
               checkpoint_every: int = 1_000_000) -> dict[str, Any]:
    """Feed n distinct URLs, each page of 50 links holding 10 new ones, 20 among the last 2000
    and 20 drawn from every URL before, through a seen-set; only its calls are timed."""
    import random

    from larbinpy.config import Config, default_hash_size
    from larbinpy.frontier.seen import open_seen_set

    rng = random.Random(1976)
    bits = bits or default_hash_size(kind, cluster=False)  # as a crawl would have it
    seen = open_seen_set(directory / "seen.bitmap", bits, 1, kind, Config().seen_cache)
    admitted = tested = made = 0
    spent = cpu = 0.0
    since_flush = 0

    def url(i: int) -> str:
        return f"http://h{i % 100_003}.example/dir/page-{i}.html"

    while made < n:
        pages = []  # made before the clock starts: the timer calls cost a page's worth
        for _ in range(SEEN_TIMED_PAGES):
            if made >= n:
                break
            new = [url(i) for i in range(made, min(made + SEEN_NEW, n))]
            made += len(new)
            old = [url(made - 1 - rng.randrange(min(made, SEEN_WINDOW)))
                   for _ in range((SEEN_BATCH - SEEN_NEW) // 2)]
            old += [url(rng.randrange(made)) for _ in range((SEEN_BATCH - SEEN_NEW) // 2)]
            links = list(dict.fromkeys(new + old))  # a page's links come de-duplicated
            rng.shuffle(links)
            pages.append(links)
        t0, c0 = time.perf_counter(), time.process_time()
        for links in pages:
            fresh = seen.missing(links)
            seen.add(fresh)
            admitted += len(fresh)
            since_flush += len(links)
            if since_flush >= checkpoint_every:
                seen.flush()
                since_flush = 0
        spent += time.perf_counter() - t0
        cpu += time.process_time() - c0
        tested += sum(map(len, pages))
    t0, c0 = time.perf_counter(), time.process_time()
    seen.close()
    spent += time.perf_counter() - t0
    cpu += time.process_time() - c0
    on_disk = sum(p.stat().st_blocks * 512 for p in directory.iterdir())
    return {"seen_set": kind, "hash_bits": bits, "distinct_urls": n, "links_tested": tested,
            "admitted": admitted, "lost": n - admitted,
            "us_per_link": round(spent / max(tested, 1) * 1e6, 3),
            "cpu_us_per_link": round(cpu / max(tested, 1) * 1e6, 3),
            "peak_rss_mb": round(peak_rss_mb(), 1), "disk_mb": round(on_disk / 2**20, 1)}


def nodes_bench(args: argparse.Namespace) -> int:
    """`--nodes 1,2`: processes against the embedded default (see `cluster.py`)."""
    if problem := missing_extra("larbinpy bench --nodes", "redis", "bench"):
        print(problem, file=sys.stderr)
        return 1
    from larbinpy.bench.cluster import bench_nodes, report_nodes

    if args.redis_seen:
        from larbinpy.bench.redisfigures import redis_seen_bench

        where = args.dir
        if where is not None:
            Path(where).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="larbinpy-redis-seen-", dir=where) as tmp:
            print(json.dumps(redis_seen_bench(args.redis_seen, Path(tmp)), indent=2))
        return 0
    return run_and_report(args, bench_nodes, report_nodes)


SHARED_LINKS = 8  # links on a page of --shared-ip, each to a random host of the one IP
SHARED_WINDOW = 20.0  # seconds of a --shared-ip window (issue 31: the next 20 s against the first)


def shared_ip_bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """`--shared-ip N`: crawl N pages of a web of 8N+1 hosts on one IP; the pace and the CPU
    per page of the first and the last third of the pages, and the pages/s of each whole
    SHARED_WINDOW seconds from the first fetch (does the pace fall as sites accumulate?)."""
    n = args.shared_ip
    hosts = SHARED_LINKS * n + 1
    serve = ("--max-ips", "1", "--cross-host", "1")
    with SynthServer(hosts, 1, workdir, page_bytes=args.page_bytes, links=SHARED_LINKS,
                     shape=args.page_shape, serve_args=serve) as server:
        run, outcomes, starts, cpu = _crawl_shared(args, server, workdir)
    starts = starts[:n]  # fetches running when the crawl was told to stop start after
    third = n // 3
    result: dict[str, Any] = {
        "pages_wanted": n, "hosts": hosts, "links": SHARED_LINKS, "wait": args.wait,
        "connections": args.connections, "per_host": args.per_host, "output": args.output,
        "loop": loop_name(), "crawl": run.as_dict(), "outcomes": outcomes, "warnings": [],
    }
    if len(starts) < n or third < 2:
        result["warnings"].append(f"the crawl ended after {len(starts)} pages, not {n} "
                                  "(N must be 6 or more)")
        return result
    first = _third(starts, cpu, 0, third)
    last = _third(starts, cpu, n - 1 - third, n - 1)
    result.update(first_third=first, last_third=last,
                  last_over_first=round(last["pages_per_s"] / first["pages_per_s"], 3))
    result["windows"] = windows = _windows(starts, SHARED_WINDOW)
    if len(windows) >= 2:
        result["second_over_first"] = round(windows[1] / windows[0], 3)
        result["slowest_later_over_second"] = round(min(windows[2:] or windows[1:]) /
                                                    windows[1], 3)
    return result


def _windows(starts: list[float], seconds: float) -> list[float]:
    """Pages/s of each whole `seconds` from the first fetch start (a last, partial window is
    left out: its pace is the crawl being told to stop)."""
    counts: list[int] = []
    for t in starts:
        i = int((t - starts[0]) // seconds)
        counts.extend([0] * (i + 1 - len(counts)))
        counts[i] += 1
    return [round(c / seconds, 1) for c in counts[:-1]]


def _crawl_shared(args: argparse.Namespace, server: SynthServer, workdir: Path
                  ) -> tuple[Run, dict[str, int], list[float], dict[int, float]]:
    """Crawl from host 0 until N page fetches started; their start times, and this process's
    CPU seconds at each page number `_third` needs."""
    from larbinpy.config import parse_config
    from larbinpy.crawler import Crawler

    n = args.shared_ip
    third = n // 3
    marks = {0, third, n - 1 - third, n - 1}
    starts: list[float] = []
    cpu: dict[int, float] = {}
    crawlers: list[Crawler] = []

    def started(site: Any, job: Any) -> None:
        if len(starts) in marks:
            cpu[len(starts)] = cpu_seconds()[0]
        starts.append(time.monotonic())
        if len(starts) == n:
            crawlers[0].request_stop()

    config = (
        f"UserAgent larbinpy-bench\ndnsServers 127.0.0.1:{server.dns_port}\n"
        f"allowNetworks 127.0.0.0/8 end\npagesConnexions {args.connections}\n"
        f"connectionsPerHost {args.per_host}\nwaitDuration {args.wait}\n"
        f"startUrl http://{host_name(0)}:{server.http_port}/\nexitAtEnd\n"
        f"httpPort 0\ninputPort 0\noutput {args.output}\n"
        f"saveDir {workdir / 'save'}\nstateDir {workdir / 'state'}\n"
        f"hashSize {HASH_BITS}\nhashFunctions {HASH_FUNCTIONS}\n"
    )
    cfg = parse_config(config, str(workdir / "larbin.conf"))

    async def crawl() -> int:
        """Build the crawler on the running loop, then crawl."""
        crawlers.append(Crawler(cfg, scratch=True, on_page_fetch=started))
        return await crawlers[0].run()

    tune_allocator()
    tune_gc()
    code, wall, cpu_s, sys_s = measured(crawl)
    if code != 0:
        raise RuntimeError(f"crawl exited with code {code}")
    stats = crawlers[0].stats
    outcomes = {str(k): v for k, v in stats.outcomes.items() if v}
    run = Run(outcomes.get("success", 0), wall, cpu_s, sys_s, peak_rss_mb(), stats.bytes)
    return run, outcomes, starts, cpu


def _third(starts: list[float], cpu: dict[int, float], a: int, b: int) -> dict[str, float]:
    """Pages/s and CPU ms per page from page fetch `a` to page fetch `b` (started)."""
    seconds = starts[b] - starts[a]
    spent = cpu[b] - cpu[a] if a in cpu and b in cpu else float("nan")
    return {"pages": b - a, "seconds": round(seconds, 3),
            "pages_per_s": round((b - a) / seconds, 1) if seconds > 0 else 0.0,
            "cpu_ms_per_page": round(spent / (b - a) * 1000, 3)}


def shared_ip_text(result: dict[str, Any]) -> str:
    """The report of `--shared-ip`."""
    r = result["crawl"]
    lines = [f"larbinpy bench --shared-ip {result['pages_wanted']}: {result['hosts']} hosts on "
             f"one IP, each page linking {result['links']} of them; waitDuration "
             f"{result['wait']}, {result['per_host']} per host, {result['connections']} "
             f"connections, output {result['output']} in {result.get('dir', '?')}, "
             f"loop {result['loop']}",
             f"  crawl: {r['pages']} pages in {r['seconds']:.2f} s = {r['pages_per_s']:.1f} "
             f"pages/s; CPU {r['cpu_seconds']:.2f} s = {r['cpu_ms_per_page']:.3f} ms/page"]
    for name in ("first_third", "last_third"):
        if name in result:
            t = result[name]
            lines.append(f"  {name.replace('_', ' ')}: {t['pages']} pages in "
                         f"{t['seconds']:.2f} s = {t['pages_per_s']:.1f} pages/s; CPU "
                         f"{t['cpu_ms_per_page']:.3f} ms/page")
    if "last_over_first" in result:
        lines.append(f"  last third / first third: pages/s x{result['last_over_first']:.3f} "
                     "(issue 21 asks for at least x0.70)")
    if result.get("windows"):
        lines.append(f"  pages/s in each {SHARED_WINDOW:.0f} s: "
                     + ", ".join(f"{w:.1f}" for w in result["windows"]))
    if "second_over_first" in result:
        lines.append(f"  second window / first: x{result['second_over_first']:.3f} (issue 31 "
                     "asks for at least x0.90; the first holds the start-up's DNS burst); "
                     f"slowest later window / second: x{result['slowest_later_over_second']:.3f}")
    lines.append(f"  crawl outcomes: {result['outcomes']}")
    lines += [f"WARNING: {w}" for w in result["warnings"]]
    return "\n".join(lines)


def default_dir(candidate: str = "/dev/shm", room: int = 2 << 30) -> str | None:
    """Where the bench writes unless --dir says: `candidate` (memory) when it is a writable
    folder with `room` bytes free, else None (the system's temporary directory).

    Why memory: the figure should be the crawler's cost, the same from one run to the next. On
    a disk, creating a file can cost many times more right after many were deleted (ext4
    without a journal skips recently freed inodes, scanning past each): each bench run
    deletes its files and slows the next. `--dir /tmp` measures a disk on purpose."""
    try:
        free = os.statvfs(candidate)
    except OSError:
        return None
    if not os.access(candidate, os.W_OK) or free.f_bavail * free.f_frsize < room:
        return None
    return candidate


def run_and_report(
    args: argparse.Namespace,
    measure: Callable[[argparse.Namespace, Path], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """Measure in a temporary folder, print the report (or JSON); 1 if the measure fails."""
    where = args.dir if args.dir is not None else default_dir()
    if where is not None:
        Path(where).mkdir(parents=True, exist_ok=True)  # a --dir that does not exist yet
    with tempfile.TemporaryDirectory(prefix="larbinpy-bench-", dir=where) as tmp:
        try:
            result = measure(args, Path(tmp))
        except Exception as exc:
            print(f"larbinpy bench: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    result["dir"] = str(Path(tmp).parent)
    print(json.dumps(result) if args.json else render(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `larbinpy bench`; 0 on success, 1 if the server or the crawl fails."""
    args = parser().parse_args(argv)
    if args.recrawl or args.news or args.soak:  # own defaults for the options shared
        p = parser()
        p.set_defaults(**(news.DEFAULTS if args.news else soak.DEFAULTS if args.soak
                          else recrawl.DEFAULTS))
        args = p.parse_args(argv)
    if args.micro or args.frontier or args.hashset or args.seen or args.schedule:
        return state_bench(args)
    setup_logging(-1)  # warnings only: logging must not cost the crawl CPU
    if args.nodes or args.redis_seen:
        return nodes_bench(args)
    if args.shared_ip:
        return run_and_report(args, shared_ip_bench, shared_ip_text)
    if args.news:  # `--news` and `--recrawl --news` alike
        return run_and_report(args, news.news_bench, news.report_text)
    if args.soak:
        return run_and_report(args, soak.soak_bench, soak.report_text)
    if args.recrawl:
        return run_and_report(args, recrawl.recrawl_bench, recrawl.report_text)
    return run_and_report(args, bench, report_text)
