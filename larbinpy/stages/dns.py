"""Stage 3, larbin's fetchDns: resolve each new site's host, then hand the site on.

aiodns queries on the crawl's own event loop (no c-ares thread: `LoopResolver`), at most
`dnsConnexions` in flight (a fixed pool of workers over a queue), one query per host however
many sites or fetches wait for it (the query's future is registered before the first await, and
each waiter gets a future of its own over it, as in aiohttp's connector: a waiter cancelled by
its fetch's timeout cancels only itself, never the query nor the worker), a per-host cache
that honours the TTL within a floor and a ceiling, and a negative cache for failures. The same
cache answers the HTTP clients (`lookup`, through `net.resolver.CrawlerResolver`), so a fetch
never makes a DNS query of its own.

A failure (NXDOMAIN, no address, or a server that never answers) is cached for NEGATIVE_TTL:
the site's queued URLs are dropped as noDNS, and URLs arriving meanwhile are dropped without a
query. A query waits at most min(QUERY_TIMEOUT, `timeoutConnect`) per try, QUERY_TRIES tries.
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
import ipaddress
import logging
import weakref
from collections.abc import Callable
from typing import Any, cast

import aiodns
import pycares

from larbinpy.config import Config
from larbinpy.frontier.sites import Sites
from larbinpy.net.policy import NetworkPolicy
from larbinpy.records import Site, SiteState
from larbinpy.stats import Outcome, Stats

log = logging.getLogger("larbinpy.dns")
MAX_CACHE = 200_000  # hosts whose answer is kept
TTL_FLOOR = 60.0  # a TTL of 0 must not mean one query per fetch
TTL_CEILING = 6 * 3600.0  # a long crawl should notice a host that moved
NEGATIVE_TTL = 300.0  # how long a failed host stays failed
QUERY_TIMEOUT = 5.0
QUERY_TRIES = 2
_ADDR_TYPES = {"A": 1, "AAAA": 28}
_AddrData = pycares.ARecordData | pycares.AAAARecordData  # the data of those records


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
    ) -> None:
        self.cfg, self.stats, self.sites, self.policy = cfg, stats, sites, policy
        self.on_resolved = on_resolved
        self.cache: dict[str, tuple[float, list[str]]] = {}  # host -> (expires, ips; [] = failed)
        self.inflight: dict[str, asyncio.Future[list[str]]] = {}
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.waiting_sites = 0
        self._resolver: aiodns.DNSResolver | None = None
        # with a proxy, host names are the proxy's to resolve unless `proxyDns local`
        self.proxied = cfg.proxy is not None and cfg.proxy_dns == "proxy"

    def start(self) -> list[asyncio.Task[None]]:
        """Create the resolver and the `dnsConnexions` workers."""
        self._resolver = LoopResolver(
            nameservers=self.cfg.dns_servers or None,
            timeout=min(QUERY_TIMEOUT, self.cfg.timeout_connect), tries=QUERY_TRIES,
        )
        return [asyncio.ensure_future(self._worker()) for _ in range(self.cfg.dns_connexions)]

    def submit(self, site: Site) -> None:
        """A site needs its address: look it up (or join the lookup in flight)."""
        site.state = SiteState.DNS
        if self.proxied and ip_literal(site.host) is None:
            self._via_proxy(site)
            return
        self.waiting_sites += 1
        fut = self.lookup(site.host)
        if fut.done():
            self._resolved(site, fut)
        else:
            fut.add_done_callback(lambda f: self._resolved(site, f))

    def _via_proxy(self, site: Site) -> None:
        """The proxy resolves this host: on to robots.txt (or ready) without a query."""
        self.sites.attach(site, "host " + site.host)
        site.state = SiteState.ROBOTS if self.cfg.robots else SiteState.READY
        self.on_resolved(site)

    def lookup(self, host: str) -> asyncio.Future[list[str]]:
        """Addresses of a host ([] if it failed): cached, shared in flight, or queued."""
        loop = asyncio.get_running_loop()
        literal = ip_literal(host)
        if literal and not self._family_ok(literal):
            literal = None  # an address of the family ipVersion excludes: no usable address
            hit: tuple[list[str], None] | None = ([], None)
        else:
            hit = ([literal], None) if literal else self._cached(host, loop.time())
        if hit is not None:
            fut: asyncio.Future[list[str]] = loop.create_future()
            fut.set_result(hit[0])
            return fut
        shared = self.inflight.get(host)
        if shared is None:
            # registered before any await: every later caller shares this one query
            shared = self.inflight[host] = loop.create_future()
            self.queue.put_nowait(host)
        return _waiter(shared)

    def _family_ok(self, ip: str) -> bool:
        """Is this address of a family `ipVersion` allows?"""
        version = self.cfg.ip_version
        return version == "any" or (":" in ip) == (version == "6")

    def purge(self, now: float) -> None:
        """Forget expired entries when the cache is large (memory bounded on long crawls)."""
        if len(self.cache) > MAX_CACHE:
            for host in [h for h, (expires, _) in self.cache.items() if expires <= now]:
                del self.cache[host]
        while len(self.cache) > MAX_CACHE:  # still too many: the oldest go first
            del self.cache[next(iter(self.cache))]

    def _cached(self, host: str, now: float) -> tuple[list[str], None] | None:
        """A cache entry still valid, else None."""
        entry = self.cache.get(host)
        if entry is None or entry[0] <= now:
            return None
        return entry[1], None

    def _resolved(self, site: Site, fut: asyncio.Future[list[str]]) -> None:
        """Hand a site on once its host is known, or drop its jobs if it is not."""
        self.waiting_sites -= 1
        now = asyncio.get_running_loop().time()
        ips = fut.result()
        allowed = [ip for ip in ips if self.policy.allowed(ip)]
        if not allowed:
            site.state = SiteState.DEAD
            site.dead_reason = Outcome.deniedNetwork if ips else Outcome.noDNS
            site.dead_note = None
            site.dead_until = self.cache.get(site.host, (now + NEGATIVE_TTL, []))[0]
            self.sites.drop(site, site.dead_reason)
            self.sites.rest(site)
        else:
            self.sites.attach(site, politeness_key(allowed[0]))
            site.state = SiteState.ROBOTS if self.cfg.robots else SiteState.READY
        self.on_resolved(site)

    async def _worker(self) -> None:
        """One of `dnsConnexions`: resolve queued hosts one at a time."""
        while True:
            host = await self.queue.get()
            ips: list[str] = []
            ttl = NEGATIVE_TTL
            try:
                ips, ttl = await self._query(host)
            except Exception:  # whatever c-ares does, the waiters must get an answer
                log.exception("DNS lookup of %s failed unexpectedly", host)
            finally:
                now = asyncio.get_running_loop().time()
                self.cache[host] = (now + ttl, ips)
                shared = self.inflight.pop(host)
                if not shared.done():  # only the worker settles it; a guard all the same
                    shared.set_result(ips)

    async def _query(self, host: str) -> tuple[list[str], float]:
        """Ask the DNS server(s): (addresses, seconds to cache them)."""
        assert self._resolver is not None
        qtypes = {"4": ["A"], "6": ["AAAA"]}.get(self.cfg.ip_version, ["A", "AAAA"])
        for qtype in qtypes:
            self.stats.dns_queries += 1
            try:
                result = await self._resolver.query_dns(host, qtype)
            except aiodns.error.DNSError as exc:
                if exc.args and exc.args[0] == aiodns.error.ARES_ETIMEOUT:
                    break  # the server does not answer: asking again for AAAA would wait again
                continue
            records = [r for r in result.answer if r.type == _ADDR_TYPES[qtype]]
            if records:
                ttl = min(r.ttl for r in records)
                addrs = [cast(_AddrData, r.data).addr for r in records]  # A or AAAA, by type
                return addrs, min(max(ttl, TTL_FLOOR), TTL_CEILING)
        return [], NEGATIVE_TTL

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


class LoopResolver(aiodns.DNSResolver):
    """aiodns with c-ares's sockets watched by the crawl's event loop, not by a thread.

    aiodns 4 runs c-ares on c-ares's own event thread, each answer handed back with
    `call_soon_threadsafe`: a second thread taking the GIL and waking the loop through its
    self-pipe, a cost the crawl pays for every host (docs/benchmarks.md). Its fallback,
    c-ares's sockets on the loop (aiodns 3's way, and larbin's: one thread), is what this
    channel is. What it gives up: c-ares rereads /etc/resolv.conf on a change only with its
    thread; a long crawl reads it at start (`dnsServers` names servers explicitly).
    """

    def _make_channel(self, **kwargs: Any) -> tuple[bool, pycares.Channel]:
        """The channel aiodns 4 falls back to (its `_make_channel`, pinned by pyproject)."""
        weak_self = weakref.ref(self)

        def sock_state(fd: int, readable: bool, writable: bool) -> None:
            this = weak_self()
            if this is not None:
                this._sock_state_cb(fd, readable, writable)

        return False, pycares.Channel(sock_state_cb=sock_state, timeout=self._timeout, **kwargs)
