"""The cluster's input step: the seen-set in Redis bitmaps, and routing of each new URL.

In cluster mode the input stage still normalizes and scopes URLs, and tests them against a
local cache (the node's own `BitmapSeenSet`, with the same bit positions); what the cache has
not seen goes to `Admission` (the input stage's `Admission` seam, `stages/input.py`), which
batches it and makes one round trip:

* one Lua script sets every URL's bits in Redis with SETBIT, which returns the old bit --
  larbin's test-and-set, atomic across nodes: a URL is new for exactly one node;
* in the same script each new URL goes where it belongs: this node's `pending` hash (then the
  local FIFO) for sites this node owns, the owner's `in` stream for the others (an owner that
  is no longer live keeps it here; the local FIFO forwards it once the view is fresh).

Why one script: setting the bit and recording the URL somewhere durable happen together, so
a `kill -9` at any moment never leaves a URL marked seen and recorded nowhere (the embedded
crawler gets the same guarantee by journaling before marking seen).

Batching: jobs of every page discovered while a round trip is in flight go in the next one,
so a page's 40 links cost at most one round trip, and under load less. A URL the cache has
seen never costs a round trip: the cache's bits were set in Redis first, so a cache hit is a
Redis hit. Bits: position p lives in key `seen:<p // 2^32>`, bit `p % 2^32` (512 MiB a key).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from larbinpy.cluster.link import KEY_BITS, Link, encode_extra
from larbinpy.frontier.interface import Frontier
from larbinpy.links.urls import site_key
from larbinpy.records import Job
from larbinpy.stats import Outcome, Stats

log = logging.getLogger("larbinpy.cluster")

BATCH = 2000  # jobs per admission round trip at most
SETTLE_POLL_S = 0.1  # settled(): how often a waiter re-checks whether the loops are stopping

# KEYS: nodes, pending:me, node:me, admitted. ARGV: prefix, me, K, seq, bits a key, then per
# job: owner, url, extra, force (1/0), K bit positions. Returns one flag a job (0, 1, 2).
ADMIT = """
local prefix, me, k, seq = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local key_bits = tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local flags, sent, own, fresh_n, i = {}, {}, 0, 0, 6
while i <= #ARGV do
  local owner, url, extra, force = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  local fresh = force == '1'
  for h = 1, k do
    local p = tonumber(ARGV[i])
    i = i + 1
    local key = prefix .. 'seen:' .. math.floor(p / key_bits)
    if redis.call('SETBIT', key, p % key_bits, 1) == 0 then fresh = true end
  end
  if not fresh then
    flags[#flags + 1] = '0'
  else
    fresh_n = fresh_n + 1
    if owner ~= me then
      local expiry = redis.call('ZSCORE', KEYS[1], owner)
      if not expiry or tonumber(expiry) < now then owner = me end
    end
    if owner == me then
      redis.call('HSET', KEYS[2], url, extra)
      own = own + 1
      flags[#flags + 1] = '1'
    else
      local lines = sent[owner]
      if not lines then lines = {}; sent[owner] = lines end
      lines[#lines + 1] = url .. '\\t' .. extra
      flags[#flags + 1] = '2'
    end
  end
end
for owner, lines in pairs(sent) do
  redis.call('XADD', prefix .. 'in:' .. owner, '*', 'j', table.concat(lines, '\\n'))
end
redis.call('HSET', KEYS[3], 'idle', 0, 'seq', seq)
if fresh_n > 0 then redis.call('INCRBY', KEYS[4], fresh_n) end
return table.concat(flags)
"""


class BitCache(Protocol):
    """The local seen-set as the Redis one's cache: ADMIT sets the same bits (`positions`)."""

    k: int  # bits a key sets

    def positions(self, key: str) -> list[int]:
        """The key's bit positions."""
        ...

    def add(self, keys: Iterable[str]) -> None:
        """Record keys as seen."""
        ...


class Admission:
    """Batches candidate jobs into ADMIT round trips; own new jobs go to the local FIFO."""

    def __init__(
        self, link: Link, cache: BitCache, frontier: Frontier, stats: Stats,
        owner: Callable[[str], str], next_seq: Callable[[], int],
        on_queued: Callable[[], None],
    ) -> None:
        self.link, self.cache, self.frontier, self.stats = link, cache, frontier, stats
        self.owner, self.next_seq, self.on_queued = owner, next_seq, on_queued
        self.script = link.script(ADMIT)
        self.keys = [link.key("nodes"), link.key("pending", link.node),
                     link.key("node", link.node), link.key("admitted")]
        self.buffer: list[tuple[Job, bool]] = []
        self.busy = False  # a batch is in a round trip
        self.wake = asyncio.Event()
        self.admitted = 0  # jobs ever through a round trip (the buffer holds the rest, in order)
        self.progress = asyncio.Event()  # set after each round trip
        self.sent = 0  # new URLs routed to other nodes

    def admit(self, jobs: list[Job], force: bool = False) -> None:
        """Input's `Admission`: candidate jobs (not in the local cache) wait for the next round
        trip."""
        self.buffer.extend((job, force) for job in jobs)
        self.wake.set()

    def idle(self) -> bool:
        """Nothing waiting for, or in, a round trip."""
        return not self.buffer and not self.busy

    async def run(self) -> None:
        """Until the cluster stops: wait for candidates, admit a batch."""
        while not self.link.stopping.is_set():
            if not self.buffer:
                self.wake.clear()
                await self.wake.wait()
                continue
            await self.drain_once()

    async def drain(self) -> None:
        """Admit everything buffered (at a clean stop)."""
        while self.buffer:
            await self.drain_once()

    async def drain_once(self) -> None:
        """One round trip for up to BATCH jobs; retried on a Redis error, never dropped."""
        batch = self.buffer[:BATCH]
        self.busy = True
        try:
            flags = await self.link.retrying("admitting URLs", lambda: self._admit(batch))
            del self.buffer[:len(batch)]  # only now: a failed stop keeps them counted
            self._route(batch, flags)
            self.admitted += len(batch)
            self.progress.set()
        finally:
            self.busy = False

    async def settled(self) -> bool:
        """Wait until every job handed over so far has been through its round trip (True);
        False as soon as the loops are stopping with some not through (the clean stop drains
        them, then asks again)."""
        mark = self.admitted + len(self.buffer)
        while self.admitted < mark:
            if self.link.stopping.is_set():
                return False
            self.progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.progress.wait(), SETTLE_POLL_S)
        return True

    async def _admit(self, batch: list[tuple[Job, bool]]) -> bytes:
        """The ADMIT round trip: one flag per job (0 seen, 1 own and new, 2 sent)."""
        positions = self.cache.positions  # the same bits as the cache: a cache hit is a hit
        owner, me = self.owner, self.link.node
        args: list[object] = [self.link.prefix, me, self.cache.k, self.next_seq(), KEY_BITS]
        for job, force in batch:
            args += (owner(site_key(job.url)), job.url, encode_extra(job), "1" if force else "0",
                     *positions(job.url))
        flags: bytes = await self.link.call(self.script, self.keys, args)
        return flags

    def _route(self, batch: list[tuple[Job, bool]], flags: bytes) -> None:
        """After the round trip: cache every URL, queue own new jobs locally, count."""
        self.cache.add(job.url for job, _ in batch)
        own = [job for (job, _), flag in zip(batch, flags, strict=True) if flag == 0x31]
        sent = flags.count(b"2")
        dups = len(batch) - len(own) - sent
        if own:
            # Already durable in the pending hash; the local FIFO is this node's work queue.
            self.frontier.push(own)
            self.frontier.flush()
            self.on_queued()
        self.sent += sent
        self.stats.urls_seen += len(own) + sent
        if dups:
            self.stats.count(Outcome.urlDup, dups)
