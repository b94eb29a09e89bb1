"""Scale-out on Redis with real processes: `larbinpy -c` nodes sharing one redis-server, one
killed with SIGKILL mid-crawl. Default heartbeats (0.5 s, dead after 3 s)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import Counter

import pytest
import redis.asyncio as aioredis
import redisserver
from conftest import until
from test_cluster import (
    by_node,
    expected_pages,
    grid_web,
    live_nodes,
    node_conf,
    node_names,
    star_hosts,
)

from larbinpy.bench.localredis import redis_server_path

redis_url = redisserver.redis_url  # the fixture: a real redis-server per test


async def start_node(tw, url: str, node: str, body: str = "") -> asyncio.subprocess.Process:
    """`larbinpy -c node.conf` as its own process."""
    conf = tw.tmp / f"{node}.conf"
    conf.write_text(node_conf(tw, url, node, body))
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), "-q",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=tw.tmp)


async def expiries(url: str) -> dict[str, float]:
    """Live node -> the expiry its last heartbeat set (Redis's clock, ms)."""
    r = aioredis.Redis.from_url(url)
    try:
        return {n.decode(): t for n, t in await r.zrange("larbinpy:test:nodes", 0, -1,
                                                          withscores=True)}
    finally:
        await r.aclose()


async def wait_live(url: str, nodes: set[str]) -> None:
    """Until these nodes are live and each has beaten since they all were: a heartbeat reads
    the live set back, so each has then seen the others."""
    joined: dict[str, float] = {}  # the expiries read when all were first live

    async def all_live() -> bool:
        live = await expiries(url)
        if nodes <= set(live):
            joined.update(live)
        return bool(joined)

    async def all_beaten_since() -> bool:
        live = await expiries(url)
        return all(live.get(n, 0) > joined[n] for n in nodes)

    await until(all_live, f"{sorted(nodes)} joining")
    await until(all_beaten_since, f"{sorted(nodes)} beating once all had joined")


async def finish(proc: asyncio.subprocess.Process) -> None:
    """Wait for a node to exit 0 (bounded)."""
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]


async def test_kill_9_of_a_node_the_survivors_finish_everything(make_web, redis_url):
    hosts, pages = 9, 8
    tw = await make_web(grid_web(hosts, pages, delay=0.15))
    star_hosts(tw, hosts, pages)
    names = node_names(tw, hosts, 3)
    n2 = await start_node(tw, redis_url, names[1])
    n3 = await start_node(tw, redis_url, names[2])
    await wait_live(redis_url, set(names[1:]))
    n1 = await start_node(tw, redis_url, names[0], f"startUrl {tw.url('h0.test')}")
    victim = names[1]
    await until(lambda: sum(h.headers.get("From") == f"{victim}@test" for h in tw.web.hits) >= 6,
                f"{victim} in the middle of its sites")
    n2.send_signal(signal.SIGKILL)
    await n2.wait()
    await asyncio.gather(finish(n1), finish(n3))
    fetched = Counter(tw.pages_fetched())
    assert set(fetched) == expected_pages(tw, hosts, pages)
    # fetched twice at most: what was in flight on the victim, and its last fetches whose
    # removal from the pending hash (every 0.1 s) had not reached Redis
    refetched = sum(fetched.values()) - len(fetched)
    assert refetched <= 8, fetched
    owners = by_node(tw)
    taken_over = [h for h, nodes in owners.items() if victim in nodes and len(nodes) > 1]
    assert taken_over, owners  # the victim's sites were finished by the survivors
    assert victim not in await live_nodes(redis_url)


@pytest.mark.skipif(redis_server_path() is None, reason="redis-server is not installed "
                    "(.ci/run installs it: apt-get install redis-server)")
async def test_bench_nodes_compares_clusters_with_the_embedded_crawler():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "bench", "--nodes", "1,2", "--hosts", "4",
        "--pages", "10", "--connections", "8", "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    result = json.loads(out)
    assert [r["nodes"] for r in result["runs"]] == [0, 1, 2]
    assert all(r["pages"] == 40 for r in result["runs"]), result
    assert result["runs"][0]["redis_round_trips_per_page"] == 0
    assert all(r["redis_round_trips_per_page"] > 0 for r in result["runs"][1:])
    for run in result["runs"][1:]:  # what Redis did: commands, and the seen-set it keeps
        assert run["redis_commands_per_page"] > run["redis_round_trips_per_page"]
        assert run["fingerprints"] >= 40  # every page's URL (and the links that failed)
        assert set(run["encodings"]) == {"intset"}  # 8 bytes a fingerprint


@pytest.mark.skipif(redis_server_path() is None, reason="redis-server is not installed "
                    "(.ci/run installs it: apt-get install redis-server)")
async def test_bench_redis_seen_admits_every_url_once_into_intsets():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "bench", "--redis-seen", "3000",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    result = json.loads(out)
    assert (result["admitted"], result["lost"], result["fingerprints"]) == (3000, 0, 3000)
    assert result["encodings"] == {"intset": result["seen_keys"]}
    assert result["redis_commands_by_name"]["sadd"] >= 1.0  # each URL once, its dups again
    assert result["seen_bytes_per_url"] > 8  # a fingerprint, and its set's share
