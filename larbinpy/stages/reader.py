"""Stage 6, larbin's checkAll: read a response, decide its outcome, pass the page on.

The opener calls `fetch(site, job)` for one job. The reader sends the request, reads the
body under `maxPageSize` (after decompression) and the bandwidth limiter, counts exactly one
outcome, hands 2xx pages to the outputs and their links back to the input stage; a redirect's
target goes back to input too, one hop further.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time

import aiohttp
import xxhash
from aiohttp.http_exceptions import TransferEncodingError

from ..body import BodyError, html_for_links, read_body
from ..config import Config
from ..extract import extract_links
from ..hashset import SeenSet
from ..netpolicy import DeniedNetworkError
from ..outputs import Outputs
from ..records import Job, Page, Site
from ..scope import url_extension
from ..stats import Stats
from ..urls import Normalizer
from .bandwidth import BandwidthLimiter
from .input import Input
from .robots import Robots

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.\-]*):")


class Reader:
    """Fetches one job and routes what came back."""

    def __init__(
        self,
        cfg: Config,
        stats: Stats,
        normalizer: Normalizer,
        robots: Robots,
        input_stage: Input,
        outputs: Outputs,
        limiter: BandwidthLimiter | None,
        contents: SeenSet | None,
        keep_raw: bool = False,
    ) -> None:
        self.cfg, self.stats, self.normalizer = cfg, stats, normalizer
        self.robots, self.input = robots, input_stage
        self.outputs = outputs
        self.limiter = limiter
        self.contents = contents  # noDup: digests of bodies already seen
        self.keep_raw = keep_raw  # an archival output wants the bytes as received
        self.session: aiohttp.ClientSession | None = None

    async def fetch(self, site: Site, job: Job) -> None:
        """Fetch one job and count its outcome."""
        if not self.outputs.ready:  # storage full or a slow hook: back-pressure, not memory
            await self.outputs.wait_ready()
        if not self.robots.allowed(site, job.url):
            self.stats.count("forbiddenRobots")
            return
        if self.cfg.max_pages_per_site and site.pages >= self.cfg.max_pages_per_site:
            self.stats.count("outOfScope")
            return
        site.pages += 1
        self.stats.count(await self._request(site, job))

    async def _request(self, site: Site, job: Job) -> str:
        """Send the request and read the response: the outcome kind."""
        assert self.session is not None
        start = time.monotonic()
        try:
            async with self.session.get(job.url, allow_redirects=False) as resp:
                return await self._response(site, job, resp, start)
        except BodyError as exc:
            return exc.kind
        except Exception as exc:  # noqa: BLE001 - every failure becomes one counted outcome
            return failure_kind(exc)

    async def _response(
        self, site: Site, job: Job, resp: aiohttp.ClientResponse, start: float
    ) -> str:
        """Route a response by status and type: the outcome kind."""
        self.stats.pages += 1
        status = resp.status
        if not 200 <= status < 300:
            if 300 <= status < 400:
                kind = self._redirect(job, status, resp.headers.get("Location"))
            else:
                kind = "err50X" if status >= 500 else "err40X" if status >= 400 else "badType"
            if self.keep_raw:  # archives want every exchange, not only the successes
                self.outputs.write(await self._page(site, job, resp, start))
            return kind
        if not self._wanted_type(resp.content_type, job.url):
            return "badType"
        page = await self._page(site, job, resp, start)
        if self.contents is not None and self._seen_body(page.body):
            self.outputs.record_duplicate(page)  # archives record a revisit
            return "duplicate"
        if page.content_type in HTML_TYPES:
            text = html_for_links(page.body, resp.headers.get("Content-Type", ""))
            page.links, dropped = extract_links(
                text, job.url, self.normalizer,
                follow_images=self.cfg.follow_images, max_links=self.cfg.max_links_per_page,
            )
            self.stats.links_dropped += dropped
        self.outputs.write(page)
        self.input.add_links(job, job.url, page.links)
        return "success"

    async def _page(
        self, site: Site, job: Job, resp: aiohttp.ClientResponse, start: float
    ) -> Page:
        """Read the body under the limits and describe the exchange."""
        body = await read_body(
            resp, self.cfg.max_page_size, keep_raw=self.keep_raw, limiter=self.limiter,
            min_rate=self.cfg.min_rate,
        )
        self.stats.bytes += body.wire_bytes
        peer = resp.connection.transport.get_extra_info("peername") if resp.connection else None
        version = resp.version
        return Page(
            job=job, url=job.url, status=resp.status, headers=resp.headers, body=body.data,
            content_type=resp.content_type,
            ip=peer[0] if peer else (site.ip.addr if site.ip else ""),
            fetched_at=time.time(), elapsed=time.monotonic() - start,
            raw_body=body.raw, raw_headers=resp.raw_headers,
            http_version=f"HTTP/{version.major}.{version.minor}" if version else "HTTP/1.1",
            reason=resp.reason or "", request_headers=resp.request_info.headers,
        )

    def _redirect(self, job: Job, status: int, location: str | None) -> str:
        """A 3xx: its target goes back to input as a new job, one hop further.

        A target that is not http(s) is refused like such a link (counted outOfScope); a 3xx
        whose Location is missing or unparsable is a broken response (badHttp).
        """
        if not location or not location.strip():
            return "err30X" if status in (300, 304) else "badHttp"  # these need no Location
        target = self.normalizer.resolve(job.url, location)
        if target is not None:
            self.input.add_redirect(job, target)
            return "err30X"
        scheme = _SCHEME.match(location)
        if scheme and scheme.group(1).lower() not in ("http", "https"):
            self.stats.count("outOfScope")
            return "err30X"
        return "badHttp"

    def _wanted_type(self, ctype: str, url: str) -> bool:
        """HTML always; images with followImages; others per anyType/contentTypes/specificSearch."""
        cfg = self.cfg
        if ctype in HTML_TYPES or cfg.any_type or ctype in cfg.content_types:
            return True
        if cfg.follow_images and ctype.startswith("image/"):
            return True
        return bool(cfg.specific_search) and url_extension(url) in cfg.specific_search

    def _seen_body(self, body: bytes) -> bool:
        """noDup: was a page with this exact body already seen? (records it if not)"""
        assert self.contents is not None
        digest = xxhash.xxh3_128_hexdigest(body)
        if self.contents.missing([digest]):
            self.contents.add([digest])
            return False
        return True


def failure_kind(exc: BaseException) -> str:
    """The outcome kind of a failed fetch."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, DeniedNetworkError):
            return "deniedNetwork"
        if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            return "tlsError"
        if isinstance(exc, getattr(aiohttp, "ClientConnectorDNSError", ())):
            return "noDNS"
        return "noConnection"
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, ssl.SSLError):
        return "tlsError"
    if isinstance(exc, aiohttp.ClientPayloadError):
        # bad chunking is malformed HTTP; a body shorter than announced, or reset, stopped early
        return "badHttp" if isinstance(exc.__cause__, TransferEncodingError) else "earlyStop"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "earlyStop"
    if isinstance(exc, aiohttp.ClientResponseError):
        # never raised for a status (no raise_for_status): the response did not parse (status
        # line, a header line over 8 KiB, too many headers, a bad first chunk size)
        return "badHttp"
    if isinstance(exc, aiohttp.ClientError | OSError | ValueError):
        return "noConnection"
    raise exc
