"""`larbinpy bench --schedule N`: the recrawl schedule alone, at scale, on a simulated clock.

N pages as a crawl of the synthetic web would schedule them (`http://hH.web.test/secK/pJ.html`
URLs over N/100 hosts, nginx-style ETags on 80%, Last-Modified on 85%, a sha1 digest, the
estimator state of a few visits), due times spread over RECRAWL_MAX; then the clock runs and
every page is popped when due and put again 1 h to 30 days later, with a checkpoint
(position, sync, release) every CHECKPOINT_EVERY pops, until N pages have been revisited. The
clock steps CLOCK_STEP seconds (1M / N times that below 1M pages, so a small run stays short).
Only the schedule's own calls are timed; pages are made between the timed calls.

`store` chooses the store the same workload drives (`schedstores.py`: ours, or SQLite with an
index on the due time); `kill9` then runs a child on the store, kills it with SIGKILL
mid-run and reopens it (`schedstores.kill9_recovery`).
"""

from __future__ import annotations

import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

from larbinpy.bench.schedstores import kill9_recovery, open_store
from larbinpy.frontier import freshness
from larbinpy.frontier.schedule import Schedule, Visit, lm_text

T0 = 1_800_000_000.0
RECRAWL_MIN, RECRAWL_MAX = 3600.0, 30 * 86400.0
GRANULARITY = 60.0
BATCH = 10_000  # pages made, then put, at a time
POP_BATCH = 1000  # pages popped at a time (a crawler's revisit batch)
CLOCK_STEP = 60.0  # simulated seconds between two pop rounds (at 1M pages and more)
CHECKPOINT_EVERY = 1_000_000  # pops between two checkpoints
PROGRESS = 1_000_000  # puts between two progress lines


def _stats_pool(rng: random.Random, n: int = 4096) -> list[bytes]:
    """Estimator states to draw pages' from (making one per page would cost more than the
    schedule's calls being measured)."""
    return [_stats(rng) for _ in range(n)]


def _stats(rng: random.Random) -> bytes:
    """The estimator state of a page after a few visits at its rate."""
    lam = 10 ** rng.uniform(-7, -3.5)
    stats, t = b"", T0 - 86400 * 60
    for _ in range(rng.randrange(1, 6)):
        gap = rng.uniform(RECRAWL_MIN, RECRAWL_MAX / 4)
        stats = freshness.observe(stats, t + gap, t, rng.random() < 1 - 2.718 ** (-lam * gap),
                                  prior=1 / RECRAWL_MIN)
        t += gap
    return stats


def make_page(j: int, hosts: int, due: float, rng: random.Random,
              pool: list[bytes] | None = None) -> Visit:
    """Page j of the simulated crawl, due at `due`. Integers are drawn as int(random() * k),
    not randrange (a loop in Python per call): a 100M-page run makes 100M pages."""
    r = rng.random
    h = int(r() * hosts)
    mtime = int(T0) - int(r() * (86400 * 365))
    etag = f'"{mtime:x}-{2000 + int(r() * 198_000):x}"' if r() < 0.8 else None
    lm = lm_text(mtime) if r() < 0.85 else None
    fetched = due - (RECRAWL_MIN + r() * (RECRAWL_MAX - RECRAWL_MIN))
    return Visit(f"http://h{h}.web.test/sec{int(r() * 10)}/p{j}.html", due, fetched, etag,
                 lm, rng.randbytes(20), fetched, 200 if r() < 0.9 else 304,
                 int(r() * 6), 0, 0, pool[int(r() * len(pool))] if pool else _stats(rng))


def _progress(line: str) -> None:
    """A progress line on stderr (a run at 10M pages takes a while)."""
    print(f"{time.strftime('%H:%M:%S')} schedule bench: {line}", file=sys.stderr, flush=True)


def _disk_bytes(directory: Path) -> int:
    """Bytes the schedule's files take (allocated blocks, as du counts them)."""
    return sum(e.stat().st_blocks * 512 for e in os.scandir(directory) if e.is_file())


def bench_schedule(n: int, directory: Path, seed: int = 29, revisits: int = 0,
                   store: str = "ours", kill9: float = 0.0) -> dict[str, Any]:
    """Put n pages, then pop `revisits` of them (0: n) as they come due and put each again:
    rates, bytes a page, peak RSS; with `kill9` (seconds), then the kill -9 check."""
    revisits = revisits or n
    rng = random.Random(seed)
    pool = _stats_pool(rng)
    hosts = max(100, n // 100)
    s = open_store(store, directory)
    put_s = 0.0
    for start in range(0, n, BATCH):
        if start and start % PROGRESS == 0:
            _progress(f"put {start}: {start / put_s:.0f}/s, "
                      f"{_disk_bytes(directory) / start:.1f} bytes a page, peak RSS "
                      f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
        batch = [make_page(j, hosts, T0 + rng.uniform(0, RECRAWL_MAX), rng, pool)
                 for j in range(start, min(n, start + BATCH))]
        t = time.perf_counter()
        s.put_many(batch)
        put_s += time.perf_counter() - t
    t = time.perf_counter()
    s.sync()
    put_s += time.perf_counter() - t
    after_puts = _disk_bytes(directory)
    pop_s = reput_s = checkpoint_s = 0.0
    popped, clock, since = 0, T0, 0
    step = CLOCK_STEP * max(1.0, 1_000_000 / n)  # fewer pages: as many pages a round
    peak_bytes = after_puts
    while popped < revisits:
        clock += step
        while popped < revisits:
            t = time.perf_counter()
            got = s.pop_due(clock, POP_BATCH)
            pop_s += time.perf_counter() - t
            if not got:
                break
            for v in got:  # fetched: put again after its next interval
                v.fetched_at = v.captured_at = clock
                v.due = clock + rng.uniform(RECRAWL_MIN, RECRAWL_MAX)
            t = time.perf_counter()
            s.put_many(got)
            reput_s += time.perf_counter() - t
            popped += len(got)
            since += len(got)
        if since >= CHECKPOINT_EVERY:
            since = 0
            # The most the files take: consumed files wait for the checkpoint to go.
            peak_bytes = max(peak_bytes, _disk_bytes(directory))
            _progress(f"popped {popped}: {popped / pop_s:.0f}/s, put again "
                      f"{popped / reput_s:.0f}/s, {_disk_bytes(directory) / n:.1f} bytes a page, "
                      f"day {(clock - T0) / 86400:.1f}")
            t = time.perf_counter()
            pos = s.position()
            s.sync()
            s.release(pos)
            checkpoint_s += time.perf_counter() - t
            peak_bytes = max(peak_bytes, _disk_bytes(directory))
    t = time.perf_counter()
    pos = s.position()
    s.sync()
    s.release(pos)
    checkpoint_s += time.perf_counter() - t
    end_bytes = _disk_bytes(directory)
    few = [e for e in os.scandir(directory) if e.is_file()]
    peak_bytes = max(peak_bytes, end_bytes)
    result: dict[str, Any] = {
        "store": store, "pages": n, "hosts": hosts, "scheduled": len(s), "revisits": popped,
        "puts_per_s": round(n / put_s), "pops_per_s": round(popped / pop_s),
        "reputs_per_s": round(popped / reput_s),
        # A pop and its put again together: where a store writes a put (at the put, at a
        # flush, or at the pop that must see it) differs, a revisit's cost does not.
        "revisits_per_s": round(popped / (pop_s + reput_s)), "checkpoint_s": round(checkpoint_s, 1),
        "simulated_days": round((clock - T0) / 86400, 1),
        "bytes_per_page_after_puts": round(after_puts / n, 1),
        "bytes_per_page_after_revisits": round(end_bytes / n, 1),
        "bytes_per_page_peak": round(peak_bytes / n, 1),
        # (ours only: its index is one file of 2 KiB hash buckets)
        "index_bytes_per_page": (round(s.index.buckets * 2048 / n, 1)
                                 if isinstance(s, Schedule) else None),
        "files": sum(1 for _ in os.scandir(directory)),
        # Which file holds the bytes, when there are few (SQLite's: the database, its WAL,
        # which keeps the size of the largest transaction, and the WAL's index)
        "bytes_per_page_by_file": ({e.name: round(e.stat().st_blocks * 512 / n, 1) for e in few}
                                   if len(few) <= 4 else None),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    s.close()
    if kill9:
        result["kill9"] = kill9_recovery(store, directory, clock, pos, step, kill9)
    return result
