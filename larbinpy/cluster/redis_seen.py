"""The cluster's input step: the exact seen-set in Redis, and routing of each new URL.

In cluster mode the input stage still normalizes and scopes URLs, and tests them against a
local cache (the node's own exact seen-set, `frontier/seen.py`'s `ExactSeenSet`, holding what
this node has admitted or found seen); what the cache has not seen goes to `Admission` (the
input stage's `Admission` seam, `stages/input.py`), which batches it and makes one round trip:

* one Lua script adds every URL's 64-bit fingerprint (`seen.fingerprint`, the single node's)
  to the cluster's set of fingerprints; SADD says whether it was there -- a test-and-set,
  atomic across nodes: a URL is new for exactly one node, and two URLs are confused only when
  their 64-bit fingerprints are equal (the single node's birthday bound: 2.7e-4 URLs expected
  lost over a crawl of 10^8);
* in the same script each new URL goes where it belongs: this node's `pending` hash (then the
  local FIFO) for sites this node owns, the owner's `in` stream for the others (an owner that
  is no longer live keeps it here; the local FIFO forwards it once the view is fresh).

Why one script: recording the fingerprint and the URL somewhere durable happen together, so
a `kill -9` at any moment never leaves a URL marked seen and recorded nowhere (the embedded
crawler gets the same guarantee by journaling before marking seen). Why in Redis rather than
in each site owner: a site changes owner when a node joins or dies, and a dead node's disk is
gone; a set in Redis moves with nothing.

How the fingerprints are stored (`fp:<digits>` sets): Redis keeps a set of at most
`set-max-intset-entries` (512) integers as an intset, a sorted array of 8-byte integers, and
any larger set as a hash table of some 60 bytes a member. So no set here grows beyond
`CAP` = 511 members (the intset is then exactly 4,096 bytes, a jemalloc size class): a
fingerprint, written in decimal, goes to the set named by its last `ROOT` = 4 digits (10,000
sets, 5.1M fingerprints); when that one is full, to the set of its last 5 digits (100,000
sets, 51M), and so on, a digit more a level. The script walks that path: a full set is
searched (SISMEMBER), the first one not full takes the fingerprint (SADD). Sets only grow, so
a fingerprint found nowhere on its path is new, and is stored in one place only. Redis memory:
8 bytes a URL in its set, plus each set's key and header (some 90 bytes) shared by its members:
about 1 MB for the first level's 10,000 sets while they fill, then 9-12 bytes a URL (the most
just after a level is opened, its sets nearly empty): 9.18 measured at 10M URLs
(docs/benchmarks.md). Nothing else of a seen URL stays in Redis (its job leaves the pending
hash once fetched).

Batching: jobs of every page discovered while a round trip is in flight go in the next one,
so a page's 40 links cost at most one round trip, and under load less. A URL the cache has
seen never costs a round trip: the cache holds only URLs already in Redis's set (added after
the round trip, or received from another node: `streams.Inbox`), and it is exact, so a cache
hit is a Redis hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from larbinpy.cluster.link import Link, encode_extra
from larbinpy.frontier.interface import Frontier
from larbinpy.frontier.seen import fingerprint
from larbinpy.links.urls import site_key
from larbinpy.records import Job
from larbinpy.stats import Outcome, Stats

log = logging.getLogger("larbinpy.cluster")

BATCH = 2000  # jobs per admission round trip at most
SETTLE_POLL_S = 0.1  # settled(): how often a waiter re-checks whether the loops are stopping
CAP = 511  # fingerprints a set at most: an intset of 8 + 511 * 8 = 4,096 bytes (see above)
ROOT = 4  # the first level's sets are named by a fingerprint's last 4 decimal digits
_SIGN = 1 << 63  # fingerprints travel as signed 64-bit integers (an intset's members)

# KEYS: nodes, pending:me, node:me, admitted. ARGV: prefix, me, seq, CAP, ROOT, then per job:
# owner, url, extra, force (1/0), fingerprint. Returns one flag a job (0, 1, 2).
ADMIT = """
local prefix, me, seq = ARGV[1], ARGV[2], ARGV[3]
local cap, root = tonumber(ARGV[4]), tonumber(ARGV[5])
local fp_prefix = prefix .. 'fp:'
local function add(fp)
  local digits = root
  while true do
    local key = fp_prefix .. string.sub(fp, -digits)
    if redis.call('SCARD', key) < cap then return redis.call('SADD', key, fp) == 1 end
    if redis.call('SISMEMBER', key, fp) == 1 then return false end
    digits = digits + 1
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local flags, sent, own, fresh_n, i = {}, {}, 0, 0, 6
while i <= #ARGV do
  local owner, url, extra, force, fp = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  local fresh = add(fp) or force == '1'
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


def redis_fingerprint(url: str) -> int:
    """The URL's fingerprint as Redis stores it: `seen.fingerprint`, as a signed 64-bit
    integer (a set of those is an intset)."""
    fp = fingerprint(url)
    return fp - (1 << 64) if fp & _SIGN else fp


class SeenCache(Protocol):
    """The local seen-set as the Redis one's cache: it must be exact (a hit skips Redis)."""

    def add(self, keys: Iterable[str]) -> None:
        """Record keys as seen."""
        ...


class Admission:
    """Batches candidate jobs into ADMIT round trips; own new jobs go to the local FIFO."""

    def __init__(
        self, link: Link, cache: SeenCache, frontier: Frontier, stats: Stats,
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
        owner, me = self.owner, self.link.node
        args: list[object] = [self.link.prefix, me, self.next_seq(), CAP, ROOT]
        for job, force in batch:
            args += (owner(site_key(job.url)), job.url, encode_extra(job), "1" if force else "0",
                     redis_fingerprint(job.url))
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
