"""Stage 6, larbin's checkAll: read a response, decide its outcome, pass the page on.

The opener calls `fetch(site, job)` for one job. The reader sends the request through the
`Fetcher` (`net/fetcher.py`: which client, what a failure counts as), reads the body under
`maxPageSize` (after decompression) and the bandwidth limiter, counts exactly one outcome and
routes the response (`_response`):

* 429/503: the site pauses and the job goes back to its queue, a bounded number of times
  (`net/backoff.BackOff`);
* 2xx: a page of a wanted type goes to the parser stage (`parser.py`: links to input, page to
  the outputs), unless `noDup` has seen its body; a sitemap job's body goes to
  `stages/sitemaps.py` instead (its URLs to input), and a feed's (RSS, Atom; or XML whose
  root says feed or sitemap) to `stages/feeds.py`;
* 3xx: the target goes back to input, one hop further (with the job's tag and kind);
* with an archival output (WARC), every exchange that is not a page goes to the archives too.

With `cookies`, the site's cookies go with each request and its `Set-Cookie` answers are kept
(`cookies.py`).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import xxhash

from larbinpy.config import Config
from larbinpy.frontier.endings import Endings
from larbinpy.frontier.seen import SeenSet
from larbinpy.frontier.sites import Sites
from larbinpy.links.scope import url_extension
from larbinpy.links.sitemaps import MAX_BYTES as SITEMAP_MAX_BYTES
from larbinpy.links.urls import Normalizer
from larbinpy.net.backoff import BACK_OFF_STATUSES, BackOff
from larbinpy.net.fetcher import Fetcher, Response
from larbinpy.outputs import Outputs, page_from_response
from larbinpy.records import Job, JobKind, Page, Site
from larbinpy.stages.feeds import is_feed_type, is_xml_type, take_xml
from larbinpy.stages.input import Input
from larbinpy.stages.parser import HTML_TYPES, Parser
from larbinpy.stages.recrawl import Recrawl
from larbinpy.stages.robots import Robots
from larbinpy.stages.sitemaps import take_sitemap
from larbinpy.stats import Outcome, Stats

if TYPE_CHECKING:  # loaded when asked for: cookies with `cookies`, answers with `recrawl on`
    from larbinpy.frontier.recrawl import Answer
    from larbinpy.net.cookies import CookieJar

_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.\-]*):")


class Exchange:
    """One fetch on its way through the reader: when it started, and what its crawl-log line
    says of the answer (set as the answer is read) or of the failure (`note`)."""

    __slots__ = ("answer", "ctype", "nbytes", "note", "start", "status")

    def __init__(self, start: float, answer: Answer | None = None) -> None:
        self.start = start
        self.status: int | None = None
        self.ctype: str | None = None
        self.nbytes = 0  # bytes on the wire, when the body was read
        self.note: str | None = None  # a timeout: which limit ran out
        self.answer = answer  # recrawl: what the scheduler is told of this fetch


@dataclass(frozen=True, slots=True)
class Routes:
    """Where the reader sends what it read."""

    parser: Parser  # 2xx pages (links, then the outputs) and the exchanges archives keep
    input: Input  # redirect targets, a sitemap's URLs
    outputs: Outputs  # back-pressure, and the methods exchanges are passed on to
    normalizer: Normalizer  # resolves a redirect's Location
    contents: SeenSet | None  # noDup: digests of bodies already seen


class Reader:
    """Fetches one job and routes what came back."""

    def __init__(self, cfg: Config, stats: Stats, fetcher: Fetcher, robots: Robots,
                 sites: Sites, routes: Routes, endings: Endings, recrawl: Recrawl) -> None:
        """`fetcher` sends the request and reads the body under the crawl's limits; `robots`
        says what a site allows; `sites` takes back a job a 429/503 asks to retry (its
        site's queue) and counts pages; `endings` is told each job's final outcome, once;
        `recrawl` gives a fetch its history and validators (`NoRecrawl`: none)."""
        self.cfg, self.stats, self.fetcher, self.robots = cfg, stats, fetcher, robots
        self.sites, self.endings, self.recrawl = sites, endings, recrawl
        self.parser, self.input, self.outputs = routes.parser, routes.input, routes.outputs
        self.normalizer, self.contents = routes.normalizer, routes.contents
        self.keep_raw = routes.outputs.keep_raw  # an archival output wants the raw bytes
        self.backoff = BackOff(cfg.max_retries, cfg.max_retry_after, sites, sites.clock)
        self.cookies = _cookie_jar() if cfg.cookies else None

    def refused(self, site: Site, job: Job) -> bool:
        """Must this job not be requested at all? (If so, its outcome is counted here.)

        The opener asks before a fetch, so refused jobs cost no connection and no politeness
        wait: a site whose queue is all disallowed drains at once, not one URL per waitDuration.
        A job that reached its outcome before a crash (after the last checkpoint) is skipped
        without a count: it was counted and logged then.
        """
        if self.endings.replayed(job.url) and job.kind is not JobKind.REVISIT:
            self.recrawl.skipped(site.key)
            return True  # (a revisit's truth is the schedule: `fetch` skips a stale one)
        if not self.robots.allowed(site, job.url):
            self.stats.count(Outcome.forbiddenRobots)
            self.endings.end(job, Outcome.forbiddenRobots)
            return True
        if (self.cfg.max_pages_per_site and site.pages >= self.cfg.max_pages_per_site
                and job.kind < JobKind.REVISIT):  # the limit counts pages: not visits, requisites
            self.stats.count(Outcome.outOfScope)
            self.endings.end(job, Outcome.outOfScope)
            return True
        return False

    async def fetch(self, site: Site, job: Job) -> None:
        """Fetch one job and count its outcome."""
        # a worker reaches here in the turn its last fetch ended: the turn's end runs first
        # (its final lines reach the done-record), so a kill -9 re-fetches at most the
        # requests on the wire
        if self.endings.pending:
            await self.endings.recorded()
        if not self.outputs.ready:  # storage full or a slow hook: back-pressure, not memory
            await self.outputs.wait_ready()
        prepared = self.recrawl.prepare(site, job)
        if prepared is None:  # a stale revisit: fetched and scheduled again since it was popped
            return
        answer, headers = prepared
        if job.kind < JobKind.REVISIT:  # maxPagesPerSite counts pages: not visits, requisites
            self.sites.count_page(site)
        ex = Exchange(time.monotonic(), answer)
        kind = await self._request(site, job, ex, headers)
        self.stats.count(kind)
        if answer is not None:
            answer.elapsed = time.monotonic() - ex.start
        if kind is not Outcome.backedOff:  # a job sent back to its queue ends later
            self.endings.end(job, kind, ex.status, ex.nbytes,
                             round((time.monotonic() - ex.start) * 1000), ex.ctype, ex.note,
                             answer)
        elif job.kind is JobKind.REVISIT:
            self.recrawl.release(job)  # it comes back through its site's queue

    async def _request(self, site: Site, job: Job, ex: Exchange,
                       headers: dict[str, str] | None = None) -> Outcome:
        """Send the request (with `headers` besides the usual ones: a revisit's validators)
        and read the response: the outcome kind."""
        if self.cookies is not None:
            cookie = self.cookies.header(site.key, _path(job.url, site.key))
            if cookie:
                headers = {**(headers or {}), "Cookie": cookie}
        headers = headers or None
        try:
            resp = await self.fetcher.get(job.url, headers)
            try:  # (what `async with resp` does, without its two coroutines a page)
                if self.cookies is not None:  # (most crawls keep none: no call a page then)
                    self._keep_cookies(site, job, resp, self.cookies)
                return await self._response(site, job, resp, ex)
            finally:
                resp.release()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one counted outcome
            failure = self.fetcher.failure(exc)
            if failure is None:
                raise
            ex.note = failure.note  # a timeout: which limit ran out, in words
            return failure.kind

    def _keep_cookies(self, site: Site, job: Job, resp: Response, jar: CookieJar) -> None:
        """With `cookies`: keep the site's cookies from the response's Set-Cookie headers."""
        if "Set-Cookie" in resp.headers:
            jar.store(site.key, _path(job.url, site.key), resp.headers.getall("Set-Cookie"))

    async def _response(self, site: Site, job: Job, resp: Response, ex: Exchange) -> Outcome:
        """Route one response by status: the outcome kind."""
        self.stats.pages += 1
        status = ex.status = resp.status
        ex.ctype = resp.content_type
        answer = ex.answer
        if answer is not None:  # recrawl on
            headers = resp.headers
            answer.heard(status, headers.get("ETag"), headers.get("Last-Modified"),
                         headers.get("Date"))
            if status == 304 and answer.conditional:
                return await self._revisited(site, job, resp, ex, Outcome.notModified)
        if status not in BACK_OFF_STATUSES:
            self.backoff.answered(site)
        elif self.backoff.retry(site, job, resp.headers.get("Retry-After")):
            return await self._archived(site, job, resp, ex, Outcome.backedOff)
        # (a 429/503 whose retries are spent is counted by its status)
        if 200 <= status < 300:
            return await self._ok(site, job, resp, ex)
        if 300 <= status < 400:
            kind = self._redirect(job, status, resp.headers.get("Location"))
        else:
            kind = (Outcome.err50X if status >= 500 else Outcome.err40X if status >= 400
                    else Outcome.badType)
        return await self._archived(site, job, resp, ex, kind)

    async def _ok(self, site: Site, job: Job, resp: Response, ex: Exchange) -> Outcome:
        """A 2xx: a sitemap's URLs to input, a feed's entries too (`stages/feeds.py`); a page
        of a wanted type to the parser, unless noDup has seen its body."""
        if job.kind is JobKind.REQUISITE:
            return await self._requisite(site, job, resp, ex)
        if job.kind == JobKind.SITEMAP:
            page = await self._page(site, job, resp, ex, SITEMAP_MAX_BYTES, truncate=True)
            if self.keep_raw:  # archived like robots.txt, not as a page of the crawl
                self.parser.pass_on(self.outputs.record_robots, page)
            return take_sitemap(job, page.body, self.input, self.stats,
                                self.recrawl.lastmod)
        if self._feed_type(resp.content_type, job.url):  # a feed, or XML that may be one
            page = await self._page(site, job, resp, ex, SITEMAP_MAX_BYTES, truncate=True)
            if ex.answer is not None and ex.answer.found(page.raw_body or page.body):
                return self._as_kept(page, ex, Outcome.unchanged)  # nothing new listed
            if self.keep_raw:  # archived like a sitemap
                self.parser.pass_on(self.outputs.record_robots, page)
            return take_xml(job, resp.content_type, page.body, self.input, self.stats,
                            self.recrawl.lastmod)
        if not self._wanted_type(resp.content_type, job.url):
            return Outcome.badType
        page = await self._page(site, job, resp, ex)
        if ex.answer is not None:
            payload = page.raw_body if page.raw_body is not None else page.body
            if ex.answer.found(payload):
                return self._as_kept(page, ex, Outcome.unchanged)
        if self.contents is not None and self._seen_body(page.body):
            self.parser.pass_on(self.outputs.record_duplicate, page)  # archives: a revisit
            return Outcome.duplicate
        self.parser.take(page)  # links, outputs, input
        return Outcome.success

    async def _requisite(self, site: Site, job: Job, resp: Response, ex: Exchange) -> Outcome:
        """A 2xx requisite, of any type: to the parser (a stylesheet's url()s, then the
        outputs), whatever `noDup`, `anyType` or `contentTypes` say of pages. With recrawl,
        checked again after a page that needs it changed: the same body is a revisit."""
        page = await self._page(site, job, resp, ex)
        if ex.answer is not None:
            payload = page.raw_body if page.raw_body is not None else page.body
            if ex.answer.found(payload):
                return self._as_kept(page, ex, Outcome.unchanged)
        self.parser.take(page)
        return Outcome.requisite

    async def _revisited(self, site: Site, job: Job, resp: Response, ex: Exchange,
                         kind: Outcome) -> Outcome:
        """A 304 to a revisit's validators: the copy kept is current."""
        if not self.keep_raw:
            return kind
        return self._as_kept(await self._page(site, job, resp, ex), ex, kind)

    def _as_kept(self, page: Page, ex: Exchange, kind: Outcome) -> Outcome:
        """A revisit that found the copy kept: archives record a revisit of the original
        capture; nothing else sees it (no new content, no links to follow)."""
        page.revisit = self.recrawl.revisit_of(ex.answer, page.url, kind)
        if self.keep_raw and page.revisit is not None:
            self.parser.pass_on(self.outputs.write, page)
        return kind

    async def _archived(
        self, site: Site, job: Job, resp: Response, ex: Exchange, kind: Outcome
    ) -> Outcome:
        """An answer that is not a page of the crawl: `kind`, after handing the exchange to
        the archives (when there are any: they want every exchange)."""
        if self.keep_raw:
            self.parser.pass_on(self.outputs.write, await self._page(site, job, resp, ex))
        return kind

    async def _page(
        self, site: Site, job: Job, resp: Response, ex: Exchange,
        limit: int | None = None, truncate: bool = False,
    ) -> Page:
        """Read the body under the limits and describe the exchange."""
        body, held = await self.fetcher.read(resp, ex.start, limit, self.keep_raw, truncate)
        self.parser.hold(held)  # given back once this turn's documents are parsed
        ex.nbytes = body.wire_bytes
        self.stats.bytes += body.wire_bytes
        return page_from_response(job, resp, body, ex.start, site.ip.addr if site.ip else "")

    def _redirect(self, job: Job, status: int, location: str | None) -> Outcome:
        """A 3xx: its target goes back to input as a new job, one hop further.

        A target that is not http(s) is refused like such a link (counted outOfScope); a 3xx
        whose Location is missing or unparsable is a broken response (badHttp).
        """
        if not location or not location.strip():
            # 300 and 304 need no Location
            return Outcome.err30X if status in (300, 304) else Outcome.badHttp
        target = self.normalizer.resolve(job.url, location)
        if target is not None:
            self.input.add_redirect(job, target)
            return Outcome.err30X
        scheme = _SCHEME.match(location)
        if scheme and scheme.group(1).lower() not in ("http", "https"):
            self.stats.count(Outcome.outOfScope)
            return Outcome.err30X
        return Outcome.badHttp

    def _wanted_type(self, ctype: str, url: str) -> bool:
        """HTML always; images with followImages; others per anyType/contentTypes/specificSearch."""
        cfg = self.cfg
        if ctype in HTML_TYPES or cfg.any_type or ctype in cfg.content_types:
            return True
        if cfg.follow_images and ctype.startswith("image/"):
            return True
        return bool(cfg.specific_search) and url_extension(url) in cfg.specific_search

    def _feed_type(self, ctype: str, url: str) -> bool:
        """A feed's type; or a generic XML one not wanted as a page, whose body is read under
        the sitemap limits to tell a feed or a sitemap (found as a link) from other XML."""
        return is_feed_type(ctype) or (is_xml_type(ctype) and not self._wanted_type(ctype, url))

    def _seen_body(self, body: bytes) -> bool:
        """noDup: was a page with this exact body already seen? (records it if not)"""
        assert self.contents is not None
        digest = xxhash.xxh3_128_hexdigest(body)
        if self.contents.missing([digest]):
            self.contents.add([digest])
            return False
        return True


def _cookie_jar() -> CookieJar:
    """A jar for `cookies` (its module is loaded only then: most crawls keep none)."""
    from larbinpy.net.cookies import CookieJar

    return CookieJar()


def _path(url: str, key: str) -> str:
    """The path (and query) of a URL of the site `key`."""
    return url[len(key):] or "/"
