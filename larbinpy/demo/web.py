"""Many virtual hosts on several loopback IPs, one aiohttp server, recording every request.

Every distinct IP of the site list listens on the same port (a web of more than `BIND_EACH_MAX`
loopback IPs gets one socket for all of 127.0.0.0/8 instead), requests are routed by their Host
header, and each request becomes a `Hit` (timings, headers) while in-flight counts per host and
per IP are tracked, so tests can check the crawler's politeness from the server's side.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

_BIND_TRIES = 8
_BACKLOG = 1024
# Above this many IPs one socket bound to every address and held to the loopback interface
# serves them all: a socket an IP would need as many descriptors (200,000 for a broad polite
# bench, past the usual limits) and as many listeners in the loop.
BIND_EACH_MAX = 1000


@dataclass
class Page:
    """What the server answers for one URL."""

    body: bytes | str = b""
    status: int = 200
    content_type: str = "text/html"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (slow page)
    abort: bool = False  # drop the connection instead of answering (fetch-error tests)


def redirect(location: str, status: int = 301) -> Page:
    """A page that redirects to `location` (absolute or relative)."""
    return Page(body=b"", status=status, headers={"Location": location})


@dataclass
class Site:
    """One virtual host: its name, the loopback IP it lives on, and its static pages."""

    host: str
    ip: str = "127.0.0.2"
    pages: dict[str, Page] = field(default_factory=dict)  # key: path+query, e.g. "/a.html?x=1"


@dataclass
class Hit:
    """One request as the server saw it (times are time.monotonic())."""

    host: str
    ip: str
    path: str
    method: str
    start: float
    end: float
    headers: dict[str, str]
    peer: str = ""  # client "ip:port": equal across hits means the connection was kept alive


_NOT_FOUND = Page(body=b"<html><body><h1>404 Not Found</h1></body></html>", status=404)
_NO_SITE = Page(body=b"no such site on this server\n", status=404, content_type="text/plain")


def _is_ip(text: str) -> bool:
    """True if `text` is a literal IPv4/IPv6 address."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _strip_port(host_header: str) -> str:
    """Host header without port or brackets, lower-cased."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _listen_socket(ip: str, port: int) -> socket.socket:
    """A bound, non-blocking TCP socket on ip:port (listen() is done by asyncio)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((ip, port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def bind_loopback_any(port: int = 0) -> socket.socket:
    """One socket on every IPv4 address, answering only what arrives on the loopback interface:
    every 127.x.y.z, and nothing from another machine."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")
        sock.bind(("0.0.0.0", port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def listen_sockets(ips: list[str], port: int = 0) -> list[socket.socket]:
    """Sockets for `ips` on one common port: one an IP, or one for them all when they are more
    than BIND_EACH_MAX loopback IPv4 addresses."""
    if len(ips) > BIND_EACH_MAX and all(
            ipaddress.ip_address(ip).version == 4 and ipaddress.ip_address(ip).is_loopback
            for ip in ips):
        return [bind_loopback_any(port)]
    return bind_same_port(ips, port)


def bind_same_port(ips: list[str], port: int = 0) -> list[socket.socket]:
    """Bind every IP on one common port; with port 0, retry fresh ports on EADDRINUSE."""
    for attempt in range(_BIND_TRIES):
        socks: list[socket.socket] = []
        try:
            socks.append(_listen_socket(ips[0], port))
            common = socks[0].getsockname()[1]
            for ip in ips[1:]:
                socks.append(_listen_socket(ip, common))
            return socks
        except OSError as exc:
            for s in socks:
                s.close()
            # Only a kernel-picked port can be swapped for another one.
            if exc.errno != errno.EADDRINUSE or port != 0 or attempt == _BIND_TRIES - 1:
                raise
    raise AssertionError("unreachable")


class LocalWeb:
    """An HTTP server for a list of `Site`s on loopback, recording `Hit`s."""

    def __init__(
        self,
        sites: list[Site],
        port: int = 0,
        page_factory: Callable[[str, str], Page | None] | None = None,
        record: bool = True,
        on_request: Callable[[web.BaseRequest], None] | None = None,
    ) -> None:
        self.sites: dict[str, Site] = {s.host.lower().rstrip("."): s for s in sites}
        self.port = port
        self.page_factory = page_factory
        self.record = record  # off for the benchmark server: no per-request bookkeeping
        self.on_request = on_request  # called as each request starts (the bench's politeness log)
        self.hits: list[Hit] = []
        self._now_host: Counter[str] = Counter()
        self._now_ip: Counter[str] = Counter()
        self._max_host: Counter[str] = Counter()
        self._max_ip: Counter[str] = Counter()
        self._runner: web.ServerRunner | None = None
        self.sockets: list[socket.socket] = []  # the listeners, once started

    @property
    def ips(self) -> list[str]:
        """Distinct IPs of the sites, in first-seen order."""
        return list(dict.fromkeys(s.ip for s in self.sites.values())) or ["127.0.0.1"]

    @property
    def dns_records(self) -> dict[str, list[str]]:
        """host -> [ip], ready for `DnsServer(records=...)`."""
        return {name: [site.ip] for name, site in self.sites.items()}

    def url(self, host: str, path: str = "/") -> str:
        """Absolute URL of `path` on `host` at this server's port."""
        return f"http://{host}:{self.port}{path if path.startswith('/') else '/' + path}"

    def hits_for(self, host: str) -> list[Hit]:
        """Hits whose Host header named `host`."""
        host = host.lower().rstrip(".")
        return [h for h in self.hits if h.host == host]

    def max_concurrency(self, key: str) -> int:
        """Most simultaneous in-flight requests seen for a host name, or for an IP literal."""
        return self._max_ip[key] if _is_ip(key) else self._max_host[key.lower().rstrip(".")]

    def reset(self) -> None:
        """Forget recorded hits and concurrency maxima."""
        self.hits.clear()
        self._max_host.clear()
        self._max_ip.clear()

    def resolver(self) -> StaticResolver:
        """An aiohttp resolver mapping this web's host names to their IPs (no DNS needed)."""
        return StaticResolver(self.dns_records)

    def ssl_context(self) -> ssl.SSLContext | None:
        """TLS for the listeners (None: plain HTTP); a subclass serving HTTPS overrides it."""
        return None

    async def start(self) -> None:
        """Listen on every site IP at one common port."""
        server = web.Server(self._handle, access_log=None)
        # Short shutdown so stop() never waits long on a slow page still in flight.
        self._runner = web.ServerRunner(server, shutdown_timeout=0.5)
        await self._runner.setup()
        self.sockets = socks = listen_sockets(self.ips, self.port)
        self.port = socks[0].getsockname()[1]
        for sock in socks:
            site = web.SockSite(self._runner, sock, backlog=_BACKLOG,
                                ssl_context=self.ssl_context())
            await site.start()

    async def stop(self) -> None:
        """Close listeners and connections; safe to call twice."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> LocalWeb:
        """Start on entry."""
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop on exit."""
        await self.stop()

    def page_for(self, host: str, path_qs: str) -> Page:
        """The page served for host + path_qs (static page, then factory, then 404)."""
        site = self.sites.get(host)
        if site is None:
            return _NO_SITE
        page = site.pages.get(path_qs)
        if page is None and self.page_factory is not None:
            page = self.page_factory(host, path_qs)
        return page or _NOT_FOUND

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Serve one request, with bookkeeping when recording."""
        host = _strip_port(request.host)
        page = self.page_for(host, request.raw_path)
        if self.on_request is not None:
            self.on_request(request)
        if not self.record:
            return await self._respond(request, page)
        start = time.monotonic()
        sockname = request.get_extra_info("sockname") or ("?", 0)
        ip = str(sockname[0])
        self._enter(host, ip)
        try:
            return await self._respond(request, page)
        finally:
            self._now_host[host] -= 1
            self._now_ip[ip] -= 1
            peer = request.get_extra_info("peername") or ("?", 0)
            hit = Hit(host, ip, request.raw_path, request.method, start, time.monotonic(),
                      dict(request.headers), f"{peer[0]}:{peer[1]}")
            self.hits.append(hit)

    def _enter(self, host: str, ip: str) -> None:
        """Count a request in flight and update the maxima."""
        self._now_host[host] += 1
        self._now_ip[ip] += 1
        self._max_host[host] = max(self._max_host[host], self._now_host[host])
        self._max_ip[ip] = max(self._max_ip[ip], self._now_ip[ip])

    async def _respond(self, request: web.BaseRequest, page: Page) -> web.StreamResponse:
        """Write `page` completely before returning, so Hit.end is after the last byte."""
        if page.delay:
            await asyncio.sleep(page.delay)
        if page.abort:
            if request.transport is not None:
                request.transport.abort()
            return web.Response()  # nowhere to go: aiohttp drops writes on a closed transport
        body = page.body.encode() if isinstance(page.body, str) else page.body
        headers = {"Content-Type": page.content_type, **page.headers}
        resp = web.Response(body=body, status=page.status, headers=headers)
        await resp.prepare(request)
        await resp.write_eof()
        return resp


class StaticResolver(AbstractResolver):
    """aiohttp resolver answering from a fixed host -> [ip] table (for test clients)."""

    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = {k.lower().rstrip("."): v for k, v in records.items()}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Addresses of `host`, or OSError like a failed getaddrinfo."""
        name = host.lower().rstrip(".")
        ips = [name] if _is_ip(name) else self.records.get(name)
        if not ips:
            raise OSError(socket.EAI_NONAME, f"{host}: unknown to StaticResolver")
        return [_result(host, ip, port) for ip in ips]

    async def close(self) -> None:
        """Nothing to release."""


def _result(host: str, ip: str, port: int) -> ResolveResult:
    """One aiohttp ResolveResult entry."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    return ResolveResult(hostname=host, host=ip, port=port, family=family, proto=0,
                         flags=socket.AI_NUMERICHOST)
