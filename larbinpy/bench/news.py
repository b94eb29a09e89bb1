"""`larbinpy bench --news`: how soon a crawler finds the new pages of a news web, and how fresh
it keeps the rest, beside two reference clients run on the same web at the same politeness.

The news web (`NewsWeb`, served from a child process with its own DNS on loopback): eight sites
`news-0.news.test` ... each publishing articles (`/article/N.html`) as a Poisson process of its
own rate (`RATES`: one every 2 s to one every 64 s; seconds stand in for hours). A site's front
page `/` lists its newest `LISTED` articles and changes with every one; `/archive/1` lists the
next `LISTED`, `/archive/2` the next..., so an article falls off the front page into the
archive. About 100 other pages a site (`/page/K.html`) change at known Poisson rates, and
articles change now and then (`ARTICLE_CHANGE_RATE`). Half the sites (`ANNOUNCE`) list their
newest articles in a sitemap (`/sitemap.xml` with <lastmod>, declared by robots.txt) and/or an
RSS feed (`/feed.xml`, with pubDate, linked from the front page by <link rel="alternate">).
`INITIAL` articles a site exist before the crawl starts, so the first pass has work. Every
validator is honest (ETag and Last-Modified; a 304 only when the copy is current). Everything is
drawn from the seed, as offsets from the server's start: every start of the server with one seed
publishes at the same times after it.

The clients, one after the other, each against a fresh start of the server (same seed), each
for `--seconds`, all with one connection a host and `--wait` between the end of an answer and
the next request to that host:

* `larbinpy`: the daemon (`larbinpy -c conf`, `recrawl on`, seeded with the front pages),
  stopped with SIGTERM, as `--recrawl` runs it (`recrawl.run_daemon`);
* `uniform`: from the front pages, keeps every URL it finds and revisits every known page in
  turn, round-robin a host, a URL never fetched first;
* `poller` (front-page poller): a URL never fetched first, else the front page;
* `once` (for the tests: the measure must be able to fail): every URL once, never a revisit.

The measure comes from the server's log of every answer alone (no client's log is read), over
the steady part of the run (after the first pass: from the first fetch of the last page that
existed at the start that the client ever fetched, to the end; at most half the run is left
out): the share of the articles published in that window the client fetched by the end; the
discovery delay (first fetch minus publication) of those, median and p90, per site too; the
time-averaged freshness (`recrawl.copy_freshness`: a copy is fresh while the version of the
client's last 200 is the page's current one; a page never fetched, a new article not yet found
included, is never fresh) of the articles, of the other pages and of the listings (front,
archive, feed and sitemap pages); and politeness gaps (`recrawl.politeness_gaps`).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import datetime
import hashlib
import json
import math
import random
import re
import sys
import time
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp import web

from larbinpy.bench import recrawl
from larbinpy.bench.changing import (
    ChangingPage,
    draw_rate,
    http_date,
    parse_http_date,
    serve_until_stopped,
)
from larbinpy.bench.harness import ChildServer
from larbinpy.bench.synth import host_ip
from larbinpy.demo.web import LocalWeb, Site, StaticResolver

DOMAIN = "news.test"
IP_BASE = "127.0.6.0"  # one loopback IP a site, apart from the other bench webs' (127.0.2, .4)
# articles a second, a site: 1/2 ... 1/64, with 1/3 and 1/6 in between
RATES = (1 / 2, 1 / 3, 1 / 4, 1 / 6, 1 / 8, 1 / 16, 1 / 32, 1 / 64)
# (sitemap, feed) a site: half of them announce their newest articles, fast and slow ones
ANNOUNCE = ((True, True), (False, False), (True, False), (False, False),
            (False, True), (False, False), (True, True), (False, False))
LISTED = 20  # articles on the front page, on an archive page, in the feed and in the sitemap
INITIAL = 40  # articles a site published before the server started
OTHERS = 100  # other pages a site
ARTICLE_CHANGE_RATE = 1 / 150  # an article is corrected now and then after publication
# the other pages' change rates (share, lowest, highest), log-uniform within a band: some
# static, most changing every few minutes, a few every several seconds
OTHER_RATES: tuple[tuple[float, float, float], ...] = (
    (0.2, 0.0, 0.0), (0.4, 1 / 600, 1 / 60), (0.4, 1 / 60, 1 / 10))
BIRTH = 1000.0  # an other page's version 0 was made this long before the server started
CONTROL = "/.news/"
PAGE_BYTES = 1500
CLIENTS = ("larbinpy", "uniform", "poller", "once")
FIRST_PASS_CAP = 0.5  # the steady part starts at most this share of the run in
# the options of the bench this mode gives other defaults (as `--recrawl` does)
DEFAULTS = {"seconds": 300.0, "per_host": 1, "wait": 0.25, "output": "none", "connections": 64}
REQUEST_TIMEOUT = 10.0  # s a reference client waits for one answer


def host_name(i: int) -> str:
    """Name of news site i."""
    return f"news-{i}.{DOMAIN}"


def article_path(n: int) -> str:
    """Path of a site's article n (1: its oldest)."""
    return f"/article/{n}.html"


def archive_path(k: int) -> str:
    """Path of archive page k (1: the articles just off the front page)."""
    return f"/archive/{k}"


def iso_date(t: float) -> str:
    """A W3C datetime (sitemaps' <lastmod>), to the second, UTC."""
    return datetime.datetime.fromtimestamp(math.floor(t), datetime.UTC).isoformat()


def etag(host: str, path: str, version: int) -> str:
    """The honest ETag of a version of a page."""
    return '"' + hashlib.sha1(f"{host}{path}:{version}".encode()).hexdigest()[:16] + '"'


@dataclass
class NewsSite:
    """One site: its publication times (made lazily as the clock reaches them), its articles'
    and other pages' changes."""

    index: int
    t0: float  # the server's start
    seed: int
    initial: int = INITIAL
    others: int = OTHERS
    pubs: list[float] = field(default_factory=list)  # sorted publication times
    articles: list[ChangingPage] = field(default_factory=list)  # article n is articles[n - 1]
    pages: dict[str, ChangingPage] = field(default_factory=dict)  # the other pages by path
    _rng: random.Random = field(init=False, repr=False)
    _horizon: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"{self.seed}:{self.host}:pubs")
        back = random.Random(f"{self.seed}:{self.host}:initial")
        t, before = self.t0, []
        for _ in range(self.initial):  # the initial archive: a Poisson process back in time
            t -= back.expovariate(self.rate)
            before.append(t)
        for p in reversed(before):
            self._publish(p)
        self._horizon = self.t0
        for k in range(1, self.others + 1):
            key = f"{self.seed}:{self.host}:page{k}"
            path = f"/page/{k}.html"
            self.pages[path] = ChangingPage(self.host, path, "other",
                                            draw_rate(random.Random(key), OTHER_RATES),
                                            self.t0, key)

    @property
    def host(self) -> str:
        """The site's host name."""
        return host_name(self.index)

    @property
    def rate(self) -> float:
        """Articles a second."""
        return RATES[self.index % len(RATES)]

    @property
    def sitemap(self) -> bool:
        """Whether it lists its newest articles in /sitemap.xml."""
        return ANNOUNCE[self.index % len(ANNOUNCE)][0]

    @property
    def feed(self) -> bool:
        """Whether it lists its newest articles in /feed.xml."""
        return ANNOUNCE[self.index % len(ANNOUNCE)][1]

    def _publish(self, t: float) -> None:
        """Article number len(pubs) + 1 comes out at `t`."""
        n = len(self.pubs) + 1
        self.pubs.append(t)
        self.articles.append(ChangingPage(self.host, article_path(n), "article",
                                          ARTICLE_CHANGE_RATE, t,
                                          f"{self.seed}:{self.host}:article{n}"))

    def count(self, t: float) -> int:
        """Articles published up to `t`."""
        while self._horizon < t:
            self._horizon += self._rng.expovariate(self.rate)
            self._publish(self._horizon)  # perhaps beyond `t`: counted when the clock gets there
        return bisect.bisect_right(self.pubs, t)

    def listing_version(self, t: float) -> int:
        """Version of the front page, archive pages and feed: articles published since t0."""
        return self.count(t) - self.initial

    def listing_changes(self, until: float) -> list[float]:
        """When the listings changed (publications after t0), up to `until`."""
        return self.pubs[self.initial:self.count(until)]

    def newest(self, t: float, skip: int = 0, n: int = LISTED) -> list[int]:
        """Numbers of the newest articles at `t`, newest first, after the `skip` newest."""
        top = self.count(t) - skip
        return list(range(top, max(0, top - n), -1))

    def archive_born(self, k: int) -> float | None:
        """When archive page k came to exist (its first article fell off the pages before it),
        or None if not yet."""
        need = LISTED * k + 1  # the article that makes it
        return self.pubs[need - 1] if len(self.pubs) >= need else None

    def sitemap_changes(self, until: float) -> list[float]:
        """When the sitemap changed up to `until`: a publication after t0, or a change of an
        article while it is listed (its <lastmod> moves)."""
        count = self.count(until)
        events = list(self.pubs[self.initial:count])
        for n in range(max(1, self.initial - LISTED + 1), count + 1):
            off = self.pubs[n - 1 + LISTED] if n - 1 + LISTED < len(self.pubs) else math.inf
            lo, hi = max(self.pubs[n - 1], self.t0), min(off, until)
            events += [c for c in self.articles[n - 1].changes_until(hi) if lo < c <= hi]
        return sorted(events)

    def article_lastmod(self, n: int, t: float) -> float:
        """When article n was last changed at `t` (its publication if never)."""
        page = self.articles[n - 1]
        v = page.version(t)
        return page.changes[v - 1] if v > 0 else self.pubs[n - 1]


@dataclass(slots=True)
class Served:
    """What the server answers for a page at a time: body, content type, version, the version's
    birth (for Last-Modified) and whether the version before it was born in the same second
    (Last-Modified cannot tell them apart, so no 304 on it)."""

    body: bytes
    content_type: str
    version: int
    modified: float
    same_second: bool


class NewsWeb(LocalWeb):
    """LocalWeb serving the news sites, recording every answer as `changing.Answer` does."""

    def __init__(self, sites: int = len(RATES), seed: int = 1, initial: int = INITIAL,
                 others: int = OTHERS, page_bytes: int = PAGE_BYTES,
                 t0: float | None = None) -> None:
        names = [host_name(i) for i in range(sites)]
        super().__init__([Site(h, host_ip(i, IP_BASE)) for i, h in enumerate(names)],
                         record=False)
        self.t0 = time.time() if t0 is None else t0
        self.seed, self.page_bytes = seed, page_bytes
        self.news = {h: NewsSite(i, self.t0, seed, initial, others) for i, h in enumerate(names)}
        self.answers: list[list[Any]] = []  # changing.Answer.as_list's form

    # --- what a page is at a time ---------------------------------------------------------

    def serve_page(self, host: str, path: str, t: float) -> Served | None:
        """The page `path` of `host` at `t`, or None if there is none (a 404)."""
        site = self.news.get(host)
        if site is None:
            return None
        if path == "/":
            return self._listing(site, t, 0, front=True)
        if path.startswith("/archive/") and path[9:].isdigit():
            k = int(path[9:])
            born = site.archive_born(k)
            if k < 1 or born is None or born > t:
                return None
            return self._listing(site, t, k, front=False)
        if path.startswith("/article/") and path.endswith(".html") and path[9:-5].isdigit():
            n = int(path[9:-5])
            if not 1 <= n <= site.count(t):
                return None
            return self._article(site, n, t)
        if (page := site.pages.get(path)) is not None:
            v = page.version(t)
            return Served(self._html(site, f"{path} version {v}", f"{page.seed}:{v}", ""),
                          "text/html", v, page.changed_at(v), page.same_second(v) > 1)
        if path == "/feed.xml" and site.feed:
            return self._feed(site, t)
        if path == "/sitemap.xml" and site.sitemap:
            return self._sitemap(site, t)
        return None

    def _listing_modified(self, site: NewsSite, v: int) -> tuple[float, bool]:
        """Last-Modified of listing version v (the server's start for version 0), and whether
        version v-1 was born in its second."""
        def born(version: int) -> float:
            return site.pubs[site.initial + version - 1] if version > 0 else self.t0

        return born(v), v > 0 and math.floor(born(v - 1)) == math.floor(born(v))

    def _listing(self, site: NewsSite, t: float, k: int, front: bool) -> Served:
        """The front page (k = 0) or archive page k: LISTED articles, newest first."""
        v = site.listing_version(t)
        numbers = site.newest(t, LISTED * k)
        links = "".join(f'<li><a href="{article_path(n)}">article {n}</a></li>\n'
                        for n in numbers)
        more = site.count(t) > LISTED * (k + 1)
        links += f'<a href="{archive_path(k + 1)}">older</a>\n' if more else ""
        head = ""
        if front:
            if site.feed:
                head = '<link rel="alternate" type="application/rss+xml" href="/feed.xml">\n'
            links += "".join(f'<a href="{p}">{p}</a>\n' for p in site.pages)
        title = "front page" if front else f"archive {k}"
        modified, same = self._listing_modified(site, v)
        return Served(self._html(site, f"{title} version {v}", f"{site.seed}:{k}:{v}",
                                 f"<ul>\n{links}</ul>\n", head), "text/html", v, modified, same)

    def _article(self, site: NewsSite, n: int, t: float) -> Served:
        """Article n at `t`."""
        page = site.articles[n - 1]
        v = page.version(t)
        modified = site.article_lastmod(n, t)
        same = v > 0 and math.floor(page.changes[v - 2] if v > 1 else site.pubs[n - 1]) == \
            math.floor(modified)
        return Served(self._html(site, f"article {n} version {v}", f"{page.seed}:{v}",
                                 '<a href="/">front page</a>\n'), "text/html", v, modified,
                      same)

    def _feed(self, site: NewsSite, t: float) -> Served:
        """RSS 2.0: the newest LISTED articles with their publication dates."""
        v = site.listing_version(t)
        base = self.url(site.host, "/")
        items = "".join(
            f"<item><title>article {n}</title><link>{self.url(site.host, article_path(n))}"
            f"</link><guid>{self.url(site.host, article_path(n))}</guid><pubDate>"
            f"{http_date(site.pubs[n - 1])}</pubDate></item>\n" for n in site.newest(t))
        body = (f'<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>\n'
                f"<title>{site.host}</title><link>{base}</link>\n"
                f"<description>version {v}</description>\n{items}</channel></rss>\n")
        modified, same = self._listing_modified(site, v)
        return Served(body.encode(), "application/rss+xml", v, modified, same)

    def _sitemap(self, site: NewsSite, t: float) -> Served:
        """The newest LISTED articles with their last change as <lastmod>."""
        events = site.sitemap_changes(t)
        v = len(events)
        urls = "".join(f"<url><loc>{self.url(site.host, article_path(n))}</loc><lastmod>"
                       f"{iso_date(site.article_lastmod(n, t))}</lastmod></url>\n"
                       for n in site.newest(t))
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                f'<!-- version {v} -->\n'
                '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
                f"{urls}</urlset>\n")
        modified = events[-1] if events else self.t0
        before = events[-2] if v > 1 else self.t0
        return Served(body.encode(), "application/xml", v, modified,
                      v > 0 and math.floor(before) == math.floor(modified))

    def _html(self, site: NewsSite, title: str, seed: str, links: str, head: str = "") -> bytes:
        """An HTML page of about page_bytes: its title (which names its version), links, filler
        text drawn from `seed` (every version a different payload)."""
        rng = random.Random(seed)
        words, size = [], 0
        while size < self.page_bytes:
            words.append(rng.choice(("news", "story", "report", "update", "today", "city",
                                     "market", "vote", "match", "weather", "science")))
            size += len(words[-1]) + 1
        full = f"{site.host} {title}"
        return (f"<!DOCTYPE html>\n<html><head><title>{full}</title>\n{head}</head><body>\n"
                f"<h1>{full}</h1>\n{links}<p>{' '.join(words)}</p>\n</body></html>\n").encode()

    def robots(self, site: NewsSite) -> str:
        """robots.txt: the control path kept out; the sitemap declared where there is one."""
        text = f"User-agent: *\nDisallow: {CONTROL}\n"
        if site.sitemap:
            text += f"Sitemap: {self.url(site.host, '/sitemap.xml')}\n"
        return text

    # --- the truth ------------------------------------------------------------------------

    def log(self, until: float | None = None) -> dict[str, Any]:
        """Every page that existed up to `until`: its kind, when it came to exist (`born`; None
        before the start), its change times (version k is current from changes[k-1] on); the
        sites' rates; every answer."""
        until = time.time() if until is None else until
        pages: list[dict[str, Any]] = []
        sites: list[dict[str, Any]] = []
        for host, site in self.news.items():
            count = site.count(until)
            sites.append({"host": host, "rate": site.rate, "sitemap": site.sitemap,
                          "feed": site.feed, "published": site.pubs[:count]})
            listing = site.listing_changes(until)

            def add(path: str, kind: str, born: float | None, changes: list[float],
                    host: str = host) -> None:
                pages.append({"url": self.url(host, path), "host": host, "path": path,
                              "kind": kind, "born": born, "changes": changes})

            add("/", "front", None, listing)
            k = 1
            while (born := site.archive_born(k)) is not None and born <= until:
                add(archive_path(k), "archive", born if born > self.t0 else None, listing)
                k += 1
            if site.feed:
                add("/feed.xml", "feed", None, listing)
            if site.sitemap:
                add("/sitemap.xml", "sitemap", None, site.sitemap_changes(until))
            for path, page in site.pages.items():
                add(path, "other", None, page.changes_until(until))
            for n in range(1, count + 1):
                pub = site.pubs[n - 1]
                add(article_path(n), "article", pub if pub > self.t0 else None,
                    site.articles[n - 1].changes_until(until))
                pages[-1]["published"] = pub
        return {"t0": self.t0, "until": until, "port": self.port, "seed": self.seed,
                "sites": sites, "pages": pages, "answers": self.answers}

    # --- serving --------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Serve a page (200 or 304), robots.txt, a 404, or `GET /.news/log`."""
        start = time.time()
        host = request.host.rsplit(":", 1)[0].lower().rstrip(".")
        path = request.raw_path
        if path == CONTROL + "log":
            return web.json_response(self.log())
        inm = request.headers.get("If-None-Match")
        ims = request.headers.get("If-Modified-Since")
        site = self.news.get(host)
        version = -1
        if path == "/robots.txt" and site is not None:
            resp = web.Response(text=self.robots(site), content_type="text/plain")
        elif (page := self.serve_page(host, path, start)) is not None:
            version = page.version
            headers = {"ETag": etag(host, path, page.version),
                       "Last-Modified": http_date(page.modified)}
            if self._not_modified(page, headers["ETag"], inm, ims):
                resp = web.Response(status=304, headers=headers)
            else:
                resp = web.Response(body=page.body, headers=headers,
                                    content_type=page.content_type)
        else:
            resp = web.Response(status=404, text="not found")
        await resp.prepare(request)
        await resp.write_eof()
        self.answers.append([round(start, 6), round(time.time(), 6), host, path, resp.status,
                             version, int(inm is not None), int(ims is not None)])
        return resp

    @staticmethod
    def _not_modified(page: Served, tag: str, inm: str | None, ims: str | None) -> bool:
        """304 when the request's ETag is the current one (If-None-Match first, RFC 9110), or
        its date is the current version's second and no other version was born in it."""
        if inm is not None:
            tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
            return tag in tags or "*" in tags
        since = parse_http_date(ims)
        return since is not None and since == math.floor(page.modified) and not page.same_second


class NewsServer(ChildServer):
    """`python -m larbinpy.bench.news serve` in a child process; `truth()` once stopped."""

    def __init__(self, workdir: Path, *, sites: int = len(RATES), seed: int = 1,
                 initial: int = INITIAL, others: int = OTHERS, lifetime: float = 3600.0) -> None:
        self.log_file = workdir / "news-web.json"
        super().__init__("larbinpy.bench.news",
                         ["--sites", str(sites), "--seed", str(seed), "--initial", str(initial),
                          "--others", str(others), "--lifetime", str(lifetime),
                          "--log", str(self.log_file)], workdir, "news web")
        self.sites = sites

    def hosts(self) -> list[str]:
        """Every site's host name, in the order of their IPs."""
        return [host_name(i) for i in range(self.sites)]

    def url(self, host: str, path: str = "/") -> str:
        """Absolute URL on this server."""
        return f"http://{host}:{self.http_port}{path}"

    def records(self) -> dict[str, list[str]]:
        """host -> [its loopback IP]."""
        return {h: [host_ip(i, IP_BASE)] for i, h in enumerate(self.hosts())}

    def truth(self) -> dict[str, Any]:
        """The server's log written when it stopped (stops it first)."""
        self.stop()
        return dict(json.loads(self.log_file.read_text()))


# --- the reference clients ----------------------------------------------------------------

LINK = re.compile(r'href="([^"]+)"|<loc>([^<]+)</loc>|<link>([^<]+)</link>')


@dataclass
class HostCrawl:
    """A reference client's state for one host: the URLs it knows, in the order found."""

    host: str
    known: list[str] = field(default_factory=list)  # paths, in the order found
    seen: set[str] = field(default_factory=set)
    fresh: deque[str] = field(default_factory=deque)  # found, never fetched
    tags: dict[str, str] = field(default_factory=dict)  # path -> ETag of the copy
    disallowed: list[str] = field(default_factory=list)
    turn: int = 0  # uniform's round-robin place in `known`

    def add(self, path: str) -> None:
        """A URL found: known, and waiting for its first fetch."""
        if path in self.seen or any(path.startswith(d) for d in self.disallowed):
            return
        self.seen.add(path)
        self.known.append(path)
        self.fresh.append(path)

    def next(self, policy: str) -> str | None:
        """The path to fetch next under `policy`, or None: nothing to do."""
        if self.fresh:
            return self.fresh.popleft()
        if policy == "poller":
            return "/"
        if policy == "uniform" and self.known:
            path = self.known[self.turn % len(self.known)]
            self.turn += 1
            return path
        return None  # once: nothing is revisited


def links_of(base: str, host: str, body: str) -> Iterable[str]:
    """Paths on `host` that `body` links to (href=, a sitemap's <loc>, a feed's <link>)."""
    for m in LINK.finditer(body):
        url = urljoin(base, next(g for g in m.groups() if g is not None).strip())
        parts = urlsplit(url)
        if parts.hostname == host and parts.scheme == "http":
            yield parts.path + (f"?{parts.query}" if parts.query else "")


async def reference_client(policy: str, server: NewsServer, seconds: float, wait: float) -> float:
    """Crawl the news web from its front pages under `policy` for `seconds`, one connection a
    host and `wait` s between an answer and the host's next request; the end time."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=1,
                                     resolver=StaticResolver(server.records()))
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    end = time.time() + seconds
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers={"User-Agent": f"news-bench-{policy}"}) as session:
        await asyncio.gather(*(_crawl_host(policy, session, server, h, end, wait)
                               for h in server.hosts()))
    return end


async def _crawl_host(policy: str, session: aiohttp.ClientSession, server: NewsServer,
                      host: str, end: float, wait: float) -> None:
    """One host's loop: robots.txt, then the policy's next path until `end`."""
    state = HostCrawl(host)
    body = await _get(session, server.url(host, "/robots.txt"), {}, end)
    if body is not None:
        state.disallowed = [line.split(":", 1)[1].strip() for line in body[1].splitlines()
                            if line.lower().startswith("disallow:") and line.split(":", 1)[1]
                            .strip()]
    state.add("/")
    while time.time() < end:
        # politeness: the next request starts `wait` after the end of the last answer
        await asyncio.sleep(max(0.0, min(wait, end - time.time())))
        path = state.next(policy)
        if path is None:
            await asyncio.sleep(max(0.0, end - time.time()))
            return
        if time.time() >= end:
            return
        url = server.url(host, path)
        headers = {"If-None-Match": state.tags[path]} if path in state.tags else {}
        got = await _get(session, url, headers, end)
        if got is None:
            continue
        status, text, tag = got
        if status == 200:
            if tag:
                state.tags[path] = tag
            for found in links_of(url, host, text):
                state.add(found)


async def _get(session: aiohttp.ClientSession, url: str, headers: dict[str, str], end: float
               ) -> tuple[int, str, str | None] | None:
    """GET: (status, body, ETag), or None if it failed or the run ended first."""
    try:
        async with asyncio.timeout(max(0.1, end - time.time())):
            async with session.get(url, headers=headers, allow_redirects=False) as resp:
                text = await resp.text(errors="replace")
                return resp.status, text, resp.headers.get("ETag")
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


# --- the larbinpy client ------------------------------------------------------------------


def daemon_config(args: argparse.Namespace, server: NewsServer, workdir: Path,
                  http_port: int) -> str:
    """larbin.conf for the daemon: the front pages its seeds, recrawl on, the bench's politeness;
    depthInSite high enough for the archive's chain of pages."""
    seeds = workdir / "seeds.txt"
    seeds.write_text("".join(server.url(h) + "\n" for h in server.hosts()))
    text = (f"UserAgent larbinpy-bench\ndnsServers 127.0.0.1:{server.dns_port}\n"
            f"allowNetworks 127.0.0.0/8 end\npagesConnexions {args.connections}\n"
            f"connectionsPerHost {args.per_host}\nwaitDuration {args.wait}\n"
            f"depthInSite 100\nseedFile {seeds}\nhttpPort {http_port}\ninputPort 0\n"
            f"output {args.output}\nsaveDir {workdir / 'save'}\n"
            f"stateDir {workdir / 'state'}\ncrawlLog {workdir / 'crawl.jsonl'}\n")
    if recrawl.recrawl_keys():
        text += (f"recrawl on\nrecrawlMin {args.recrawl_min}\n"
                 f"recrawlMax {args.recrawl_max}\n")
    return text


def run_client(args: argparse.Namespace, name: str, workdir: Path) -> dict[str, Any]:
    """A fresh start of the news web, `name` crawling it for --seconds, the measure."""
    workdir.mkdir(parents=True, exist_ok=True)
    lifetime = args.seconds + 2 * recrawl.STOP_TIMEOUT + 60
    extra: dict[str, Any] = {}
    with NewsServer(workdir, sites=args.news_sites, seed=args.seed, initial=args.news_initial,
                    others=args.news_others, lifetime=lifetime) as server:
        if name == "larbinpy":
            port = recrawl.free_port()
            conf = workdir / "larbin.conf"
            conf.write_text(daemon_config(args, server, workdir, port))
            code, end, _ = recrawl.run_daemon(conf, args.seconds, workdir, port)
            extra = {"exit_code": code, "recrawl": recrawl.recrawl_keys()}
        elif name in CLIENTS:
            end = asyncio.run(reference_client(name, server, args.seconds, args.wait))
        else:
            raise ValueError(f"unknown client {name!r}; clients: {', '.join(CLIENTS)}")
        truth = server.truth()
    (workdir / "news-web.json").unlink(missing_ok=True)  # large; measured already below
    result = analyse(truth, end, args.wait)
    result.update(extra)
    if extra.get("exit_code"):
        result["warnings"].append(f"the daemon exited with code {extra['exit_code']} after "
                                  "SIGTERM")
    return result


# --- the measure --------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile by nearest rank (None for nothing), rounded."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


def analyse(truth: dict[str, Any], end: float, wait: float) -> dict[str, Any]:
    """Every figure of a client's run from the server's log alone, up to `end` (the client
    stopped then)."""
    t0 = truth["t0"]
    answers = [a for a in recrawl.answers_of(truth) if a.start <= end]
    by_page: dict[tuple[str, str], list[recrawl.Answer]] = defaultdict(list)
    for a in answers:
        by_page[(a.host, a.path)].append(a)
    first: dict[tuple[str, str], float] = {}
    for key, got in by_page.items():
        oks = [a.start for a in got if a.status == 200]
        if oks:
            first[key] = oks[0]
    pages = [p for p in truth["pages"] if p["born"] is None or p["born"] <= end]
    # the first pass: until the first fetch of the last page that existed at the start and
    # that the client ever fetched (one it never fetches would hold the window shut)
    firsts = [first[(p["host"], p["path"])] for p in pages
              if p["born"] is None and (p["host"], p["path"]) in first]
    start = max(firsts) if firsts else end
    warnings: list[str] = []
    cap = t0 + FIRST_PASS_CAP * (end - t0)
    if start > cap:
        warnings.append(f"the first pass took {start - t0:.1f} s, more than "
                        f"{FIRST_PASS_CAP:.0%} of the run: the steady part starts at "
                        f"{cap - t0:.1f} s")
        start = cap
    new = [p for p in pages if p["kind"] == "article" and p["born"] is not None
           and start <= p["born"] <= end]
    delays: dict[str, list[float]] = defaultdict(list)
    for p in new:
        if (fetched := first.get((p["host"], p["path"]))) is not None:
            delays[p["host"]].append(fetched - p["born"])
    found = [d for ds in delays.values() for d in ds]
    fresh: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # group -> [fresh, span]
    for p in pages:
        lo = max(start, p["born"] or start)
        if lo >= end:
            continue
        copies = [(a.end, a.version) for a in by_page.get((p["host"], p["path"]), [])
                  if a.status == 200]
        share = recrawl.copy_freshness(p["changes"], copies, lo, end)
        group = {"article": "articles", "other": "others"}.get(p["kind"], "listings")
        fresh[group][0] += share * (end - lo)
        fresh[group][1] += end - lo
    window = end - start
    steady = [a for a in answers if a.start >= start]
    sites = {}
    for s in truth["sites"]:
        mine = [p for p in new if p["host"] == s["host"]]
        ds = delays.get(s["host"], [])
        sites[s["host"]] = {"rate": s["rate"], "sitemap": s["sitemap"], "feed": s["feed"],
                            "new": len(mine), "found": len(ds),
                            "found_share": round(len(ds) / len(mine), 4) if mine else None,
                            "delay_median_s": quantile(ds, 0.5),
                            "delay_p90_s": quantile(ds, 0.9),
                            "fetches_per_s": round(sum(a.host == s["host"] for a in steady)
                                                   / window, 3) if window > 0 else 0.0}
    return {"first_pass_s": round(start - t0, 2), "steady_s": round(window, 2),
            "run_s": round(end - t0, 2), "new_articles": len(new), "found": len(found),
            "found_share": round(len(found) / len(new), 4) if new else None,
            "delay_median_s": quantile(found, 0.5), "delay_p90_s": quantile(found, 0.9),
            "fresh_articles": _share(fresh["articles"]), "fresh_others": _share(fresh["others"]),
            "fresh_listings": _share(fresh["listings"]),
            "requests": len(answers), "requests_per_s": round(len(steady) / window, 3)
            if window > 0 else 0.0,
            "politeness": recrawl.politeness_gaps(answers, wait), "sites": sites,
            "warnings": warnings}


def _share(pair: list[float]) -> float | None:
    """fresh time / time, rounded; None for no time."""
    return round(pair[0] / pair[1], 4) if pair[1] > 0 else None


def news_bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every client of --news-clients on its own fresh start of the news web, one after the
    other; their figures side by side."""
    names = [n for n in args.news_clients.split(",") if n]
    for name in names:
        if name not in CLIENTS:
            raise ValueError(f"unknown client {name!r}; clients: {', '.join(CLIENTS)}")
    clients = {name: run_client(args, name, workdir / name) for name in names}
    return {"seconds": args.seconds, "wait": args.wait, "seed": args.seed,
            "sites": args.news_sites, "initial": args.news_initial, "others": args.news_others,
            "recrawl_min": args.recrawl_min, "recrawl_max": args.recrawl_max,
            "rates": list(RATES[:args.news_sites]), "clients": clients}


def report_text(r: dict[str, Any]) -> str:
    """The human-readable report: a row a client, then found share and median delay a site."""
    lines = [f"larbinpy bench --news: {r['sites']} news sites (articles every "
             f"{', '.join(f'{1 / x:g}' for x in r['rates'])} s; {r['initial']} articles each "
             f"at the start, {r['others']} other pages), {r['seconds']:g} s a client, "
             f"waitDuration {r['wait']:g}, one connection a host, seed {r['seed']}",
             f"  {'client':9} {'found':>7} {'new':>5} {'median':>7} {'p90':>7} "
             f"{'art.fr':>6} {'oth.fr':>6} {'lst.fr':>6} {'req/s':>6} {'gaps':>4} "
             f"{'1st pass':>8}"]
    for name, c in r["clients"].items():
        lines.append(f"  {name:9} {_pct(c['found_share'])} {c['new_articles']:5} "
                     f"{_sec(c['delay_median_s'])} {_sec(c['delay_p90_s'])} "
                     f"{_num(c['fresh_articles'])} {_num(c['fresh_others'])} "
                     f"{_num(c['fresh_listings'])} {c['requests_per_s']:6.2f} "
                     f"{c['politeness']['short_gaps']:4} {c['first_pass_s']:7.1f}s")
    lines.append("  a site (articles every N s, s: sitemap, f: feed): found share / median delay")
    names = list(r["clients"])
    lines.append(f"  {'site':22} " + " ".join(f"{n:>16}" for n in names))
    for host in next(iter(r["clients"].values()))["sites"] if names else []:
        first = r["clients"][names[0]]["sites"][host]
        tag = ("s" if first["sitemap"] else "") + ("f" if first["feed"] else "")
        label = f"{host.split('.')[0]} 1/{1 / first['rate']:g} {tag}"
        cells = []
        for n in names:
            s = r["clients"][n]["sites"][host]
            cells.append(f"{_pct(s['found_share'])} {_sec(s['delay_median_s'])}".rjust(16))
        lines.append(f"  {label:22} " + " ".join(cells))
    for name, c in r["clients"].items():
        lines += [f"WARNING: {name}: {w}" for w in c["warnings"]]
    return "\n".join(lines)


def _pct(share: float | None) -> str:
    """A share as a 7-wide percentage."""
    return "    n/a" if share is None else f"{share:7.1%}"


def _sec(s: float | None) -> str:
    """Seconds, 7 wide."""
    return "    n/a" if s is None else f"{s:6.1f}s"


def _num(x: float | None) -> str:
    """A share, 6 wide."""
    return "   n/a" if x is None else f"{x:6.3f}"


def add_options(p: argparse.ArgumentParser) -> None:
    """The options of `--news` on the bench's parser (it shares --recrawl's --seconds, --seed,
    --recrawl-min and --recrawl-max)."""
    g = p.add_argument_group("--news")
    g.add_argument("--news", action="store_true",
                   help="instead: a news web publishing articles; how many new ones the "
                        "daemon finds, how soon, and how fresh it keeps the rest, beside a "
                        "uniform and a front-page-polling client (larbinpy/bench/news.py); "
                        "--seconds a client (default 300 there), --wait 0.25, --per-host 1")
    g.add_argument("--news-clients", default="larbinpy,uniform,poller",
                   help=f"the clients, one after the other ({', '.join(CLIENTS)}) "
                        "[larbinpy,uniform,poller]")
    g.add_argument("--news-sites", type=int, default=len(RATES),
                   help=f"news sites (at most {len(RATES)} rates, then again) [{len(RATES)}]")
    g.add_argument("--news-initial", type=int, default=INITIAL,
                   help=f"articles a site at the start [{INITIAL}]")
    g.add_argument("--news-others", type=int, default=OTHERS,
                   help=f"other pages a site [{OTHERS}]")


# --- the child process --------------------------------------------------------------------


async def serve(args: argparse.Namespace) -> None:
    """Serve until SIGTERM/SIGINT or the end of the lifetime; write the log on the way out."""
    web_ = NewsWeb(args.sites, args.seed, args.initial, args.others)
    await web_.start()
    await serve_until_stopped(web_, args)


def parser() -> argparse.ArgumentParser:
    """Command line of `python -m larbinpy.bench.news`."""
    p = argparse.ArgumentParser(prog="python -m larbinpy.bench.news", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve the news web (DNS + HTTP)")
    s.add_argument("--sites", type=int, default=len(RATES))
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--initial", type=int, default=INITIAL)
    s.add_argument("--others", type=int, default=OTHERS)
    s.add_argument("--lifetime", type=float, default=3600.0,
                   help="stop by itself after this many seconds [3600]")
    s.add_argument("--ready-file", default=None)
    s.add_argument("--log", default=None, help="write the truth (JSON) here when stopping")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parser().parse_args(argv)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
