"""The HTTP clients: one aiohttp session (HTTPS, proxies) and the plain-HTTP path.

One `TCPConnector` for the whole crawl; the opener already limits connections, so the
connector does not; DNS comes from the DNS stage's cache through `resolver.CrawlerResolver`.
HTTPS certificates are checked against the system store plus `caFile` unless `tlsVerify off`.
With `proxy host port` every request goes through that proxy (aiohttp sends plain HTTP in
absolute form and tunnels HTTPS with CONNECT); cookies (`cookies`) are kept by `cookies.py`,
per site and bounded, not by aiohttp's unbounded jar. Without a proxy, the reader sends
plain `http://` pages through `http1.py` instead, which does only what a crawler needs.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import aiohttp

from larbinpy.config import Config
from larbinpy.net.body import ACCEPT_ENCODING, CountingHandler
from larbinpy.net.http1 import FetchError, Http1Client, patiently
from larbinpy.net.policy import DeniedNetworkError
from larbinpy.net.resolver import CrawlerResolver, HostLookup
from larbinpy.stats import Outcome


def request_headers(cfg: Config) -> dict[str, str]:
    """Headers sent with every request: who we are and how to reach the operator."""
    headers = {"User-Agent": cfg.user_agent, "Accept": "*/*", "Accept-Encoding": ACCEPT_ENCODING}
    if cfg.from_:
        headers["From"] = cfg.from_
    return headers


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


def keepalive_seconds(cfg: Config) -> float:
    """How long an idle connection is kept: only until the site's next turn is worth it."""
    # long-lived idle sockets to thousands of sites cost memory and descriptors on both ends
    return min(cfg.wait_duration + 2.0, 10.0)


def make_http1(cfg: Config, dns: HostLookup) -> Http1Client | None:
    """The reader's plain-HTTP client (None with a proxy: then aiohttp speaks to it)."""
    if cfg.proxy is not None:
        return None
    resolver = CrawlerResolver(dns, cfg.proxy)

    async def resolve(host: str, port: int) -> list[str]:
        """Allowed addresses, from the DNS stage's cache; FetchError with the kind if none."""
        try:
            return [r["host"] for r in await resolver.resolve(host, port)]
        except DeniedNetworkError:
            raise FetchError(Outcome.deniedNetwork) from None
        except OSError:
            raise FetchError(Outcome.noDNS) from None

    return Http1Client(
        request_headers(cfg), resolve, keepalive=keepalive_seconds(cfg),
        connect_timeout=cfg.timeout_connect, read_timeout=cfg.timeout_read,
        total_timeout=cfg.timeout_total,
    )


class PatientConnector(aiohttp.TCPConnector):
    """aiohttp's connector, whose connects wait while local resources (descriptors) are short,
    like the HTTP/1.1 client's (`http1.patiently`); the session's total timeout still bounds
    the fetch."""

    async def _wrap_create_connection(self, *args: Any, **kwargs: Any) -> Any:
        connect = super()._wrap_create_connection
        result, _ = await patiently(lambda _waited: connect(*args, **kwargs))
        return result


def make_session(cfg: Config, dns: HostLookup) -> aiohttp.ClientSession:
    """The crawl's one client session."""
    connector = PatientConnector(
        limit=0,  # the opener enforces pagesConnexions and connectionsPerHost
        resolver=CrawlerResolver(dns, cfg.proxy),
        use_dns_cache=False,  # the DNS stage caches, honouring TTLs
        ssl=ssl_context(cfg),
        keepalive_timeout=keepalive_seconds(cfg),
    )
    timeout = aiohttp.ClientTimeout(
        total=cfg.timeout_total, sock_connect=cfg.timeout_connect, sock_read=cfg.timeout_read
    )
    # every byte of a body counted, chunk framing too (body.CountingHandler; aiohttp has no
    # public way to give a connector its protocol)
    connector._factory = functools.partial(CountingHandler, loop=connector._loop)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers=request_headers(cfg),
        cookie_jar=aiohttp.DummyCookieJar(),  # cookies.py keeps them when configured
        auto_decompress=False,  # body.py decodes, under maxPageSize, keeping the raw bytes
        skip_auto_headers=("User-Agent",),
        proxy=proxy_url(cfg),
    )
