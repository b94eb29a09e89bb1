"""aiohttp, for what the crawler's own HTTP/1.1 client (`http1.py`) does not do: HTTPS and
proxies.

Imported by `fetcher.Fetcher` at the first request that needs it, so a crawl of plain
`http://` sites without a proxy never loads aiohttp (about half of the process's start-up CPU).

One `TCPConnector` for the whole crawl; the opener already limits connections, so the
connector does not; DNS comes from the DNS stage's cache through `resolver.CrawlerResolver`.
HTTPS certificates are checked against the system store plus `caFile` unless `tlsVerify off`.
With `proxy host port` every request goes through that proxy (aiohttp sends plain HTTP in
absolute form and tunnels HTTPS with CONNECT); cookies (`cookies`) are kept by `cookies.py`,
per site and bounded, not by aiohttp's unbounded jar.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from typing import cast

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import TransferEncodingError
from yarl import URL

from larbinpy.config import Config
from larbinpy.net.http1 import patiently
from larbinpy.net.policy import DeniedNetworkError
from larbinpy.net.resolver import CrawlerResolver, HostLookup
from larbinpy.stats import Outcome

PayloadError = aiohttp.ClientPayloadError  # a broken body, as when CountingHandler cuts one

class CountingHandler(ResponseHandler):
    """aiohttp's connection protocol, also counting the bytes a body takes on the wire.

    aiohttp's parser skips chunk extensions and leading zeros of chunk sizes without a limit,
    and its read timeout restarts on every byte: a server sending them for ever would be read
    until the total timeout. `body.read_body` gives the connection a budget; bytes beyond it
    close the connection before they are parsed, and `read_body` counts the broken body as
    tooBig.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.budget: int | None = None
        self.received = 0
        self.over_budget = False

    def limit_reading(self, budget: int) -> None:
        """From now on, at most `budget` more bytes for the response being read."""
        self.budget, self.received = budget, 0

    def data_received(self, data: bytes) -> None:
        """Count, then parse (or refuse: over the budget)."""
        if self.budget is not None:
            self.received += len(data)
            if self.received > self.budget or self.over_budget:
                self.over_budget = True
                if self.transport is not None:
                    self.transport.close()
                return
        super().data_received(data)


class AioResolver(AbstractResolver):
    """aiohttp's resolver interface over `CrawlerResolver` (the DNS stage's cache)."""

    def __init__(self, resolver: CrawlerResolver) -> None:
        self.resolver = resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Allowed addresses of `host`; DeniedNetworkError or OSError otherwise."""
        return await self.resolver.resolve(host, port)  # type: ignore[return-value]  # ResolveResult keys

    async def close(self) -> None:
        """Nothing to release: the DNS stage owns the channel."""


async def patient_get(session: aiohttp.ClientSession, url: URL,
                      headers: dict[str, str] | None) -> aiohttp.ClientResponse:
    """A GET (no redirects followed) whose connect, failing for want of local resources
    (descriptors), is tried again as the HTTP/1.1 client's are (`http1.patiently`), within the
    same total timeout: the waits count against `timeoutTotal`. (A connect that failed sent
    nothing, so sending the request again is the same request; aiohttp's public API, no
    connector internals.) The caller releases the response."""

    async def send(waited: float) -> aiohttp.ClientResponse:
        """One try, its total timeout less the time already spent waiting."""
        timeout = session.timeout
        if waited and timeout.total is not None:
            if waited >= timeout.total:
                raise TimeoutError  # timeoutTotal ran out while descriptors were short
            timeout = aiohttp.ClientTimeout(
                total=timeout.total - waited, connect=timeout.connect,
                sock_read=timeout.sock_read, sock_connect=timeout.sock_connect,
                ceil_threshold=timeout.ceil_threshold)
        return await session.get(url, allow_redirects=False, headers=headers, timeout=timeout)

    resp, _ = await patiently(send)
    return resp


def ssl_context(cfg: Config) -> ssl.SSLContext | bool:
    """Certificate checking as configured (`tlsVerify`, `caFile`)."""
    if not cfg.tls_verify:
        return False
    if not cfg.ca_file:
        # aiohttp's own verifying context, which aiohttp 3.10.6 and later build when imported:
        # making one here would read the system's certificates from disk on the event loop
        # (blocking disk I/O at each crawl's start)
        return True
    ctx = ssl.create_default_context()
    ctx.load_verify_locations(cfg.ca_file)
    return ctx


def proxy_url(cfg: Config) -> str | None:
    """The configured proxy as a URL (None without one)."""
    if cfg.proxy is None:
        return None
    host, port = cfg.proxy
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_session(cfg: Config, dns: HostLookup, headers: dict[str, str],
                 keepalive: float) -> aiohttp.ClientSession:
    """The crawl's one aiohttp session, sending `headers` with every request."""
    connector = aiohttp.TCPConnector(
        limit=0,  # the opener enforces pagesConnexions and connectionsPerHost
        resolver=AioResolver(CrawlerResolver(dns, cfg.proxy)),
        use_dns_cache=False,  # the DNS stage caches, honouring TTLs
        ssl=ssl_context(cfg),
        **({"keepalive_timeout": keepalive} if keepalive > 0 else {"force_close": True}),
    )
    timeout = aiohttp.ClientTimeout(
        total=cfg.timeout_total, sock_connect=cfg.timeout_connect, sock_read=cfg.timeout_read
    )
    # every byte of a body counted, chunk framing too (CountingHandler). aiohttp has no public
    # way to give a connector its protocol: pyproject pins aiohttp to the versions whose
    # connector makes its connections with `_factory` (tests/test_dependency_internals.py).
    if not isinstance(getattr(connector, "_factory", None), functools.partial):
        raise RuntimeError(f"aiohttp {aiohttp.__version__} has no TCPConnector._factory: "
                           "larbinpy cannot count the bytes of its responses")
    connector._factory = cast(  # the protocol type aiohttp declares; CountingHandler is one
        "functools.partial[ResponseHandler]",
        functools.partial(CountingHandler, loop=asyncio.get_running_loop()),
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers=headers,
        cookie_jar=aiohttp.DummyCookieJar(),  # cookies.py keeps them when configured
        auto_decompress=False,  # body.py decodes, under maxPageSize, keeping the raw bytes
        skip_auto_headers=("User-Agent",),
        proxy=proxy_url(cfg),
    )


def timeout_limit(exc: BaseException) -> str | None:
    """Which timeout an aiohttp failure ran out of: timeoutConnect or timeoutRead (its own
    errors), timeoutTotal (the session's total timeout, a plain TimeoutError); None if not a
    timeout."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "timeoutConnect"
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return "timeoutRead"
    return "timeoutTotal" if isinstance(exc, asyncio.TimeoutError | TimeoutError) else None


def failure_kind(exc: BaseException) -> Outcome | None:
    """The outcome kind of an aiohttp failure; None for an exception that is not aiohttp's."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, DeniedNetworkError):
            return Outcome.deniedNetwork
        if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            return Outcome.tlsError
        if isinstance(exc, getattr(aiohttp, "ClientConnectorDNSError", ())):
            return Outcome.noDNS
        return Outcome.noConnection
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return Outcome.timeout  # aiohttp's own timeouts are TimeoutErrors too
    if isinstance(exc, aiohttp.ClientPayloadError):
        # bad chunking is malformed HTTP; a body shorter than announced, or reset, stopped early
        bad_chunks = isinstance(exc.__cause__, TransferEncodingError)
        return Outcome.badHttp if bad_chunks else Outcome.earlyStop
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return Outcome.earlyStop
    if isinstance(exc, aiohttp.ClientResponseError):
        # never raised for a status (no raise_for_status): the response did not parse (status
        # line, a header line over 8 KiB, too many headers, a bad first chunk size)
        return Outcome.badHttp
    if isinstance(exc, aiohttp.ClientError):
        return Outcome.noConnection
    return None
