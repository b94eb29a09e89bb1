"""Stage 3, larbin's fetchDns: resolve each new site's host, then hand the site on.

c-ares (pycares) queries on the crawl's own event loop (no c-ares thread: `net.cares`), at
most `dnsConnexions` in flight (a fixed pool of workers over a queue), one query per host however
many sites or fetches wait for it (the query's future is registered before the first await, and
each waiter gets a future of its own over it, as in aiohttp's connector: a waiter cancelled by
its fetch's timeout cancels only itself, never the query nor the worker), a per-host cache
that honours the TTL within a floor and a ceiling, and a negative cache for failures. The same
cache answers the HTTP clients (`lookup`, through `net.resolver.CrawlerResolver`), so a fetch
never makes a DNS query of its own.

A failure (NXDOMAIN, no address, or a server that never answers) is cached for NEGATIVE_TTL:
the site's queued URLs are dropped as noDNS, and URLs arriving meanwhile are dropped without a
query. A query waits at most min(QUERY_TIMEOUT, `timeoutConnect`) per try, QUERY_TRIES tries;
a host that no server answered at all (a datagram lost, a server overloaded) is asked again
after each pause of RETRY_AFTER, its sites waiting, before it counts as failed: an answer
missing is not an answer that the host does not exist.
`ipVersion 4` asks A only, `6` AAAA only, `any` A and then AAAA when A gave no address (a
host with both is reached over IPv4, one query; an IPv6-only host costs two); a timed-out A
query is not followed by an AAAA one, so a dead server costs one bounded wait.

The per-IP politeness clock of a site is keyed by its first allowed address, an IPv6 address by
its /64 (one host usually owns a whole /64, so its addresses share one clock). With `proxy` and
`proxyDns proxy` (the default), host names are the proxy's to resolve, as in larbin: a site is
handed on at once, its politeness clock keyed by host name; `proxyDns local` resolves here too.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from larbinpy.clock import Clock
from larbinpy.config import Config
from larbinpy.frontier.sites import Sites
from larbinpy.net.policy import NetworkPolicy
from larbinpy.records import Site
from larbinpy.stats import Outcome, Stats

if TYPE_CHECKING:
    import pycares

    from larbinpy.net.cares import LoopResolver

log = logging.getLogger("larbinpy.dns")
MAX_CACHE = 50_000  # hosts whose answer is kept (~300 bytes each), beyond the sites in memory
TTL_FLOOR = 60.0  # a TTL of 0 must not mean one query per fetch
TTL_CEILING = 6 * 3600.0  # a long crawl should notice a host that moved
NEGATIVE_TTL = 300.0  # how long a failed host stays failed
QUERY_TIMEOUT = 5.0
QUERY_TRIES = 2
RETRY_AFTER = (10.0, 60.0)  # s: pauses before asking again a host no server answered
_ADDR_TYPES = {"A": 1, "AAAA": 28}


def ip_literal(host: str) -> str | None:
    """The address if `host` is an IP literal (IPv6 may be bracketed), else None."""
    h = host[1:-1] if host.startswith("[") else host
    if not h[-1:].isdigit() and ":" not in h:
        return None  # a name (the common case): what ip_address would say, without its raises
    try:
        return str(ipaddress.ip_address(h))
    except ValueError:
        return None


class Dns:
    """Per-host resolution with a shared in-flight future and a TTL cache."""

    def __init__(
        self,
        cfg: Config,
        stats: Stats,
        sites: Sites,
        policy: NetworkPolicy,
        on_resolved: Callable[[Site], None],
        clock: Clock | None = None,
    ) -> None:
        self.cfg, self.stats, self.sites, self.policy = cfg, stats, sites, policy
        self.clock = clock or sites.clock  # answers' expiry, the pauses before asking again
        self.on_resolved = on_resolved
        # host -> (expires, ips; [] = failed), in the order the answers came (`purge`); an
        # OrderedDict because a dict emptied from its front finds its first entry by walking
        # the holes its deletions left, up to the whole table each time
        self.cache: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()
        self.inflight: dict[str, asyncio.Future[list[str]]] = {}
        # sites waiting for a query in flight, by host: one callback a host, not a future and
        # closures a site (a broad crawl has maxSitesInMemory sites waiting at once)
        self.waiting: dict[str, list[Site]] = {}
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.waiting_sites = 0
        self.unanswered: dict[str, int] = {}  # hosts being asked again: rounds without answer
        self._resolver: LoopResolver | None = None
        # with a proxy, host names are the proxy's to resolve unless `proxyDns local`
        self.proxied = cfg.proxy is not None and cfg.proxy_dns == "proxy"

    def start(self) -> list[asyncio.Task[None]]:
        """Create the `dnsConnexions` workers (the resolver is made at the first query)."""
        return [asyncio.ensure_future(self._worker()) for _ in range(self.cfg.dns_connexions)]

    def submit(self, site: Site) -> None:
        """A site needs its address: look it up (or join the lookup in flight)."""
        self.sites.resolving(site)
        if self.proxied and ip_literal(site.host) is None:
            self._via_proxy(site)
            return
        self.waiting_sites += 1
        if site.dns is not None:  # its row on disk kept an answer (`Sites._create`)
            self._recall(site.host, site.dns)
        answer = self._shared(site.host)
        if not isinstance(answer, asyncio.Future):
            self._resolved(site, answer)
            return
        waiting = self.waiting.get(site.host)
        if waiting is None:
            waiting = self.waiting[site.host] = []
            answer.add_done_callback(functools.partial(self._resolved_all, site.host))
        waiting.append(site)

    def _resolved_all(self, host: str, shared: asyncio.Future[list[str]]) -> None:
        """The query of a host ended: every site waiting for it goes on."""
        ips = [] if shared.cancelled() else shared.result()
        for site in self.waiting.pop(host, ()):
            self._resolved(site, ips)

    def _recall(self, host: str, answer: tuple[float, list[str]]) -> None:
        """An answer a site's row kept: into the cache, if the cache has none and its TTL has
        not passed (it is what the cache held for the host when the site was written)."""
        if host not in self.cache and host not in self.inflight and (
                answer[0] > self.clock.now()):
            self.cache[host] = answer

    def _via_proxy(self, site: Site) -> None:
        """The proxy resolves this host: on to robots.txt (or ready) without a query."""
        self.sites.resolved(site, "host " + site.host, self.cfg.robots)
        self.on_resolved(site)

    def lookup(self, host: str) -> asyncio.Future[list[str]]:
        """Addresses of a host ([] if it failed): cached, shared in flight, or queued."""
        answer = self._shared(host)
        if isinstance(answer, asyncio.Future):
            return _waiter(answer)
        fut: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        fut.set_result(answer)
        return fut

    def _shared(self, host: str) -> list[str] | asyncio.Future[list[str]]:
        """A host's addresses when known now (a literal, the cache), else the query in
        flight for it (queued when there was none)."""
        literal = ip_literal(host)
        if literal and not self._family_ok(literal):
            literal = None  # an address of the family ipVersion excludes: no usable address
            hit: tuple[list[str], None] | None = ([], None)
        else:
            hit = ([literal], None) if literal else self._cached(host, self.clock.now())
        if hit is not None:
            return hit[0]
        shared = self.inflight.get(host)
        if shared is None:
            # registered before any await: every later caller shares this one query
            shared = self.inflight[host] = asyncio.get_running_loop().create_future()
            self.queue.put_nowait(host)
        return shared

    def _family_ok(self, ip: str) -> bool:
        """Is this address of a family `ipVersion` allows?"""
        version = self.cfg.ip_version
        return version == "any" or (":" in ip) == (version == "6")

    def purge(self, now: float) -> None:
        """Forget the oldest answers beyond MAX_CACHE, and expired ones at the front (memory
        bounded on long crawls). The cache is in the order answers came (`_worker` moves a
        renewed answer to the end), so this costs what it forgets, not a walk of the cache:
        walking MAX_CACHE entries every second was a cost that grew with the sites a crawl
        had met. An expired answer further in stays until its host is asked again or it
        reaches the front; it is never used (`_cached`)."""
        cache = self.cache
        while cache:
            host = next(iter(cache))
            if len(cache) <= MAX_CACHE and cache[host][0] > now:
                return
            cache.popitem(last=False)

    def _cached(self, host: str, now: float) -> tuple[list[str], None] | None:
        """A cache entry still valid, else None."""
        entry = self.cache.get(host)
        if entry is None or entry[0] <= now:
            return None
        return entry[1], None

    def _resolved(self, site: Site, ips: list[str]) -> None:
        """Hand a site on once its host is known (`ips`), or drop its jobs if it is not."""
        self.waiting_sites -= 1
        now = self.clock.now()
        allowed = [ip for ip in ips if self.policy.allowed(ip)]
        if not allowed:
            self.sites.kill(site, Outcome.deniedNetwork if ips else Outcome.noDNS,
                            self.cache.get(site.host, (now + NEGATIVE_TTL, []))[0])
        else:
            entry = self.cache.get(site.host)  # None for an IP literal: nothing to keep
            self.sites.resolved(site, politeness_key(allowed[0]), self.cfg.robots,
                                entry if entry is not None and entry[1] else None)
        self.on_resolved(site)

    async def _worker(self) -> None:
        """One of `dnsConnexions`: resolve queued hosts one at a time."""
        while True:
            host = await self.queue.get()
            ips: list[str] = []
            ttl, answered = NEGATIVE_TTL, True
            try:
                ips, ttl, answered = await self._query(host)
            except asyncio.CancelledError:
                # the crawl stops: no answer is not "no such host"; the sites waiting keep
                # their URLs, which the last checkpoint saves
                raise
            except Exception:  # whatever c-ares does, the waiters must get an answer
                log.exception("DNS lookup of %s failed unexpectedly", host)
            if not answered and self._ask_again(host):
                continue  # its waiters go on waiting
            self.cache[host] = (self.clock.now() + ttl, ips)
            self.cache.move_to_end(host)  # the cache is in the order answers came (`purge`)
            shared = self.inflight.pop(host)
            if not shared.done():  # only the worker settles it; a guard all the same
                shared.set_result(ips)

    def _ask_again(self, host: str) -> bool:
        """No server answered for `host`: queue it again after its next pause (True), or
        False when RETRY_AFTER is spent (then it fails as any host without an address)."""
        rounds = self.unanswered.pop(host, 0)
        if rounds >= len(RETRY_AFTER):
            return False
        self.unanswered[host] = rounds + 1
        log.debug("DNS: no answer for %s; asking again in %g s", host, RETRY_AFTER[rounds])
        self.clock.call_at(self.clock.now() + RETRY_AFTER[rounds], self.queue.put_nowait, host)
        return True

    async def _query(self, host: str) -> tuple[list[str], float, bool]:
        """Ask the DNS server(s): (addresses, seconds to cache them, whether any answered)."""
        from larbinpy.net.cares import UNANSWERED, DnsError

        resolver = self._resolver or self._make_resolver()
        qtypes = {"4": ["A"], "6": ["AAAA"]}.get(self.cfg.ip_version, ["A", "AAAA"])
        for qtype in qtypes:
            self.stats.dns_queries += 1
            try:
                result = await resolver.query_dns(host, qtype)
            except DnsError as exc:
                if exc.args and exc.args[0] in UNANSWERED:
                    # the server does not answer: asking again for AAAA would wait again
                    return [], NEGATIVE_TTL, False
                continue
            records = [r for r in result.answer if r.type == _ADDR_TYPES[qtype]]
            if records:
                ttl = min(r.ttl for r in records)
                addrs = [cast("pycares.ARecordData | pycares.AAAARecordData", r.data).addr
                         for r in records]  # A or AAAA, by type
                return addrs, min(max(ttl, TTL_FLOOR), TTL_CEILING), True
        return [], NEGATIVE_TTL, True

    def _make_resolver(self) -> LoopResolver:
        """The c-ares channel, made at the first query: a crawl that resolves nothing (a
        daemon waiting for seeds) never loads pycares. It reads /etc/resolv.conf then when
        `dnsServers` names no server."""
        from larbinpy.net.cares import LoopResolver

        self._resolver = LoopResolver(
            nameservers=self.cfg.dns_servers or None,
            timeout=min(QUERY_TIMEOUT, self.cfg.timeout_connect), tries=QUERY_TRIES,
        )
        return self._resolver

    async def close(self) -> None:
        """Cancel the queries in flight, take c-ares's sockets off the loop, free the channel
        (the loop watches them since `LoopResolver`, so closing is the loop's to do)."""
        if self._resolver is not None:
            await self._resolver.close()


def _waiter(shared: asyncio.Future[list[str]]) -> asyncio.Future[list[str]]:
    """A future of one waiter's own over a shared query: cancelling it leaves the query be."""
    fut: asyncio.Future[list[str]] = shared.get_loop().create_future()

    def copy(done: asyncio.Future[list[str]]) -> None:
        if fut.done():
            return
        if done.cancelled():
            fut.cancel()
        else:
            fut.set_result(done.result())

    def forget(own: asyncio.Future[list[str]]) -> None:
        if own.cancelled():  # a waiter gone: the query need not call back into it
            shared.remove_done_callback(copy)

    shared.add_done_callback(copy)
    fut.add_done_callback(forget)
    return fut


def politeness_key(ip: str) -> str:
    """The key of an address's politeness clock: itself, or its /64 for IPv6."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:  # an IPv4 host written the IPv6 way
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return ip
