"""Robots.txt, fetched through the opener as a site's first fetch, before any of its pages.

The opener runs `fetch` as a site's first fetch, so robots.txt requests obey the same
politeness clocks as pages. RFC 9309's status rules: 2xx parse, 4xx allow all, 5xx or a
network error means full disallow for now: the site's jobs wait and the fetch is retried
after RETRY_DELAY (or Retry-After), at most `maxRetries` times per `robotsTtl`; then "complete
disallow" stands for `robotsTtl`: the site's jobs, and URLs found for it later, are counted
as forbiddenRobots at once (the site is DEAD), without a fetch or a wait. At most 500 KiB
is read; redirects are followed by hand up to 5 hops, to other hosts too, each target checked
against the network policy like any fetch (more hops: "unavailable", allow all). Rules are
parsed by Protego for the product token of the configured `UserAgent` ("larbinpy" of
"larbinpy/0.1 (+url)", as Google matches it) and cached for `robotsTtl` seconds. A 429 is
handled like a 5xx (as Google does), and the retry waits for `Retry-After` when the answer
gives one. A certificate that fails verification ends the site at once: its URLs are counted
as tlsError (retrying would not mend the certificate) until the negative-cache time has passed.
A `Crawl-delay` larger than `waitDuration` becomes the site's delay, capped by `maxCrawlDelay`;
with `sitemaps on`, `Sitemap:` lines go to the input stage (`on_sitemaps`).

Every verdict (rules, failures so far, complete disallow) goes to the `VerdictStore` seam
(`frontier/robotsdb.py`; a cluster's is shared through Redis) with its expiry, and a site
whose verdict is known there (after a restart, or handed over from another node) is not
asked again before it expires: `recall` applies it when the site's address is known, and
`fetch` asks the store once more (a round trip in a cluster) before any request.

Before Protego sees the text (`prepare`): a whole or partial UTF-8 BOM is dropped, invalid
UTF-8 becomes U+FFFD, lines are cut at 16,664 characters and user-agent values at their first
space (as Google does), and percent-escapes in the rules are put in the crawler's canonical form
(upper-case hex, unreserved characters decoded), because the URLs they are matched against
are canonical: `Disallow: /%7Euser` must stop `/~user`. tests/test_google_robots.py holds
Google's robotstxt test expectations and the few places larbinpy deliberately differs.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from larbinpy.config import Config
from larbinpy.frontier.robotsdb import Verdict, VerdictStore
from larbinpy.frontier.sites import Sites
from larbinpy.links.sitemaps import MAX_NESTING
from larbinpy.net.backoff import retry_after
from larbinpy.net.body import read_body
from larbinpy.net.docmemory import DocumentMemory, Reservation
from larbinpy.net.fetcher import Fetcher
from larbinpy.net.policy import NetworkPolicy
from larbinpy.outputs import page_from_response
from larbinpy.records import Job, Page, Site
from larbinpy.stages.dns import NEGATIVE_TTL, ip_literal
from larbinpy.stats import Outcome, Stats

if TYPE_CHECKING:
    from protego import Protego

MAX_ROBOTS_BYTES = 500 * 1024
MAX_ROBOTS_REDIRECTS = 5
RETRY_DELAY = 30.0  # seconds before retrying a robots.txt that failed with 5xx or no answer
REDIRECTS = frozenset({301, 302, 303, 307, 308})
TLS_FAILED = -1  # the status `_get` gives when the certificate did not verify
_PRODUCT = re.compile(r"[A-Za-z_-]+")
_PCT = re.compile(r"%[0-9A-Fa-f]{2}")
MAX_LINE = 2083 * 8 - 1  # Google keeps this many characters of a line and ignores the rest
# "User-agent: Foo Bar" is obeyed as "Foo" (Google: the value ends at the first space)
_UA_SPACE = re.compile(
    r"(?im)^([ \t]*user-?agent[ \t]*(?::[ \t]*|[ \t]+)[^\s#]+)[ \t]+[^\r\n#]*"
)
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def product_token(user_agent: str) -> str:
    """The name robots.txt groups are matched against: the UserAgent's leading [A-Za-z_-]."""
    m = _PRODUCT.match(user_agent.strip())
    return m.group() if m else user_agent.strip()


def _canon_escape(m: re.Match[str]) -> str:
    """One %xx in canonical form: decoded if unreserved, else upper-case hex."""
    char = chr(int(m.group()[1:], 16))
    return char if char in _UNRESERVED else m.group().upper()


def prepare(data: bytes) -> str:
    """robots.txt bytes as the text Protego should parse (see the module docstring)."""
    for bom in (b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"):  # Google skips partial BOMs too
        if data.startswith(bom):
            data = data[len(bom) :]
            break
    text = data.decode("utf-8", errors="replace")
    if len(text) > MAX_LINE:
        lines = text.splitlines()
        if max(map(len, lines)) > MAX_LINE:
            text = "\n".join(line[:MAX_LINE] for line in lines)
    text = _UA_SPACE.sub(r"\1", text)
    return _PCT.sub(_canon_escape, text) if "%" in text else text


def parse_rules(data: bytes) -> Protego | None:
    """Parsed rules of a robots.txt body (None: nothing to obey)."""
    text = prepare(data)
    from protego import Protego  # loaded with the first rules, not by a crawl without any

    return Protego.parse(text) if text.strip() else None


class SharedRules:
    """Parsed robots.txt by body, the most recently used: a site keeps its robots.txt as bytes
    and its rules are parsed when a URL of it is checked, once for as long as they stay here.
    A parsed file costs about ten times its bytes (21 kB for 2 kB of rules), so parsers kept
    per site would make a broad crawl's memory that of its sites; sites serving the same file
    (a CMS's default, a hosting company's) share one copy, which depends on nothing but the
    bytes. Bounded by MAX_ENTRIES files and MAX_BYTES of bodies (one larger file alone)."""

    MAX_ENTRIES = 1024
    MAX_BYTES = 1 << 20  # bodies' bytes, about ten times that of parsed rules

    def __init__(self) -> None:
        self.parsed: OrderedDict[bytes, Protego | None] = OrderedDict()
        self.bytes = 0  # of the bodies in `parsed`

    def get(self, data: bytes) -> Protego | None:
        """The parsed rules of `data`, shared when the same bytes were parsed before."""
        if data in self.parsed:  # (a body's hash is computed once, kept by the bytes)
            self.parsed.move_to_end(data)
            return self.parsed[data]
        parsed = parse_rules(data)
        while self.parsed and (len(self.parsed) >= self.MAX_ENTRIES
                               or self.bytes + len(data) > self.MAX_BYTES):
            self.bytes -= len(self.parsed.popitem(last=False)[0])
        self.parsed[data] = parsed
        self.bytes += len(data)
        return parsed


Answer = tuple[int | None, bytes, str | None, float | None]  # `Robots._get_one`'s


class RecentAnswers:
    """The answers of the robots.txt URLs fetched in the last `ttl` seconds, by URL, so two
    sites whose robots.txt chains meet (an apex redirecting to its www.) cost one request for
    the URL they share: a fetch of a URL already on the wire waits for that one. Failures
    (unreachable, 5xx, 429) are not kept: each site retries on its own clock. Bounded in
    entries and in the bytes of the bodies kept (the oldest are forgotten)."""

    MAX_ENTRIES = 4096
    MAX_BYTES = 8 << 20

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.entries: OrderedDict[str, tuple[float, asyncio.Future[Answer]]] = OrderedDict()
        self.nbytes = 0  # body bytes of the answers kept

    async def get(self, url: str, fetch: Callable[[str, Reservation | None],
                                                  Awaitable[Answer]],
                  held: Reservation | None) -> Answer:
        """The answer for `url`: a recent one, the one on the wire, or `fetch`'s."""
        now = time.monotonic()
        entry = self.entries.get(url)
        if entry is not None and (entry[0] > now or not entry[1].done()):
            return await asyncio.shield(entry[1])
        if entry is not None:
            self._forget(url)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.entries[url] = (now + self.ttl, future)
        try:
            answer = await fetch(url, held)
        except BaseException as exc:
            self._forget(url, future)
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved: waiters get it, nobody else must
            raise
        status = answer[0]
        kept = status is not None and status < 500 and status != 429
        if not kept:
            self._forget(url, future)
        future.set_result(answer)
        if kept and url in self.entries:
            self.nbytes += len(answer[1])
            while len(self.entries) > self.MAX_ENTRIES or self.nbytes > self.MAX_BYTES:
                self._forget(next(iter(self.entries)))
        return answer

    def _forget(self, url: str, future: asyncio.Future[Answer] | None = None) -> None:
        """Drop `url`'s entry (only if it is still `future`'s, when given)."""
        entry = self.entries.get(url)
        if entry is None or (future is not None and entry[1] is not future):
            return
        del self.entries[url]
        done = entry[1]
        if done.done() and not done.cancelled() and done.exception() is None:
            self.nbytes -= len(done.result()[1])


class Robots:
    """Fetches, parses and applies robots.txt per site."""

    def __init__(
        self, cfg: Config, stats: Stats, sites: Sites, policy: NetworkPolicy, *,
        fetcher: Fetcher, memory: DocumentMemory,
        record: Callable[[Page], None] | None = None,
        on_sitemaps: Callable[[str, list[str], int], None] | None = None,
        store: VerdictStore | None = None,
    ) -> None:
        self.cfg, self.stats, self.sites = cfg, stats, sites
        # the reader's: a plain http:// robots.txt's keep-alive connection then serves the
        # site's first pages too
        self.fetcher = fetcher
        self.agent = product_token(cfg.user_agent)
        self.shared = SharedRules()
        # host names are checked by the crawl's resolver; IP literals must be checked here
        self.policy = policy
        # given when an archival output (WARC) wants robots.txt exchanges recorded too
        self.record = record
        # with `sitemaps on`: where `Sitemap:` lines go (base URL, sitemap URLs, nesting)
        self.on_sitemaps = on_sitemaps
        # verdicts outliving this process (stateDir, or Redis in a cluster); None: memory only
        self.store = store
        # the process's document memory: a robots.txt body holds its bytes until parsed
        self.memory = memory
        # one request per robots.txt URL: an apex's robots.txt redirecting to its www.'s is
        # the www. site's answer too, for robotsTtl
        self.answers = RecentAnswers(cfg.robots_ttl)

    def needs_fetch(self, site: Site, now: float) -> bool:
        """Must robots.txt be (re)fetched before the next page of this site?"""
        return self.cfg.robots and now >= site.robots_expires

    def allowed(self, site: Site, url: str) -> bool:
        """May this URL be fetched according to the site's robots.txt (its body, parsed or
        found parsed in `shared`)?"""
        if site.robots is None:
            return True
        rules = self.shared.get(site.robots)
        return rules is None or bool(rules.can_fetch(url, self.agent))

    def recall(self, site: Site) -> None:
        """The site's address is known: apply a stored verdict, if any, so its first fetch
        goes straight to its pages (or its URLs are refused at once)."""
        if self.cfg.robots and self.store is not None and site.robots_expires == 0.0:
            verdict = self.store.get(site.key)
            if verdict is not None:
                self._adopt(site, verdict, asyncio.get_running_loop().time())

    def _adopt(self, site: Site, verdict: Verdict, now: float) -> bool:
        """Apply a stored verdict; False when it leaves robots.txt to fetch (failures so far)."""
        expires = now + max(0.0, verdict.expires - time.time())  # wall clock -> loop clock
        if verdict.disallow:
            self._give_up(site, expires, "robots.txt failed earlier (its verdict was kept)")
        elif verdict.failures:
            self.sites.robots_failing(site, verdict.failures)
            return False
        else:
            self._open(site, verdict.body, expires)
        return True

    async def fetch(self, site: Site) -> None:
        """Fetch and parse the site's robots.txt, or plan a retry."""
        if self.store is not None:
            verdict = await self.store.lookup(site.key)
            if verdict is not None and self._adopt(site, verdict,
                                                   asyncio.get_running_loop().time()):
                return
        self.stats.robots_fetches += 1
        held = self.memory.reservation(time.monotonic() + self.cfg.timeout_total)
        try:
            status, data, wait = await self._get(site.key + "/robots.txt", held)
            now = asyncio.get_running_loop().time()
            if status == TLS_FAILED:
                self._bad_certificate(site, now)
            elif status is not None and status < 500 and status != 429:
                self._apply(site, data if 200 <= status < 300 else None, now)
            else:
                self._failed(site, now, wait, status)
        finally:
            held.release()  # parsed (or failed): its memory goes back

    async def _get(self, url: str, held: Reservation | None = None,
                   ) -> tuple[int | None, bytes, float | None]:
        """(status, body, Retry-After seconds) of robots.txt after redirects; status None when
        unreachable, TLS_FAILED when a certificate did not verify. The bodies read take
        their memory from `held`."""
        try:
            for _ in range(MAX_ROBOTS_REDIRECTS + 1):
                status, data, target, wait = await self.answers.get(url, self._get_one, held)
                if target is None:
                    return status, data, wait
                url = target
        except Exception as exc:  # noqa: BLE001 - a failure, unless it is a bug (re-raised)
            failure = self.fetcher.failure(exc)
            if failure is None:
                raise
            if failure.kind is Outcome.tlsError:
                return TLS_FAILED, b"", None
            return None, b"", None
        return 404, b"", None  # RFC 9309: too many redirects means "unavailable": allow all

    async def _get_one(self, url: str, held: Reservation | None = None,
                       ) -> tuple[int | None, bytes, str | None, float | None]:
        """One request: (status, body, redirect target or None, Retry-After seconds or None)."""
        from yarl import URL  # with multidict, ~15 ms to import: not before a site needs it

        target = URL(url)
        literal = ip_literal(target.raw_host or "")
        if literal is not None and not self.policy.allowed(literal):
            return None, b"", None, None  # the network policy refuses it: unreachable
        started = time.monotonic()
        resp = await self.fetcher.get(url)
        try:
            wait = retry_after(resp.headers.get("Retry-After"), self.cfg.max_retry_after)
            body = None
            if self.record is not None:  # archives want every exchange, whatever its status
                body = await read_body(resp, MAX_ROBOTS_BYTES, truncate=True, keep_raw=True,
                                       memory=held)
                self.record(page_from_response(Job(str(target), 0), resp, body, started))
            if resp.status in REDIRECTS:
                location = resp.headers.get("Location", "")
                nxt = target.join(URL(location)) if location else None
                if nxt is None or nxt.scheme not in ("http", "https") or not nxt.raw_host:
                    return 404, b"", None, None  # nowhere to go: unavailable
                return resp.status, b"", str(nxt.with_fragment(None)), None
            if not 200 <= resp.status < 300:
                return resp.status, b"", None, wait
            if body is None:  # RFC 9309: parse at least the first 500 KiB; ignore the rest
                body = await read_body(resp, MAX_ROBOTS_BYTES, truncate=True, memory=held)
            return resp.status, body.data, None, None
        finally:
            resp.release()

    def _apply(self, site: Site, data: bytes | None, now: float) -> None:
        """Rules were fetched: remember them (None = allow all) and open the site."""
        self._put(site, Verdict(time.time() + self.cfg.robots_ttl, data or None))
        self._open(site, data, now + self.cfg.robots_ttl)

    def _put(self, site: Site, verdict: Verdict) -> None:
        """Hand a verdict to the store (when there is one)."""
        if self.store is not None:
            self.store.put(site.key, verdict)

    def _open(self, site: Site, data: bytes | None, expires: float) -> None:
        """Rules are known: the site keeps their bytes (None = allow all), parsed now for its
        Crawl-delay and Sitemap lines, and it opens."""
        rules = self.shared.get(data) if data else None
        delay = self.cfg.wait_duration
        if rules is not None:
            asked = rules.crawl_delay(self.agent)
            if asked:
                delay = max(delay, min(float(asked), self.cfg.max_crawl_delay))
        self.sites.robots_known(site, data or None, expires, delay)
        if rules is not None and self.cfg.sitemaps and self.on_sitemaps is not None:
            listed = list(rules.sitemaps)  # nothing to do for most sites
            if listed:
                self.on_sitemaps(site.key + "/robots.txt", listed, MAX_NESTING)

    def _failed(self, site: Site, now: float, wait: float | None = None,
                status: int | None = None) -> None:
        """5xx, 429 or unreachable (`status` None): full disallow for now; retry later (after
        Retry-After when given), at most `maxRetries` times, then complete disallow stands for
        `robotsTtl`."""
        failures = site.robots_failures + 1
        self.sites.robots_failing(site, failures)
        until = time.time() + self.cfg.robots_ttl
        if failures > self.cfg.max_retries:
            self._put(site, Verdict(until, disallow=True))
            self._give_up(site, now + self.cfg.robots_ttl,
                          f"robots.txt {'unreachable' if status is None else f'answered {status}'}"
                          f" (tries: {failures})")
            return
        self._put(site, Verdict(until, failures=failures))
        self.sites.hold_back(site, now + (RETRY_DELAY if wait is None else wait))

    def _give_up(self, site: Site, until: float, note: str) -> None:
        """Complete disallow until `until` (loop clock): the site's jobs, and URLs found for it
        later, are counted as forbiddenRobots at once (a DEAD site refuses them); `note` says
        why in the crawl log."""
        self.sites.robots_given_up(site, until, note)

    def _bad_certificate(self, site: Site, now: float) -> None:
        """The site's certificate did not verify: its URLs are tlsError for a while."""
        self.sites.kill(site, Outcome.tlsError, now + NEGATIVE_TTL)

