"""Distributed "is the crawl done?" (`exitAtEnd`): every node idle and every stream drained.

Each node's `node:<id>` hash holds `idle` and `seq`. The state in Redis changes only in
atomic steps that keep one invariant: a URL not yet fetched is in some stream, or in the
local queues of a node whose `idle` is 0, or belongs to a node in the `dead` set.

* a node gains work only through Redis -- acknowledging an inbound entry, or admitting URLs
  -- and that same step sets its `idle` to 0 and `seq` to a new local number;
* URLs for another node enter the owner's stream atomically with the seen-set's fingerprints
  (ADMIT) or with leaving the sender's pending hash (FORWARD), and leave a stream only by an
  acknowledgement that sets the receiver busy;
* a node reports idle with the `seq` it had when it found itself idle (nothing queued, in
  flight, buffered or unacknowledged): every step numbered up to then has completed, and any
  later one gets a larger number, so the report sets `idle` only if the `seq` in Redis is not
  larger -- a report overtaken by new work changes nothing. (Two steps in flight at once may
  reach Redis out of order; that is why the test is "not larger", not "equal".)

The check (in the same script as the report) says done when at least one URL was ever
admitted, the `dead` set is empty (nothing left to recover) and every node in `nodes` (live
or expired-but-not-yet-reaped) is idle with an empty stream. It sets `done`, which every
node sees at its next poll or heartbeat. The race this guards against -- a node's last page sends a
URL to an idle node -- is covered: the URL sits in the idle node's stream (not done) until
that node acknowledges it (busy), fetches it and reports idle again.
"""

from __future__ import annotations

from collections.abc import Callable

from larbinpy.cluster.link import Link

POLL_MIN_S = 0.02  # first poll after becoming idle
POLL_MAX_S = 0.5  # polls back off to this while idle

# KEYS: node:me, nodes, dead, admitted, done. ARGV: seq, prefix. 1 when the crawl is done.
REPORT = """
if tonumber(redis.call('HGET', KEYS[1], 'seq') or '0') <= tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'idle', 1)
end
if redis.call('GET', KEYS[5]) then return 1 end
if tonumber(redis.call('GET', KEYS[4]) or '0') == 0 then return 0 end
if redis.call('SCARD', KEYS[3]) > 0 then return 0 end
for _, n in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if redis.call('HGET', ARGV[2] .. 'node:' .. n, 'idle') ~= '1' then return 0 end
  if redis.call('XLEN', ARGV[2] .. 'in:' .. n) > 0 then return 0 end
end
redis.call('SET', KEYS[5], 1)
return 1
"""


class Termination:
    """Reports this node idle when it is, and learns when the whole cluster is done."""

    def __init__(self, link: Link, idle: Callable[[], bool], seq: Callable[[], int],
                 on_done: Callable[[], None]) -> None:
        self.link, self.idle, self.seq, self.on_done = link, idle, seq, on_done
        self.script = link.script(REPORT)
        self.keys = [link.key("node", link.node), link.key("nodes"), link.key("dead"),
                     link.key("admitted"), link.key("done")]
        self.done = False

    async def run(self) -> None:
        """Poll while idle (backing off), until the cluster is done."""
        delay = POLL_MIN_S
        while not self.done and not self.link.stopping.is_set():
            await self.link.pause(delay)
            if not self.idle():
                delay = POLL_MIN_S
                continue
            if await self.link.retrying("the termination check", self.report):
                self.mark_done()
            delay = min(delay * 2, POLL_MAX_S)

    async def report(self) -> bool:
        """Report idle at the current seq, and check the cluster: True when done."""
        if not self.idle():
            return False
        seq = self.seq()  # read with the idle test, before the await (see the docstring)
        return bool(await self.link.call(self.script, self.keys, [seq, self.link.prefix]))

    def mark_done(self) -> None:
        """The cluster is done (seen here or in a heartbeat)."""
        if not self.done:
            self.done = True
            self.on_done()
