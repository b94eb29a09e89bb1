"""The crawl's one way to send a GET: the `Fetcher` picks the HTTP client and names failures.

In the pipeline, the reader (pages) and the robots stage (robots.txt) ask the Fetcher for a URL
and get a `Response` with its head read. Plain `http://` without a proxy goes through the
crawler's own client (`http1.py`), which does only what a crawler needs; HTTPS and anything
through a proxy go through one aiohttp session (`aio.py`), imported at the first request that
needs it, so a crawl of plain `http://` sites never loads aiohttp. Both resolve through
`resolver.CrawlerResolver` (the DNS stage's cache) and send the same headers.

Either client's response is a `Response` (`response.py`: what the stages, `body.read_body`
and `outputs.page_from_response` read of it), which mypy checks both against (`_checked`
below). The caller calls `release()` when done, in a `finally`. A request that fails
raises; `failure` says which outcome it counts as (and, for a timeout, which limit ran out,
in the crawl log's words), the same for both clients.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable
from typing import TYPE_CHECKING, NamedTuple

from larbinpy.config import Config
from larbinpy.net.body import ACCEPT_ENCODING, Body, BodyError, Throttle, read_body
from larbinpy.net.docmemory import DocumentMemory, Reservation
from larbinpy.net.http1 import FetchError, Http1Client, split_http_url
from larbinpy.net.policy import DeniedNetworkError
from larbinpy.net.resolver import CrawlerResolver, HostLookup
from larbinpy.net.response import Response
from larbinpy.stats import Outcome

if TYPE_CHECKING:  # aiohttp is loaded only when a request needs it
    from types import ModuleType

    import aiohttp

    from larbinpy.net import http1

__all__ = ["Failure", "Fetcher", "Response", "keepalive_seconds", "make_http1",
           "request_headers", "timeout_note"]


class Failure(NamedTuple):
    """What a failed request counts as: its outcome kind and, for a timeout, the crawl log's
    words for the limit that ran out (None for any other failure)."""

    kind: Outcome
    note: str | None = None


def request_headers(cfg: Config) -> dict[str, str]:
    """Headers sent with every request: who we are and how to reach the operator."""
    headers = {"User-Agent": cfg.user_agent, "Accept": "*/*", "Accept-Encoding": ACCEPT_ENCODING}
    if cfg.from_:
        headers["From"] = cfg.from_
    return headers


KEEPALIVE_MAX = 10.0


def keepalive_seconds(cfg: Config) -> float:
    """How long an idle connection is kept: until the site's next turn when that comes within
    KEEPALIVE_MAX, else not at all (0: closed after each answer)."""
    # Long-lived idle sockets to thousands of sites cost memory and descriptors on both ends,
    # and one that expires before the site's next turn is kept for nothing: at a polite
    # crawl's pace that is a descriptor a fetch (docs/architecture.md, "What a site costs").
    keep = cfg.wait_duration + 2.0
    return keep if keep <= KEEPALIVE_MAX else 0.0


def make_http1(cfg: Config, dns: HostLookup) -> Http1Client | None:
    """The plain-HTTP client (None with a proxy: then aiohttp speaks to it)."""
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


class Fetcher:
    """Sends the crawl's GETs through the right client and says what a failure counts as."""

    def __init__(self, cfg: Config, dns: HostLookup, limiter: Throttle | None = None,
                 memory: DocumentMemory | None = None) -> None:
        """`limiter`: the bandwidth limiter page bodies spend (`maxBandwidth`); `memory`: the
        documents' memory pool they take their bytes from (`documentMemory`)."""
        self.cfg, self.dns = cfg, dns
        self.limiter = limiter
        self.memory = memory or DocumentMemory(cfg.document_memory)
        self.http1 = make_http1(cfg, dns)  # plain http:// without a proxy
        self._session: aiohttp.ClientSession | None = None  # made at its first request
        self._aio: ModuleType | None = None  # the aio module, once imported

    def get(self, url: str, headers: dict[str, str] | None = None) -> Awaitable[Response]:
        """GET `url` (with `headers` besides the usual ones): the response once its head is
        in; the caller releases it. Raises on failure (`failure` says what it counts as).

        Not a coroutine itself: it hands back the client's own, so the plain-HTTP path costs
        no extra coroutine a page."""
        if self.http1 is not None:
            plain = split_http_url(url)
            if plain is not None:
                return self.http1.get(*plain, extra=headers)
        return self._aio_get(url, headers)

    async def _aio_get(self, url: str, headers: dict[str, str] | None) -> Response:
        """The GET through aiohttp (HTTPS, proxies), its session made at the first one."""
        from yarl import URL  # aiohttp's, loaded with it

        from larbinpy.net import aio

        if self._session is None:
            self._aio = aio
            self._session = aio.make_session(self.cfg, self.dns, request_headers(self.cfg),
                                             keepalive_seconds(self.cfg))
        # our URLs are canonical and already percent-encoded: yarl need not re-encode them
        return await aio.patient_get(self._session, URL(url, encoded=True), headers)

    async def read(self, resp: Response, started: float, limit: int | None = None,
                   keep_raw: bool = False, truncate: bool = False) -> tuple[Body, Reservation]:
        """A page's body, read under the crawl's limits: decoded up to `limit` bytes (else
        `maxPageSize`; cut there with `truncate`, else tooBig), `minRate`, the bandwidth
        limiter, and the document memory it holds until the caller gives it back (by
        `timeoutTotal` after `started`, a wait for memory ends too); `keep_raw`: the bytes as
        received too (archives)."""
        held = self.memory.reservation(started + self.cfg.timeout_total)
        body = await read_body(resp, limit or self.cfg.max_page_size, keep_raw=keep_raw,
                               limiter=self.limiter, min_rate=self.cfg.min_rate,
                               truncate=truncate, memory=held)
        return body, held

    def failure(self, exc: BaseException) -> Failure | None:
        """What a failed request (either client, its body included) counts as; None for an
        exception that is not a request's failure (a bug, to be raised)."""
        kind: Outcome | None
        if isinstance(exc, FetchError | BodyError):  # our own code named it
            kind, limit = exc.kind, exc.timeout
        else:
            aio = self._aio  # aiohttp's errors (HTTPS, proxies), if it was used
            kind = aio.failure_kind(exc) if aio is not None else None
            if kind is None:
                kind = _plain_failure_kind(exc)
                if kind is None:
                    return None
            # a timeout of aiohttp's names its limit; else the fetch's deadline ran out (a
            # wait for document memory ends there too)
            limit = ((aio.timeout_limit(exc) if aio is not None else None) or "timeoutTotal"
                     if kind is Outcome.timeout else None)
        if kind is Outcome.timeout and limit is not None:
            return Failure(kind, timeout_note(limit, self.cfg))
        return Failure(kind)

    async def close(self) -> None:
        """Close both clients' connections."""
        if self._session is not None:
            await self._session.close()
        if self.http1 is not None:
            self.http1.close()


def _plain_failure_kind(exc: BaseException) -> Outcome | None:
    """The outcome kind of a failure raised by the standard library (None: not a failure)."""
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return Outcome.timeout
    if isinstance(exc, ssl.SSLError):  # before OSError, of which it is one
        return Outcome.tlsError
    if isinstance(exc, OSError | ValueError):
        return Outcome.noConnection
    return None


def timeout_note(limit: str, cfg: Config) -> str:
    """What a timeout's limit (its config key) means, in the crawl log's words."""
    if limit == "timeoutConnect":
        return f"connect took over {cfg.timeout_connect:g} s (timeoutConnect)"
    if limit == "timeoutRead":
        return f"no byte for {cfg.timeout_read:g} s (timeoutRead)"
    if limit == "minRate":
        return f"slower than {cfg.min_rate:g} bytes/s (minRate)"
    return f"over {cfg.timeout_total:g} s in all (timeoutTotal)"


if TYPE_CHECKING:
    def _checked(ours: http1.Response, theirs: aiohttp.ClientResponse) -> list[Response]:
        """Never run: mypy checks here that both clients' responses are `Response`s."""
        return [ours, theirs]
