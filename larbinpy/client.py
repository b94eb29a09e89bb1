"""The HTTP client the robots and reader stages share: one aiohttp session, keep-alive.

One `TCPConnector` for the whole crawl; the opener already limits connections, so the
connector does not; DNS comes from the DNS stage's cache through `CrawlerResolver`.
HTTPS certificates are checked against the system store plus `caFile` unless `tlsVerify off`.
With `proxy host port` every request goes through that proxy (aiohttp sends plain HTTP in
absolute form and tunnels HTTPS with CONNECT); cookies (`cookies`) are kept by `cookies.py`,
per site and bounded, not by aiohttp's unbounded jar.
"""

from __future__ import annotations

import ssl

import aiohttp

from .body import ACCEPT_ENCODING
from .config import Config
from .stages.dns import CrawlerResolver, Dns


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
    ctx = ssl.create_default_context()
    if cfg.ca_file:
        ctx.load_verify_locations(cfg.ca_file)
    return ctx


def proxy_url(cfg: Config) -> str | None:
    """The configured proxy as a URL (None without one)."""
    if cfg.proxy is None:
        return None
    host, port = cfg.proxy
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_session(cfg: Config, dns: Dns) -> aiohttp.ClientSession:
    """The crawl's one client session."""
    connector = aiohttp.TCPConnector(
        limit=0,  # the opener enforces pagesConnexions and connectionsPerHost
        resolver=CrawlerResolver(dns),
        use_dns_cache=False,  # the DNS stage caches, honouring TTLs
        ssl=ssl_context(cfg),
        # an idle connection is only worth keeping until the site's next turn: long-lived idle
        # sockets to thousands of sites cost memory and file descriptors on both ends
        keepalive_timeout=min(cfg.wait_duration + 2.0, 10.0),
    )
    timeout = aiohttp.ClientTimeout(
        total=cfg.timeout_total, sock_connect=cfg.timeout_connect, sock_read=cfg.timeout_read
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers=request_headers(cfg),
        cookie_jar=aiohttp.DummyCookieJar(),  # cookies.py keeps them when configured
        auto_decompress=False,  # body.py decodes, under maxPageSize, keeping the raw bytes
        skip_auto_headers=("User-Agent",),
        proxy=proxy_url(cfg),
    )
