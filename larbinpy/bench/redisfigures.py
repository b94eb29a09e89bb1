"""What a cluster costs its Redis: commands, CPU and memory, read from the server's INFO.

Not used by a crawl. `larbinpy bench --nodes` takes a `RedisFigures` before and after each
cluster run (commands a page, Redis CPU a page, bytes of the seen-set a URL), and
`larbinpy bench --redis-seen N` drives one node's admission (`cluster/redis_seen.py`) with N
distinct URLs, without crawling, to measure the seen-set where a crawl would take hours.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from larbinpy.bench.localredis import LocalRedis
from larbinpy.frontier.interface import Frontier
from larbinpy.records import Job

PAGE_LINKS, PAGE_NEW = 50, 10  # as `--seen`: a page's links, of them new
RECENT = 2000  # half the duplicates are among the last URLs (a site's navigation)
PAGES_AT_ONCE = 40  # pages parsed while one round trip is in flight (2,000 links)


@dataclass
class RedisFigures:
    """One reading of a Redis server's counters."""

    cpu: float  # seconds, user + system
    calls: dict[str, int]  # commands by name (those run by scripts too)
    used_memory: int

    @classmethod
    def read(cls, db: redis.Redis) -> RedisFigures:
        """INFO cpu, commandstats and memory, now."""
        info = db.info("all")
        calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()
                 if k.startswith("cmdstat_") and isinstance(v, dict)}
        return cls(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]), calls,
                   int(info["used_memory"]))

    def since(self, before: RedisFigures, per: int) -> dict[str, Any]:
        """What happened between `before` and this reading, per `per` (pages or URLs); the
        INFO commands of the readings themselves left out."""
        calls = {name: n - before.calls.get(name, 0) for name, n in self.calls.items()
                 if name != "info"}
        calls = {name: n for name, n in calls.items() if n}
        per = max(per, 1)
        top = sorted(calls.items(), key=lambda kv: -kv[1])
        return {
            "redis_cpu_ms": round((self.cpu - before.cpu) / per * 1000, 4),
            "redis_commands": round(sum(calls.values()) / per, 2),
            "redis_commands_by_name": {name: round(n / per, 3) for name, n in top},
            "redis_memory_bytes": round((self.used_memory - before.used_memory) / per, 1),
        }


def seen_set_bytes(db: redis.Redis, prefix: str) -> dict[str, Any]:
    """The seen-set's keys (`fp:*`): how many, the fingerprints they hold, their memory
    (MEMORY USAGE: the value, the key and Redis's bookkeeping of it), and its encodings."""
    keys = members = used = 0
    encodings: dict[str, int] = {}
    for key in db.scan_iter(prefix + "fp:*", count=1000):
        keys += 1
        members += int(db.scard(key))
        used += int(db.memory_usage(key, samples=0) or 0)
        enc = db.object("encoding", key)
        name = enc.decode() if isinstance(enc, bytes) else str(enc)
        encodings[name] = encodings.get(name, 0) + 1
    return {"seen_keys": keys, "fingerprints": members, "seen_bytes": used,
            "seen_bytes_per_url": round(used / max(members, 1), 2), "encodings": encodings}


class _Sink:
    """The node's local FIFO, emptied as it fills: `--redis-seen` fetches nothing."""

    def __init__(self) -> None:
        self.pushed = 0

    def __len__(self) -> int:
        return 0

    def push(self, jobs: Any) -> None:
        self.pushed += sum(1 for _ in jobs)

    def flush(self) -> None:
        """Nothing kept."""

    def pop(self) -> Job | None:
        return None


def redis_seen_bench(n: int, workdir: Path) -> dict[str, Any]:
    """N distinct URLs through one node's admission (its exact local cache, then the ADMIT
    script) against a fresh local redis-server: URLs lost, Redis CPU and commands a URL, the
    seen-set's bytes a URL. Pages as `--seen`'s: 50 links, 10 new, 20 among the last 2,000,
    20 drawn from every URL before."""
    with LocalRedis(workdir / "redis") as local, \
            tempfile.TemporaryDirectory(prefix="cache-", dir=workdir) as cache_dir:
        return asyncio.run(_drive(n, local.url, Path(cache_dir)))


async def _drive(n: int, url: str, cache_dir: Path) -> dict[str, Any]:
    """The loop of `redis_seen_bench`: pages through the cache into admission."""
    from larbinpy.cluster.link import Link
    from larbinpy.cluster.redis_seen import Admission
    from larbinpy.config import Config
    from larbinpy.frontier.seen import ExactSeenSet
    from larbinpy.stats import Outcome, Stats

    cfg = Config()
    db = redis.Redis.from_url(url)
    link = Link(url, "seen", "node1")
    cache = ExactSeenSet(cache_dir / "seen.bitmap", cfg.hash_size, 1, cfg.seen_cache)
    sink, stats = _Sink(), Stats()
    frontier: Frontier = sink  # type: ignore[assignment]  # the FIFO's calls, nothing kept
    adm = Admission(link, cache, frontier, stats, lambda site: "node1", lambda: 1,
                    lambda: None)
    pending = link.key("pending", "node1")
    rng = random.Random(1976)
    before = RedisFigures.read(db)
    made = tested = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while made < n:
        for _ in range(PAGES_AT_ONCE):
            if made >= n:
                break
            new = [_url(i) for i in range(made, min(made + PAGE_NEW, n))]
            made += len(new)
            old = [_url(made - 1 - rng.randrange(min(made, RECENT)))
                   for _ in range((PAGE_LINKS - PAGE_NEW) // 2)]
            old += [_url(rng.randrange(made)) for _ in range((PAGE_LINKS - PAGE_NEW) // 2)]
            links = list(dict.fromkeys(new + old))
            tested += len(links)
            fresh = cache.missing(links)
            adm.admit([Job(u, 1) for u in fresh])
        await adm.drain()
        db.delete(pending)  # as fetched: the pending hash holds only what waits for a fetch
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = RedisFigures.read(db)
    seen = seen_set_bytes(db, link.prefix)
    round_trips = link.round_trips
    await link.close()
    cache.close()
    db.close()
    figures = after.since(before, n)
    return {"distinct_urls": n, "links_tested": tested, "admitted": sink.pushed,
            "lost": n - sink.pushed, "redis_dups": stats.outcomes[Outcome.urlDup],
            "round_trips": round_trips, "seconds": round(seconds, 1),
            "node_cpu_us_per_url": round(cpu / n * 1e6, 2),
            "redis_cpu_us_per_url": round(figures["redis_cpu_ms"] * 1000, 2),
            "redis_commands_per_url": figures["redis_commands"],
            "redis_commands_by_name": figures["redis_commands_by_name"],
            "redis_memory_bytes_per_url": figures["redis_memory_bytes"], **seen}


def _url(i: int) -> str:
    """The i-th distinct URL (100,003 hosts)."""
    return f"http://h{i % 100_003}.example/dir/page-{i}.html"
