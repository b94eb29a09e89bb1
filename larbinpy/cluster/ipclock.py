"""Per-IP politeness across nodes: the IP's clock as a lease in Redis (`waitDuration` > 0).

Sites are owned by one node each, so a site's own clock stays local; but hosts that share an
IP may be owned by different nodes. Before a fetch (page or robots.txt) a node takes the
IP's lease `ip:<addr>` -- a key holding the node's id, set only if absent or already its
own, with a TTL covering the longest fetch (`timeoutTotal`) plus the gap; when its last fetch
on that IP ends, it shortens the TTL to `waitDuration`. Another node that finds the key
held by someone else learns from its TTL how long to wait: the site is parked on the local
IP clock for that long (the job goes back to the head of its site's queue); while the other
node's fetch runs (its TTL is still the long one) the site asks again every `waitDuration`.
A node killed while holding a lease blocks the IP for at most `timeoutTotal` + the gap.

The node's own fetches on an IP are spaced by the local clock (the opener), as without a
cluster: the lease only keeps other nodes out. Costs two round trips a fetch, so it is used
only when `waitDuration` > 0 (politeness is then the bottleneck, not round trips).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from larbinpy.cluster.link import Link
from larbinpy.frontier.sites import Sites
from larbinpy.records import Job, Site

log = logging.getLogger("larbinpy.cluster")

RETRY_MS = 1000  # wait after a failed lease request

# KEYS: ip:<addr>. ARGV: me, lease ms. 0: the lease is ours; else ms until it may be free.
ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if not holder or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 1 then ttl = 1 end
return ttl
"""

# KEYS: ip:<addr>. ARGV: me, gap ms. Our lease now ends `gap` from now.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
"""


class IpClock:
    """The Redis side of the per-IP clock, wrapped around the reader's and robots' fetch."""

    def __init__(self, link: Link, sites: Sites, gap: float, longest_fetch: float) -> None:
        self.link, self.sites = link, sites
        self.gap_ms = max(1, round(gap * 1000))
        self.lease_ms = round((longest_fetch + gap) * 1000) + 1000
        self._acquire = link.script(ACQUIRE)
        self._release = link.script(RELEASE)
        self.deferred = 0  # fetches put off because another node held the IP

    async def acquire(self, site: Site) -> float:
        """Take the lease of the site's IP: 0.0, or seconds to wait (someone else has it)."""
        assert site.ip is not None
        try:
            ms: int = await self.link.call(self._acquire, [self.link.key("ip", site.ip.addr)],
                                      [self.link.node, self.lease_ms])
        except (OSError, RedisError) as exc:  # Redis unreachable: wait, as if the IP were busy
            log.warning("cluster: IP lease for %s failed (%s)", site.ip.addr, exc)
            ms = RETRY_MS
        if not ms:
            return 0.0
        # A TTL over the gap means a fetch is running there: it ends at some unknown time,
        # then the gap follows, so try again after one gap (a TTL within the gap is exact).
        ms = min(ms, self.gap_ms)
        self.deferred += 1
        # park the site on its IP's local clock: the opener wakes it then, no polling
        site.ip.ready_at = max(site.ip.ready_at, asyncio.get_running_loop().time() + ms / 1000)
        return ms / 1000

    async def release(self, site: Site) -> None:
        """The fetch ended: others may have the IP `waitDuration` from now."""
        assert site.ip is not None
        if site.ip.in_flight > 1:  # another fetch of ours still runs on this IP: keep it
            return
        try:
            await self.link.call(self._release, [self.link.key("ip", site.ip.addr)],
                                 [self.link.node, self.gap_ms])
        except (OSError, RedisError) as exc:  # the lease expires by itself
            log.warning("cluster: IP lease release for %s failed (%s)", site.ip.addr, exc)

    def wrap_page(self, fetch: Callable[[Site, Job], Awaitable[None]]
                  ) -> Callable[[Site, Job], Awaitable[None]]:
        """The reader's fetch, under the lease; a deferred job goes back to its site's head."""
        async def fetch_under_lease(site: Site, job: Job) -> None:
            if await self.acquire(site):
                self.sites.requeue(site, job)
                return
            await fetch(site, job)  # cancelled (stopping): the lease expires by itself
            await self.release(site)
        return fetch_under_lease

    def wrap_robots(self, fetch: Callable[[Site], Awaitable[None]]
                    ) -> Callable[[Site], Awaitable[None]]:
        """robots.txt's fetch, under the lease; deferred, it is simply tried again later."""
        async def fetch_under_lease(site: Site) -> None:
            if await self.acquire(site):
                return
            await fetch(site)
            await self.release(site)
        return fetch_under_lease
