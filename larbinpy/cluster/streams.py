"""URLs between nodes: each node's inbound stream, its outbox, and its pending hash upkeep.

* `Inbox` reads this node's stream `in:<node>` through the consumer group: the jobs go into
  the local persistent FIFO (pushed and flushed) and only then, in one MULTI/EXEC, into the
  node's `pending` hash while the entry is acknowledged and deleted. A node killed between the
  two leaves the entry unacknowledged: its next incarnation re-reads it (ID 0 first), or
  whoever recovers the node moves it. Delivered at least once, never lost.
* `Outbox` sends jobs this node holds but no longer owns (the live set changed, or a URL
  arrived before the view was fresh) to their owner's stream, removing them from the pending
  hash in the same script; an owner that is not live refuses, and the jobs are routed again
  once a heartbeat has refreshed the view.
* `Fetched` removes fetched URLs from the pending hash, a batch every FLUSH_S, each once the
  links of its page are through admission: after a `kill -9`, what is still pending is what
  survivors fetch again -- URLs in flight and the last FLUSH_S of fetches at most.

The pending hash is why nothing is lost when a node dies for good: the node's FIFO files are
on its own disk, so every URL it holds and has not fetched is also in Redis (about 100 bytes
a URL of Redis memory, for the URLs queued in the whole cluster).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, cast

from larbinpy.cluster.link import GROUP, Link, decode_entry, encode_extra
from larbinpy.frontier.interface import Frontier
from larbinpy.records import Job

log = logging.getLogger("larbinpy.cluster")

READ_COUNT = 64  # stream entries read at a time
BLOCK_MS = 200  # longest wait for an entry in one read
FLUSH_S = 0.1  # fetched URLs are removed from the pending hash this often
CHUNK = 1000  # URLs per command (Lua's unpack limit is 8000 values)

# KEYS: nodes, pending:me, in:owner. ARGV: owner, then url, extra pairs.
# 0 when the owner is not live (nothing done), else 1: sent, and no longer pending here.
FORWARD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) < now then return 0 end
local lines, urls = {}, {}
for i = 2, #ARGV, 2 do
  lines[#lines + 1] = ARGV[i] .. '\\t' .. ARGV[i + 1]
  urls[#urls + 1] = ARGV[i]
end
redis.call('XADD', KEYS[3], '*', 'j', table.concat(lines, '\\n'))
redis.call('HDEL', KEYS[2], unpack(urls))
return 1
"""


class Inbox:
    """This node's stream into its local FIFO, acknowledged once the FIFO holds the jobs."""

    def __init__(self, link: Link, frontier: Frontier, next_seq: Callable[[], int],
                 on_queued: Callable[[], None],
                 on_histories: Callable[[list[bytes]], None],
                 remember: Callable[[list[str]], None]) -> None:
        self.link, self.frontier = link, frontier
        self.next_seq, self.on_queued = next_seq, on_queued
        self.on_histories = on_histories  # revisits handed over: to the recrawl schedule
        # the local seen-set, Redis's cache: what arrives here is in Redis's seen-set already
        # (ADMIT added it before sending it), and this node, owning those sites, meets their
        # URLs again as links of their pages: the cache spares them a trip to Redis
        self.remember = remember
        self.stream = link.key("in", link.node)
        self.pending = link.key("pending", link.node)
        self.node_key = link.key("node", link.node)
        self.busy = False  # entries delivered and not yet acknowledged
        self.received = 0  # jobs received

    async def run(self) -> None:
        """This consumer's unacknowledged entries first (ID 0), then new ones, until stopping.

        A read blocks BLOCK_MS at most, so a stop waits no longer than that."""
        start = "0"
        while not self.link.stopping.is_set():
            entries = await self.link.retrying("reading the inbound stream",
                                               functools.partial(self._read, start))
            if entries:
                self.busy = True
                try:
                    await self._take(entries)
                finally:
                    self.busy = False
            elif start == "0":
                start = ">"

    async def _read(self, start: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
        """One XREADGROUP (blocking briefly for new entries)."""
        self.link.round_trips += 1
        reply: Any = await self.link.redis.xreadgroup(  # redis-py types replies as a union
            GROUP, self.link.node, {self.stream: start}, count=READ_COUNT,
            block=BLOCK_MS if start == ">" else None)
        return cast(list[tuple[bytes, dict[bytes, bytes]]], reply[0][1]) if reply else []

    async def _take(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        """Into the local FIFO (flushed) or, revisits with their history, the schedule
        (written), then pending + acknowledged + deleted, atomically."""
        jobs: list[Job] = []
        histories: list[bytes] = []
        ids = [entry_id for entry_id, _ in entries]
        for _, fields in entries:
            got, more = decode_entry(fields.get(b"j", b""))
            jobs += got
            histories += more
        if jobs:
            self.frontier.push(jobs)
            self.frontier.flush()
            self.remember([job.url for job in jobs])
        if histories:
            self.on_histories(histories)
        commands: list[tuple[object, ...]] = []
        for i in range(0, len(jobs), CHUNK):
            pairs = [x for job in jobs[i:i + CHUNK] for x in (job.url, encode_extra(job))]
            commands.append(("HSET", self.pending, *pairs))
        commands += [("XACK", self.stream, GROUP, *ids), ("XDEL", self.stream, *ids),
                     ("HSET", self.node_key, "idle", 0, "seq", self.next_seq())]
        await self.link.retrying("acknowledging inbound URLs",
                                 lambda: self.link.transaction(commands))
        self.received += len(jobs)
        if jobs:
            self.on_queued()


class Outbox:
    """Jobs held here for sites other nodes own, on their way to the owners' streams."""

    def __init__(self, link: Link, refresh: Callable[[], Awaitable[None]],
                 route: Callable[[Job], None]) -> None:
        self.link = link
        self.refresh, self.route = refresh, route  # refresh(): a heartbeat (awaitable)
        self.script = link.script(FORWARD)
        self.pending = link.key("pending", link.node)
        # jobs by owner, each with the page history of a revisit handed over (or None)
        self.queues: dict[str, list[tuple[Job, bytes | None]]] = defaultdict(list)
        self.busy = False
        self.wake = asyncio.Event()
        self.forwarded = 0

    def add(self, owner: str, job: Job, history: bytes | None = None) -> None:
        """Send this job to `owner` (soon, in a batch), with its page's history if given."""
        self.queues[owner].append((job, history))
        self.wake.set()

    def idle(self) -> bool:
        """Nothing waiting to be sent."""
        return not self.queues and not self.busy

    async def run(self) -> None:
        """Until the cluster stops: wait for jobs, send them."""
        while not self.link.stopping.is_set():
            if not self.queues:
                self.wake.clear()
                await self.wake.wait()
                continue
            await self.drain()

    async def drain(self) -> None:
        """Send everything queued; jobs an owner refused are routed again after a heartbeat."""
        self.busy = True
        try:
            while self.queues:
                owner, jobs = self.queues.popitem()
                refused: list[tuple[Job, bytes | None]] = []
                for i in range(0, len(jobs), CHUNK):
                    chunk = jobs[i:i + CHUNK]
                    sent = await self.link.retrying(
                        "forwarding URLs", functools.partial(self._send, owner, chunk))
                    if sent:
                        self.forwarded += len(chunk)
                    else:
                        refused += chunk
                if refused:
                    await self.link.retrying("refreshing the live set", self.refresh)
                    for job, _ in refused:  # the history stays behind: fetched unconditionally
                        self.route(job)
        finally:
            self.busy = False

    async def _send(self, owner: str, jobs: list[tuple[Job, bytes | None]]) -> bool:
        """One FORWARD script: True when sent."""
        args: list[object] = [owner]
        for job, history in jobs:
            args += (job.url, encode_extra(job, history))
        keys = [self.link.key("nodes"), self.pending, self.link.key("in", owner)]
        return bool(await self.link.call(self.script, keys, args))


class Fetched:
    """URLs fetched here, removed from this node's pending hash in batches."""

    def __init__(
        self, link: Link, parse_pending: Callable[[], None],
        settled: Callable[[], Awaitable[bool]],
    ) -> None:
        self.link = link
        self.pending = link.key("pending", link.node)
        self.urls: list[str] = []
        # A fetched page's links must be in Redis before its URL leaves the pending hash, or a
        # kill -9 in between loses them: the parser stage passes the links on to admission
        # (`parse_pending`), and admission says when they are through (`settled`).
        self.parse_pending, self.settled = parse_pending, settled

    def add(self, url: str) -> None:
        """A job of this node was fetched (whatever the outcome)."""
        self.urls.append(url)

    async def run(self) -> None:
        """Until the cluster stops: flush every FLUSH_S."""
        while not self.link.stopping.is_set():
            await self.link.pause(FLUSH_S)
            await self.flush()

    async def flush(self) -> None:
        """Remove the fetched URLs from the pending hash, once their pages' links are in."""
        self.parse_pending()
        done = len(self.urls)  # fetched before the links just handed over
        if not done or not await self.settled():
            return  # stopping: the clean stop admits everything, then flushes again
        while done:
            urls = self.urls[:min(CHUNK, done)]
            await self.link.retrying("removing fetched URLs",
                                     functools.partial(self.link.execute, "HDEL", self.pending,
                                                       *urls))
            del self.urls[:len(urls)]
            done -= len(urls)
