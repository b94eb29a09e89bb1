"""Stage 3, larbin's fetchDns: resolve each new site's host, then hand the site on.

c-ares (pycares) queries on the crawl's own event loop (no c-ares thread: `LoopResolver`), at
most `dnsConnexions` in flight (a fixed pool of workers over a queue), one query per host however
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
import functools
import ipaddress
import logging
import weakref
from collections.abc import Callable
from typing import Any, cast

import pycares

from larbinpy.config import Config
from larbinpy.frontier.sites import Sites
from larbinpy.net.policy import NetworkPolicy
from larbinpy.records import Site
from larbinpy.stats import Outcome, Stats

log = logging.getLogger("larbinpy.dns")
MAX_CACHE = 50_000  # hosts whose answer is kept (~300 bytes each), beyond the sites in memory
TTL_FLOOR = 60.0  # a TTL of 0 must not mean one query per fetch
TTL_CEILING = 6 * 3600.0  # a long crawl should notice a host that moved
NEGATIVE_TTL = 300.0  # how long a failed host stays failed
QUERY_TIMEOUT = 5.0
QUERY_TRIES = 2
_ADDR_TYPES = {"A": 1, "AAAA": 28}
_QUERY_TYPES = {"A": pycares.QUERY_TYPE_A, "AAAA": pycares.QUERY_TYPE_AAAA}
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
        # sites waiting for a query in flight, by host: one callback a host, not a future and
        # closures a site (a broad crawl has maxSitesInMemory sites waiting at once)
        self.waiting: dict[str, list[Site]] = {}
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.waiting_sites = 0
        self._resolver: LoopResolver | None = None
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
        self.sites.resolving(site)
        if self.proxied and ip_literal(site.host) is None:
            self._via_proxy(site)
            return
        self.waiting_sites += 1
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
        loop = asyncio.get_running_loop()
        literal = ip_literal(host)
        if literal and not self._family_ok(literal):
            literal = None  # an address of the family ipVersion excludes: no usable address
            hit: tuple[list[str], None] | None = ([], None)
        else:
            hit = ([literal], None) if literal else self._cached(host, loop.time())
        if hit is not None:
            return hit[0]
        shared = self.inflight.get(host)
        if shared is None:
            # registered before any await: every later caller shares this one query
            shared = self.inflight[host] = loop.create_future()
            self.queue.put_nowait(host)
        return shared

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

    def _resolved(self, site: Site, ips: list[str]) -> None:
        """Hand a site on once its host is known (`ips`), or drop its jobs if it is not."""
        self.waiting_sites -= 1
        now = asyncio.get_running_loop().time()
        allowed = [ip for ip in ips if self.policy.allowed(ip)]
        if not allowed:
            self.sites.kill(site, Outcome.deniedNetwork if ips else Outcome.noDNS,
                            self.cache.get(site.host, (now + NEGATIVE_TTL, []))[0])
        else:
            self.sites.resolved(site, politeness_key(allowed[0]), self.cfg.robots)
        self.on_resolved(site)

    async def _worker(self) -> None:
        """One of `dnsConnexions`: resolve queued hosts one at a time."""
        while True:
            host = await self.queue.get()
            ips: list[str] = []
            ttl = NEGATIVE_TTL
            try:
                ips, ttl = await self._query(host)
            except asyncio.CancelledError:
                # the crawl stops: no answer is not "no such host"; the sites waiting keep
                # their URLs, which the last checkpoint saves
                raise
            except Exception:  # whatever c-ares does, the waiters must get an answer
                log.exception("DNS lookup of %s failed unexpectedly", host)
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
            except DnsError as exc:
                if exc.args and exc.args[0] == pycares.errno.ARES_ETIMEOUT:
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


class DnsError(Exception):
    """A query failed: `args` are c-ares's error number and its words (pycares.errno)."""


class LoopResolver:
    """c-ares (pycares) with its sockets watched by the crawl's event loop, not by a thread.

    pycares 5 (and aiodns 4 over it) runs c-ares on c-ares's own event thread unless given a
    `sock_state_cb`, each answer then handed back with `call_soon_threadsafe`: a second thread
    taking the GIL and waking the loop through its self-pipe, a cost the crawl pays for every
    host (docs/benchmarks.md). Here c-ares tells which sockets it waits on (`sock_state_cb`,
    pycares's public API), the loop watches them and calls `process_fd`, and a timer lets
    c-ares notice its own timeouts: one thread, as larbin. What it gives up: c-ares rereads
    /etc/resolv.conf on a change only with its thread; a long crawl reads it at start
    (`dnsServers` names servers explicitly).

    c-ares's own query cache is off: this stage has its cache (bounded, `MAX_CACHE`), and
    c-ares's keeps every answer for its TTL, about 1.3 kB each, which a broad crawl meeting a
    thousand hosts a second would grow to hundreds of MB (docs/benchmarks.md, "Broad crawls").
    pycares 5 has no parameter for it, so the channel is made with `_NoQueryCache`.
    """

    def __init__(self, nameservers: list[str] | None, timeout: float, tries: int) -> None:
        """A channel asking `nameservers` (the system's when None), `tries` times `timeout` s."""
        self._loop = asyncio.get_running_loop()
        self._readers: set[int] = set()
        self._writers: set[int] = set()
        self._timer: asyncio.TimerHandle | None = None
        weak_self = weakref.ref(self)  # the channel holds the callback: no cycle through it

        def sock_state(fd: int, readable: bool, writable: bool) -> None:
            this = weak_self()
            if this is not None:
                this._sock_state(fd, readable, writable)

        module = vars(pycares)
        lib = module["_lib"]
        module["_lib"] = _NoQueryCache(lib)  # what Channel() calls, for this call only
        try:
            self._channel = pycares.Channel(sock_state_cb=sock_state, timeout=timeout,
                                            tries=tries, servers=nameservers or None)
        finally:
            module["_lib"] = lib

    def query_dns(self, host: str, qtype: str) -> asyncio.Future[pycares.DNSResult]:
        """Ask for `host`'s records of `qtype` ("A", "AAAA"); DnsError if the query fails."""
        fut: asyncio.Future[pycares.DNSResult] = self._loop.create_future()

        def answered(result: pycares.DNSResult, error: int | None) -> None:
            if fut.done():  # cancelled by its waiter meanwhile
                return
            if error is not None:
                fut.set_exception(DnsError(error, pycares.errno.strerror(error)))
            else:
                fut.set_result(result)

        try:
            self._channel.query(host, _QUERY_TYPES[qtype], callback=answered)
        except pycares.AresError as exc:
            fut.set_exception(DnsError(*exc.args))
        return fut

    def _sock_state(self, fd: int, readable: bool, writable: bool) -> None:
        """c-ares now waits on fd for reading and/or writing, or no longer uses it."""
        process = self._channel.process_fd
        if readable:
            self._loop.add_reader(fd, process, fd, pycares.ARES_SOCKET_BAD)
            self._readers.add(fd)
        elif fd in self._readers:
            self._loop.remove_reader(fd)
            self._readers.discard(fd)
        if writable:
            self._loop.add_writer(fd, process, pycares.ARES_SOCKET_BAD, fd)
            self._writers.add(fd)
        elif fd in self._writers:
            self._loop.remove_writer(fd)
            self._writers.discard(fd)
        if not (self._readers or self._writers):
            if self._timer is not None:  # nothing in flight: nothing can time out
                self._timer.cancel()
                self._timer = None
        elif self._timer is None:
            self._start_timer()

    def _start_timer(self) -> None:
        """Wake c-ares when its next timeout is due (at most a second from now)."""
        delay: float = self._channel.timeout(1.0)  # type: ignore[no-untyped-call]  # unannotated
        self._timer = self._loop.call_later(max(delay, 0.01), self._on_timer)

    def _on_timer(self) -> None:
        """Let c-ares handle its timeouts (a try given up, the next one sent)."""
        self._timer = None
        if self._readers or self._writers:
            self._channel.process_fd(pycares.ARES_SOCKET_BAD, pycares.ARES_SOCKET_BAD)
            if self._timer is None and (self._readers or self._writers):
                self._start_timer()

    async def close(self) -> None:
        """Cancel the queries in flight, take the sockets off the loop, free the channel."""
        self._channel.cancel()  # their callbacks run now, with ARES_ECANCELLED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for fd in self._readers:
            self._loop.remove_reader(fd)
        for fd in self._writers:
            self._loop.remove_writer(fd)
        self._readers.clear()
        self._writers.clear()
        self._channel.close()


ARES_OPT_QUERY_CACHE = 1 << 21  # ares.h (c-ares >= 1.23); pycares 5 does not export it


class _NoQueryCache:
    """pycares's C library as `pycares.Channel()` sees it while it makes a channel: the same,
    but `ares_init_options` turns c-ares's query cache off (`qcache_max_ttl` 0). pycares's
    `_lib` is private: pyproject pins pycares 5, and tests/test_broad.py fails when c-ares
    keeps answers of its own again."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        """Everything else is the library's."""
        return getattr(self._lib, name)

    def ares_init_options(self, channel: Any, options: Any, optmask: int) -> int:
        """c-ares's channel init, with the query cache option set to off."""
        options.qcache_max_ttl = 0
        code: int = self._lib.ares_init_options(channel, options, optmask | ARES_OPT_QUERY_CACHE)
        return code
