"""Cluster membership: heartbeats, the live node set, who owns a site, recovering lost nodes.

Every node scores itself in the `nodes` sorted set with its heartbeat's expiry (Redis's own
clock, so nodes' clocks need not agree) every HEARTBEAT_S; a heartbeat also reaps nodes whose
expiry passed (moved to the `dead` set) and reads back the live set, the `dead` set, the
`done` flag and every node's figures -- one round trip.

Ownership: a site (scheme+host+port) belongs to the live node with the highest hash of
(node, site) -- rendezvous hashing. When a node joins or leaves, only the sites that it gains
or loses change owner (about 1/N of them), and every node computes the same owner from the
same live set without talking to the others.

Recovery: a node that is gone -- reaped after `kill -9`, or deregistered at a clean stop --
sits in the `dead` set until a live node has moved its `pending` hash (every URL it held and
had not fetched) and its `in` stream into the recovering node's own stream, a chunk per
atomic script, so two nodes recovering at once neither lose nor copy a URL. The recovering
node reads them like any inbound URL, and forwards those of sites it does not own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import xxhash

from larbinpy.cluster.link import GROUP, Link

_hash = xxhash.xxh3_64_intdigest
log = logging.getLogger("larbinpy.cluster")

HEARTBEAT_S = 0.5  # seconds between heartbeats
EXPIRY_S = 3.0  # a node that has not beaten for this long is dead (kill -9 detection time)
RECOVER_CHUNK = 500  # URLs (or stream entries) moved per recovery script

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: nodes, dead, node:me, in:me, done. ARGV: me, expiry ms, group, new crawl (1/0).
REGISTER = _NOW_MS + """
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
if ARGV[4] == '1' then redis.call('DEL', KEYS[5]) end
redis.call('HSET', KEYS[3], 'idle', 0, 'seq', 0)
redis.pcall('XGROUP', 'CREATE', KEYS[4], ARGV[3], '0', 'MKSTREAM')
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""

# KEYS: nodes, dead, stats, done, node:me, in:me. ARGV: me, expiry ms, stats JSON, group.
# Returns {live nodes, dead nodes, done flag, reaped (this node had been presumed dead), stats}.
HEARTBEAT = _NOW_MS + """
local reaped = 0
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  reaped = 1
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('HSET', KEYS[5], 'idle', 0)
  redis.pcall('XGROUP', 'CREATE', KEYS[6], ARGV[4], '0', 'MKSTREAM')
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
for _, n in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)) do
  redis.call('ZREM', KEYS[1], n)
  redis.call('SADD', KEYS[2], n)
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
return {redis.call('ZRANGE', KEYS[1], 0, -1), redis.call('SMEMBERS', KEYS[2]),
        redis.call('GET', KEYS[4]) or '', reaped, redis.call('HGETALL', KEYS[3])}
"""

# Move a chunk of node d's URLs into stream in:c. KEYS: dead, pending:d, in:d, in:c, node:d.
# ARGV: d, chunk, own ('1': c == d at start-up, only the pending hash, d need not be dead).
# Returns how many moved; 0 when everything is moved (d's keys deleted); -1 when d is no
# longer in the dead set (another node finished, or d came back).
RECOVER = """
local own = ARGV[3] == '1'
if not own and redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
local n = tonumber(ARGV[2])
local cursor, kv = '0', {}
repeat
  local r = redis.call('HSCAN', KEYS[2], cursor, 'COUNT', n)
  cursor = r[1]
  for _, x in ipairs(r[2]) do kv[#kv + 1] = x end
until cursor == '0' or #kv >= 2 * n
if #kv > 0 then
  local lines, fields = {}, {}
  for i = 1, #kv, 2 do
    lines[#lines + 1] = kv[i] .. '\\t' .. kv[i + 1]
    fields[#fields + 1] = kv[i]
  end
  redis.call('XADD', KEYS[4], '*', 'j', table.concat(lines, '\\n'))
  for i = 1, #fields, 1000 do
    redis.call('HDEL', KEYS[2], unpack(fields, i, math.min(i + 999, #fields)))
  end
  return #fields
end
if own then return 0 end
local entries = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', n)
if #entries > 0 then
  for _, e in ipairs(entries) do
    redis.call('XADD', KEYS[4], '*', unpack(e[2]))
    redis.call('XDEL', KEYS[3], e[1])
  end
  return #entries
end
redis.call('DEL', KEYS[3], KEYS[2], KEYS[5])
redis.call('SREM', KEYS[1], ARGV[1])
return 0
"""

# A clean stop. KEYS: nodes, dead, node:me. ARGV: me, handover ('1': survivors recover us).
LEAVE = """
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == '1' then redis.call('SADD', KEYS[2], ARGV[1]) end
redis.call('HSET', KEYS[3], 'idle', 1)
return 1
"""


def owner_of(site: str, nodes: Sequence[str]) -> str:
    """Rendezvous hashing: the node with the highest hash of (node, site)."""
    return max(nodes, key=lambda node: (_hash(f"{node}\n{site}".encode()), node))


class Membership:
    """This node's view of the cluster: live nodes, site owners, nodes to recover."""

    def __init__(self, link: Link, on_change: Callable[[], None]) -> None:
        self.link = link
        self.me = link.node
        self.live: list[str] = [self.me]
        self.dead: list[str] = []
        self.done = False  # the `done` flag: the whole crawl is over
        self.stats: dict[str, bytes] = {}  # node -> its figures (JSON), as last read
        self.on_change = on_change  # the live set changed (site owners with it)
        self._owners: dict[str, str] = {}
        self._register = link.script(REGISTER)
        self._heartbeat = link.script(HEARTBEAT)
        self._recover = link.script(RECOVER)
        self._leave = link.script(LEAVE)

    def owner(self, site: str) -> str:
        """Which node fetches this site (cached until the live set changes)."""
        owner = self._owners.get(site)
        if owner is None:
            if len(self._owners) > 1_000_000:  # bounded memory on endless crawls
                self._owners.clear()
            owner = self._owners[site] = owner_of(site, self.live)
        return owner

    def _set_live(self, nodes: list[bytes]) -> None:
        """Adopt a live set read from Redis (always including this node)."""
        live = sorted({n.decode() for n in nodes} | {self.me})
        if live != self.live:
            log.info("cluster: live nodes now %s", ", ".join(live))
            self.live = live
            self._owners.clear()
            self.on_change()

    async def register(self, new_crawl: bool) -> None:
        """Join: score this node, create its stream and group, read the live set."""
        link = self.link
        keys = [link.key("nodes"), link.key("dead"), link.key("node", self.me),
                link.key("in", self.me), link.key("done")]
        live = await link.call(self._register, keys,
                               [self.me, int(EXPIRY_S * 1000), GROUP, int(new_crawl)])
        self._set_live(live)

    async def beat(self, stats_json: str) -> None:
        """One heartbeat: stay live, reap the expired, read live/dead/done and the figures."""
        link = self.link
        keys = [link.key("nodes"), link.key("dead"), link.key("stats"), link.key("done"),
                link.key("node", self.me), link.key("in", self.me)]
        live, dead, done, reaped, stats = await link.call(
            self._heartbeat, keys, [self.me, int(EXPIRY_S * 1000), stats_json, GROUP])
        if reaped:
            log.warning("cluster: this node was presumed dead (no heartbeat for %.0f s); the "
                        "URLs it held were handed to others and may be fetched twice", EXPIRY_S)
        self.dead = sorted(n.decode() for n in dead if n.decode() != self.me)
        self.done = bool(done)
        self.stats = {stats[i].decode(): stats[i + 1] for i in range(0, len(stats), 2)}
        self._set_live(live)

    async def recover(self, node: str,
                      between: Callable[[], Awaitable[None]] | None = None) -> int:
        """Move everything `node` held into this node's stream, a chunk at a time, awaiting
        `between()` after each (the caller's heartbeat); how many URLs or entries moved."""
        link, moved = self.link, 0
        own = node == self.me
        keys = [link.key("dead"), link.key("pending", node), link.key("in", node),
                link.key("in", self.me), link.key("node", node)]
        while True:
            n = await link.call(self._recover, keys, [node, RECOVER_CHUNK, int(own)])
            if n <= 0:
                if moved and not own:
                    log.info("cluster: recovered %d URLs/batches of node %s", moved, node)
                return moved
            moved += n
            if between is not None:
                await between()

    async def leave(self, handover: bool) -> None:
        """Leave the live set; with `handover`, the survivors recover this node's URLs."""
        link = self.link
        await link.call(self._leave, [link.key("nodes"), link.key("dead"),
                                      link.key("node", self.me)], [self.me, int(handover)])
