"""Sitemaps end to end: robots.txt `Sitemap:` lines, sitemap indexes, gzip-compressed sitemaps,
the 50,000-URL / 50 MB limits; their URLs go through input like links (scope, de-dup)."""

from __future__ import annotations

import gzip
from collections import Counter

import hostile as h
from conftest import html

from larbinpy.config import parse_config
from larbinpy.demo import Page, Site
from larbinpy.links.sitemaps import MAX_URLS, parse
from larbinpy.links.urls import Normalizer
from larbinpy.records import Job, JobKind
from larbinpy.stages.input import Input, LocalAdmission
from larbinpy.stats import Stats


def urlset(*urls: str) -> str:
    """A sitemap listing `urls`."""
    items = "".join(f"<url><loc>{u}</loc><lastmod>2024-01-01</lastmod></url>\n" for u in urls)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{items}</urlset>\n')


def index(*urls: str) -> str:
    """A sitemap index listing `urls`."""
    items = "".join(f"<sitemap><loc>{u}</loc></sitemap>\n" for u in urls)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n{items}'
            "</sitemapindex>\n")


XML = "application/xml"


async def sitemap_web(make_web):
    """sm.test: robots.txt names an index of a plain and a gzip sitemap; / links nowhere."""
    tw = await make_web([Site("sm.test", "127.0.0.2", {"/": html()})])
    u = lambda path: tw.url("sm.test", path)  # noqa: E731
    tw.web.sites["sm.test"].pages.update({
        "/robots.txt": Page(f"User-agent: *\nDisallow: /secret.html\nSitemap: {u('/index.xml')}\n",
                            content_type="text/plain"),
        "/index.xml": Page(index(u("/sm1.xml"), u("/sm2.xml.gz"), u("/sm1.xml")),
                           content_type=XML),
        "/sm1.xml": Page(urlset(u("/u1.html"), u("/u2.html?a=1&amp;b=2"), u("/"),
                                u("/skip/x.html"), u("/secret.html")), content_type=XML),
        "/sm2.xml.gz": Page(gzip.compress(urlset(u("/u3.html"), u("/u1.html")).encode()),
                            content_type="application/x-gzip"),
        "/u1.html": html(), "/u2.html?a=1&b=2": html(), "/u3.html": html(),
        "/skip/x.html": html(), "/secret.html": html(),
    })
    return tw


async def test_sitemaps_from_robots_txt_feed_input_like_links(make_web):
    tw = await sitemap_web(make_web)
    crawler = await tw.crawl(f"startUrl {tw.url('sm.test')}\nexcludePatterns /skip/ end")
    paths = Counter(h.path for h in tw.web.hits)
    assert set(paths) == {"/robots.txt", "/", "/index.xml", "/sm1.xml", "/sm2.xml.gz",
                          "/u1.html", "/u2.html?a=1&b=2", "/u3.html"}
    assert all(n == 1 for n in paths.values()), paths  # de-duplicated like links
    out = crawler.stats.outcomes
    assert out["success"] == 4 + 3  # four pages, three sitemap files
    assert out["forbiddenRobots"] == 1  # /secret.html: listed, but robots.txt says no
    assert out["outOfScope"] == 1  # /skip/x.html


async def test_sitemaps_off_fetches_no_sitemap(make_web):
    tw = await sitemap_web(make_web)
    await tw.crawl(f"startUrl {tw.url('sm.test')}\nsitemaps off")
    assert {h.path for h in tw.web.hits} == {"/robots.txt", "/"}


async def test_a_site_without_sitemap_lines_costs_nothing(make_web):
    tw = await make_web([Site("plain.test", "127.0.0.2", {"/": html("/a.html"),
                                                          "/a.html": html()})])
    await tw.crawl(f"startUrl {tw.url('plain.test')}")
    assert [h.path for h in tw.web.hits] == ["/robots.txt", "/", "/a.html"]  # no probing


async def test_a_sitemap_over_50000_urls_is_cut_at_the_limit(make_web):
    tw = await make_web([Site("big.test", "127.0.0.2", {"/": html()})])
    u = lambda path: tw.url("big.test", path)  # noqa: E731
    tw.web.sites["big.test"].pages.update({
        "/robots.txt": Page(f"Sitemap: {u('/big.xml.gz')}\n", content_type="text/plain"),
        "/big.xml.gz": Page(gzip.compress(urlset(*[u(f"/x/{i}") for i in range(MAX_URLS + 5)])
                                          .encode()), content_type="application/gzip"),
    })
    crawler = await tw.crawl(f"startUrl {tw.url('big.test')}\nexcludePatterns /x/ end")
    # every listed URL went through input's scope rules: 50,000 taken, the 5 beyond counted
    assert crawler.stats.outcomes["outOfScope"] == MAX_URLS + 5
    assert {h.path for h in tw.web.hits} == {"/robots.txt", "/", "/big.xml.gz"}


def test_parse_limits_and_forms():
    body = urlset("http://a/1", "http://a/2", "http://a/3").encode()
    assert parse(body).urls == ["http://a/1", "http://a/2", "http://a/3"]
    assert parse(body, limit_urls=2).dropped == 1
    cut = parse(gzip.compress(body), limit_bytes=len(body) // 2)  # the 50 MB rule, scaled down
    assert cut.dropped >= 1 and len(cut.urls) < 3
    assert parse(index("http://a/s.xml").encode()).is_index
    cdata = b"<urlset><url><loc><![CDATA[http://a/x?y=1&z=2]]></loc></url></urlset>"
    assert parse(cdata).urls == ["http://a/x?y=1&z=2"]
    image = b"<urlset><url><loc>http://a/p</loc><image:loc>http://a/i.png</image:loc></url>"
    assert parse(image + b"</urlset>").urls == ["http://a/p"]


class _Frontier:
    """Collects what input queues."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    def push(self, jobs: list[Job]) -> None:
        self.jobs += jobs

    def flush(self) -> None:
        """Nothing buffered."""


class _Seen:
    """A seen-set in a Python set."""

    def __init__(self) -> None:
        self.urls: set[str] = set()

    def missing(self, urls: list[str]) -> list[str]:
        return [u for u in urls if u not in self.urls]

    def add(self, urls) -> None:
        self.urls.update(urls)


def test_sitemap_urls_get_sitemap_priority_and_full_depth():
    cfg = parse_config("sitemapPriority 7\ndepthInSite 3\n")
    frontier, seen, stats = _Frontier(), _Seen(), Stats()
    admission = LocalAdmission(frontier, seen, stats, lambda: None)  # type: ignore[arg-type]
    inp = Input(cfg, Normalizer(), seen, frontier, stats, admission,  # type: ignore[arg-type]
                lambda: None)
    inp.add_sitemaps("http://a.test/robots.txt", ["/s.xml"], 2)
    inp.add_sitemap_urls("http://a.test/s.xml", ["http://a.test/p", "/q", "http://a.test/p"])
    inp.add_sitemaps("http://a.test/s.xml", ["/deeper.xml"], -1)
    assert [(j.url, j.priority, j.depth, j.kind) for j in frontier.jobs] == [
        ("http://a.test/s.xml", 7, 2, JobKind.SITEMAP),
        ("http://a.test/p", 7, 3, 0), ("http://a.test/q", 7, 3, 0)]
    assert inp.stats.outcomes["tooDeep"] == 1


async def test_a_sitemap_lists_only_urls_of_its_own_host(make_web):
    tw = await make_web([Site("own.test", "127.0.0.2", {"/": html()}),
                         Site("other.test", "127.0.0.3", {"/": html(), "/victim.html": html()})])
    own = lambda path: tw.url("own.test", path)  # noqa: E731
    other = lambda path: tw.url("other.test", path)  # noqa: E731
    tw.web.sites["own.test"].pages.update({
        "/robots.txt": Page(f"Sitemap: {own('/sm.xml')}\nSitemap: {own('/idx.xml')}\n",
                            content_type="text/plain"),
        "/sm.xml": Page(urlset(own("/mine.html"), other("/victim.html")), content_type=XML),
        "/idx.xml": Page(index(other("/theirs.xml")), content_type=XML),
        "/mine.html": html(),
    })
    tw.web.sites["other.test"].pages["/theirs.xml"] = Page(urlset(other("/")), content_type=XML)
    crawler = await tw.crawl(f"startUrl {own('/')}")
    fetched = set(tw.fetched())
    assert own("/mine.html") in fetched
    assert other("/victim.html") not in fetched and other("/theirs.xml") not in fetched
    assert crawler.stats.outcomes["outOfScope"] == 2  # the page and the sitemap of other.test


CRAWL_IN_A_PROCESS = """
import asyncio, json, resource, sys
from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
crawler = Crawler(parse_config(sys.argv[1]), scratch=True)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
asyncio.run(crawler.run())
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"growth": (peak - base) * 1024, "outcomes": crawler.stats.outcomes}))
"""


def huge_sitemap(size: int) -> h.Trap:
    """A urlset of `size` bytes, nearly all of it an XML comment, sent as fast as it is read."""
    pad = b"<!--" + b"-" * (h.CHUNK - 8) + b"-->\n"

    async def trap(conn: h.Conn, path: str) -> None:
        await conn.send(h.head(ctype=XML) + b'<urlset><url><loc>/p.zip</loc></url>\n')
        for _ in range(size // len(pad)):
            await conn.send(pad)

    return trap


async def test_concurrent_huge_sitemaps_stay_within_the_page_memory_budget(tmp_path):
    import asyncio
    import json
    import subprocess
    import sys

    from larbinpy.demo import DnsServer

    n, size = 12, 60 * 1024 * 1024
    sites = [h.HostileSite(f"s{i}.test", f"127.0.5.{i + 1}", h.page("<html></html>"))
             for i in range(n)]
    server = h.HostileServer(sites)
    await server.start()
    for i, site in enumerate(sites):
        site.robots = h.page(f"Sitemap: {server.url(f's{i}.test', '/sm.xml')}\n", "text/plain")
        site.paths["/sm.xml"] = huge_sitemap(size)
    dns = DnsServer(server.dns_records)
    await dns.start()
    text = server.crawl_conf(tmp_path, dns.address)
    cfg = parse_config(text)
    try:
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", CRAWL_IN_A_PROCESS, text],
            capture_output=True, text=True, timeout=120, check=True)
    finally:
        await server.stop()
        await dns.stop()
    result = json.loads(done.stdout)
    assert result["outcomes"]["success"] == 2 * n  # each site's page and its sitemap, cut
    # each sitemap read no further than a page may be, held at most three times over while
    # read (its chunks, joined, cut to the limit): not the protocol's 50 MB each
    bound = n * 3 * cfg.max_page_size
    assert result["growth"] < bound, (result["growth"] // 2**20, bound // 2**20)
