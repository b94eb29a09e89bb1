"""The HTTP clients: the plain-HTTP path and one aiohttp session (HTTPS, proxies).

Without a proxy, the reader and the robots stage send plain `http://` requests through
`http1.py`, which does only what a crawler needs; HTTPS and anything through a proxy go
through aiohttp (`aio.py`), imported when the first such request is made (`LazySession`).
Both resolve through `resolver.CrawlerResolver` (the DNS stage's cache) and send the same
headers.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from larbinpy.config import Config
from larbinpy.net.body import ACCEPT_ENCODING, BodyError
from larbinpy.net.http1 import FetchError, Http1Client
from larbinpy.net.policy import DeniedNetworkError
from larbinpy.net.resolver import CrawlerResolver, HostLookup
from larbinpy.stats import Outcome


def request_headers(cfg: Config) -> dict[str, str]:
    """Headers sent with every request: who we are and how to reach the operator."""
    headers = {"User-Agent": cfg.user_agent, "Accept": "*/*", "Accept-Encoding": ACCEPT_ENCODING}
    if cfg.from_:
        headers["From"] = cfg.from_
    return headers


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


class LazySession:
    """The crawl's aiohttp session (`aio.make_session`), made at the first request that needs
    it: a crawl of plain `http://` sites without a proxy never imports aiohttp."""

    def __init__(self, cfg: Config, dns: HostLookup) -> None:
        self.cfg, self.dns = cfg, dns
        self._session: Any = None
        self._aio: Any = None  # the aio module, once imported

    def get(self, url: Any, **kwargs: Any) -> Any:
        """A GET through aiohttp (`aio.PatientGet`, a request context manager)."""
        if self._session is None:
            from larbinpy.net import aio

            self._aio = aio
            self._session = aio.make_session(self.cfg, self.dns, request_headers(self.cfg),
                                             keepalive_seconds(self.cfg))
        return self._aio.PatientGet(self._session, url, kwargs)

    def failure_kind(self, exc: BaseException) -> Outcome | None:
        """The outcome kind of an aiohttp failure; None if `exc` is not aiohttp's."""
        return None if self._aio is None else self._aio.failure_kind(exc)

    def timeout_limit(self, exc: BaseException) -> str | None:
        """Which timeout an aiohttp failure ran out of (`aio.timeout_limit`); None if `exc`
        is not aiohttp's or not a timeout."""
        return None if self._aio is None else self._aio.timeout_limit(exc)

    async def close(self) -> None:
        """Close the session, if one was made."""
        if self._session is not None:
            await self._session.close()


def failure_kind(exc: BaseException, session: LazySession) -> Outcome | None:
    """The outcome kind of a failed request (either client); None for an exception that is
    not a request's failure (a bug, to be raised)."""
    kind = session.failure_kind(exc)  # aiohttp's errors (HTTPS, proxies), if it was used
    if kind is not None:
        return kind
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return Outcome.timeout
    if isinstance(exc, ssl.SSLError):  # before OSError, of which it is one
        return Outcome.tlsError
    if isinstance(exc, OSError | ValueError):
        return Outcome.noConnection
    return None


def failure_note(exc: BaseException, session: LazySession) -> str | None:
    """The crawl log's words for a fetch that timed out: which limit ran out (either client,
    or a body cut by minRate); None for any other failure."""
    limit = getattr(exc, "timeout", None)  # FetchError, BodyError: set by our own code
    if limit is None and not isinstance(exc, FetchError | BodyError):
        limit = session.timeout_limit(exc)
        if limit is None and isinstance(exc, asyncio.TimeoutError | TimeoutError):
            # a fetch's deadline with our client (a wait for document memory ends there too)
            limit = "timeoutTotal"
    return None if limit is None else timeout_note(limit, session.cfg)


def timeout_note(limit: str, cfg: Config) -> str:
    """What a timeout's limit (its config key) means, in the crawl log's words."""
    if limit == "timeoutConnect":
        return f"connect took over {cfg.timeout_connect:g} s (timeoutConnect)"
    if limit == "timeoutRead":
        return f"no byte for {cfg.timeout_read:g} s (timeoutRead)"
    if limit == "minRate":
        return f"slower than {cfg.min_rate:g} bytes/s (minRate)"
    return f"over {cfg.timeout_total:g} s in all (timeoutTotal)"
