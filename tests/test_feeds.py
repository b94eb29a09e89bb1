"""Feeds (RSS 2.0, RSS 1.0, Atom) as lists of URLs with dates: the parser on hand-written
samples, then crawls of real servers on loopback: a front page's feed read and its entries
fetched, another host's entries refused, hostile feeds bounded, and with `recrawl on` a
feed's dates making pages due until they prove false."""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from email.utils import formatdate

from conftest import until
from test_recrawl import Lab, lab  # noqa: F401 - the fixture, shared with the sitemap's test

from larbinpy.demo import Page, Site
from larbinpy.links.feeds import MAX_VALUE, parse, sniff
from larbinpy.links.sitemaps import MAX_BYTES as SITEMAP_MAX_BYTES

MiB = 1024 * 1024
RSS = "application/rss+xml"


def rss(*items: tuple[str, str | None]) -> str:
    """An RSS 2.0 feed of (link, pubDate) items."""
    body = "".join(f"<item><title>t</title><link>{link}</link>"
                   + (f"<pubDate>{date}</pubDate>" if date else "") + "</item>\n"
                   for link, date in items)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel>'
            f"<title>a feed</title><link>http://elsewhere.test/</link>\n{body}</channel></rss>")


def atom(*entries: tuple[str, str | None]) -> str:
    """An Atom 1.0 feed of (href, updated) entries."""
    body = "".join(f'<entry><id>urn:x</id><link rel="self" href="/self"/><link href="{href}"/>'
                   + (f"<updated>{date}</updated>" if date else "") + "</entry>\n"
                   for href, date in entries)
    return ('<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">'
            f'<link href="/not-an-entry.html"/>\n{body}</feed>')


def front(feed: str, ctype: str = RSS, *links: str) -> Page:
    """A front page announcing `feed` in its head (and linking `links`)."""
    anchors = "".join(f'<a href="{u}">{u}</a>' for u in links)
    return Page(f'<html><head><link rel="alternate" type="{ctype}" href="{feed}">'
                f"</head><body>{anchors}</body></html>")


# --- the parser, on samples written by hand ---

def test_rss2_links_guids_and_rfc822_dates():
    feed = parse(b"""<?xml version="1.0"?>
<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel>
 <link>http://site.test/</link><atom:link rel="self" href="http://site.test/feed"/>
 <item><link>/rel.html?a=1&amp;b=2</link><pubDate>Sun, 02 Jun 2024 10:00:00 GMT</pubDate></item>
 <item><guid>http://site.test/by-guid</guid><pubDate>Sun, 02 Jun 2024 12:00:00 +0200</pubDate>
 </item>
 <item><guid isPermaLink="false">http://site.test/not-a-link</guid></item>
 <item><guid>tag:site.test,2024:7</guid></item>
 <item><link><![CDATA[ http://site.test/cdata?x&y ]]></link><pubDate>yesterday</pubDate></item>
 <item><title>no date</title><link>http://site.test/undated</link></item>
</channel></rss>""")
    assert feed.entries == [("/rel.html?a=1&b=2", 1717322400.0),
                            ("http://site.test/by-guid", 1717322400.0),
                            ("http://site.test/cdata?x&y", None),  # a date that does not read
                            ("http://site.test/undated", None)]
    assert feed.dropped == 2  # the guid that is no permalink, the guid that is no URL


def test_rss1_rdf_items_and_dc_dates():
    feed = parse(b"""<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
  xmlns="http://purl.org/rss/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/">
 <channel rdf:about="http://site.test/"><link>http://site.test/</link>
  <items><rdf:Seq><rdf:li resource="http://site.test/1"/></rdf:Seq></items></channel>
 <item rdf:about="http://site.test/1"><link>http://site.test/1</link>
  <dc:date>2024-06-02T10:00:00Z</dc:date></item>
 <item rdf:about="http://site.test/2"><link>2</link><dc:date>2024-06-02</dc:date></item>
</rdf:RDF>""")
    assert feed.entries == [("http://site.test/1", 1717322400.0), ("2", 1717286400.0)]


def test_atom_alternate_links_and_the_latest_date():
    feed = parse(atom(("e1.html", "2024-06-02T12:00:00+02:00")).encode()
                 .replace(b"</entry>", b"<published>2020-01-01T00:00:00Z</published></entry>"))
    assert feed.entries == [("e1.html", 1717322400.0)]  # updated, later than published
    feed = parse(b"""<feed xmlns="http://www.w3.org/2005/Atom">
<entry><link rel="enclosure" href="/song.mp3"/><link rel='alternate' type="text/html"
 href='/alt.html'/><updated>not a date</updated></entry>
<entry><link rel="edit" href="/edit"/></entry></feed>""")
    assert feed.entries == [("/alt.html", None)] and feed.dropped == 1


def test_sniff_looks_at_the_root_element_only():
    assert sniff(rss().encode()) == "feed"
    prolog = b"\xef\xbb\xbf\n<!-- hi --><?xml-stylesheet href='x'?>"
    assert sniff(prolog + atom().encode()) == "feed"
    assert sniff(b'<rdf:RDF xmlns="http://purl.org/rss/1.0/">') == "feed"
    assert sniff(b'<rdf:RDF xmlns="http://example.test/other">') is None  # RDF, not RSS
    assert sniff(b"<?xml version='1.0'?><urlset xmlns='x'>") == "sitemap"
    assert sniff(b"<sitemapindex>") == "sitemap"
    assert sniff(b"<html><rss>") is None and sniff(b"junk \x00\xff") is None
    assert sniff(b"<!DOCTYPE x [" + b" " * 8192 + b"]><rss>") is None  # past the first bytes
    assert sniff(gzip.compress(rss().encode())) == "feed"


def test_hostile_feeds_are_bounded():
    laughs = (b'<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY lol "lol">'
              + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1)) * 10)
                         for i in range(1, 10))
              + b']><rss><channel><item><link>&lol9;</link></item>'
              b"<item><link>/ok.html</link></item></channel></rss>")
    assert parse(laughs).entries == [("&lol9;", None), ("/ok.html", None)]  # not expanded
    # unclosed items, and many: one linear pass
    assert parse(b"<rss>" + b"<item><link>/x</link>" * 200_000).entries == []
    start = time.monotonic()
    parse(b"<item><pubDate>" + b" " * (4 * MiB) + b"<item><link>" + b" " * (4 * MiB) + b"</item>")
    parse(b"<item><link>/x</link>" + b"<pubDate><![CDATA[" * 200_000 + b"</item>")
    assert time.monotonic() - start < 2
    long = b"<item><link>/" + b"a" * MAX_VALUE + b"</link></item>"
    assert parse(long).entries == [] and parse(long).dropped == 1
    many = rss(*[(f"/{i}", None) for i in range(10)]).encode()
    assert len(parse(many, limit_entries=4).entries) == 4 and parse(many, 4).dropped == 6
    bomb = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    data = bomb.compress(b"<rss><item><link>/b</link></item>" + b" " * (64 * MiB)) + bomb.flush()
    cut = parse(data + b"", limit_bytes=MiB)
    assert cut.entries == [("/b", None)] and cut.dropped == 1


# --- crawls of real servers on loopback ---

async def test_a_front_page_rss_feed_has_its_entries_fetched_and_no_other_hosts(make_web):
    tw = await make_web([Site("news.test", "127.0.0.2"),
                         Site("victim.test", "127.0.0.3", {"/x.html": Page("<html></html>")})])
    tw.web.sites["news.test"].pages.update({
        "/": front("/feed.rss"),
        "/feed.rss": Page(rss(("/p1.html", "Sun, 02 Jun 2024 10:00:00 GMT"),
                              (tw.url("news.test", "/p2.html"), None),
                              (tw.url("victim.test", "/x.html"), None)), content_type=RSS),
        "/p1.html": Page("<html></html>"), "/p2.html": Page("<html></html>"),
    })
    crawler = await tw.crawl(f"startUrl {tw.url('news.test')}")
    assert set(tw.pages_fetched()) == {tw.url("news.test", p)
                                       for p in ("/", "/feed.rss", "/p1.html", "/p2.html")}
    out = crawler.stats.outcomes
    assert out["success"] == 4 and out.get("badType", 0) == 0  # the feed is read, not refused
    assert out["outOfScope"] == 1  # victim.test's page: counted, never fetched


async def xml_web(make_web):
    """xml.test: / announces an Atom feed, links a sitemap and an XML document, all three
    under generic XML types."""
    tw = await make_web([Site("xml.test", "127.0.0.2")])
    xml = "application/xml"
    tw.web.sites["xml.test"].pages.update({
        "/": front("/atom", "application/atom+xml", "/sm.xml", "/data.xml"),
        "/atom": Page(atom(("a1.html", "2024-06-02T10:00:00Z")), content_type=xml),
        "/sm.xml": Page('<?xml version="1.0"?><urlset><url><loc>/s1.html</loc></url></urlset>',
                        content_type="text/xml"),
        "/data.xml": Page("<catalog><item><link>/never.html</link></item></catalog>",
                          content_type=xml),
        "/a1.html": Page("<html></html>"), "/s1.html": Page("<html></html>"),
        "/never.html": Page("<html></html>"),
    })
    return tw


async def test_atom_and_sitemaps_under_generic_xml_types_are_told_by_their_root(make_web):
    tw = await xml_web(make_web)
    crawler = await tw.crawl(f"startUrl {tw.url('xml.test')}")
    assert {h.path for h in tw.web.hits} == {"/robots.txt", "/", "/atom", "/sm.xml",
                                             "/data.xml", "/a1.html", "/s1.html"}
    out = crawler.stats.outcomes
    assert out["badType"] == 1  # XML that is neither a feed nor a sitemap: not read as one
    assert out["success"] == 5


async def test_sitemaps_off_reads_no_sitemap_found_as_a_link(make_web):
    tw = await xml_web(make_web)
    crawler = await tw.crawl(f"startUrl {tw.url('xml.test')}\nsitemaps off")
    assert "/s1.html" not in {h.path for h in tw.web.hits}
    assert crawler.stats.outcomes["badType"] == 2  # the sitemap, and the XML document


async def test_junk_laughs_and_bombs_under_feed_types_are_bounded_counted_and_survived(
        make_web):
    tw = await make_web([Site("bad.test", "127.0.0.2")])
    laughs = (b'<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY a "aaaaaaaaaa">'
              + b"".join(b'<!ENTITY a%d "%s">' % (i, b"&a;" * 10) for i in range(1, 10))
              + b"]><rss><item><link>&a9;</link></item><item><link>/laughs-ok.html</link>"
              b"</item></rss>")
    z = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    bomb = (z.compress(b"<rss><item><link>/bomb-ok.html</link></item>" + b" " * (64 * MiB))
            + z.flush())
    pages = {"/junk.rss": Page(b"\x00\xff<rss><item><link>\x80\x81" * 1000, content_type=RSS),
             "/laughs.rss": Page(laughs, content_type=RSS),
             "/bomb.xml": Page(bomb, content_type="application/xml"),
             "/corrupt.rss": Page(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 20,
                                 content_type=RSS)}  # a deflate block of no known type
    tw.web.sites["bad.test"].pages.update({
        "/": Page("<html><head>" + "".join(f'<link rel="alternate" type="{RSS}" href="{p}">'
                                            for p in pages) + '</head><a href="/last.html">'
                  "</a></html>"), **pages,
        "/laughs-ok.html": Page("<html></html>"), "/bomb-ok.html": Page("<html></html>"),
        "/last.html": Page("<html></html>")})
    crawler = await tw.crawl(f"startUrl {tw.url('bad.test')}")
    paths = {h.path for h in tw.web.hits}
    assert {"/laughs-ok.html", "/bomb-ok.html", "/last.html"} <= paths
    out = crawler.stats.outcomes
    assert out["badEncoding"] == 1  # the gzip that does not inflate
    # /, the junk, the laughs, the bomb (inflated to the sitemap limit only), three pages
    assert out["success"] == 7
    assert crawler.memory.used == 0


async def test_a_feed_over_the_limit_is_cut_within_document_memory(make_web):
    tw = await make_web([Site("big.test", "127.0.0.2")])
    pad = "<!--" + "-" * (MiB - 8) + "-->\n"
    body = rss(("/first.html", None)).replace("</channel>", pad * 12
                                             + "<item><link>/late.html</link></item></channel>")
    assert len(body) > SITEMAP_MAX_BYTES
    tw.web.sites["big.test"].pages.update({
        "/": front("/big.rss", RSS, "/after.html"), "/big.rss": Page(body, content_type=RSS),
        "/first.html": Page("<html></html>"), "/late.html": Page("<html></html>"),
        "/after.html": Page("<html></html>")})
    crawler = await tw.crawl(f"startUrl {tw.url('big.test')}\ndocumentMemory 4MiB\n"
                             "maxPageSize 1MiB\n")
    paths = {h.path for h in tw.web.hits}
    assert {"/first.html", "/after.html"} <= paths and "/late.html" not in paths
    assert crawler.stats.outcomes["success"] == 4  # /, the cut feed, the two pages
    memory = crawler.memory
    # read to the sitemap limit, not to its end: alone over the pool, as a page may be
    assert memory.peak <= SITEMAP_MAX_BYTES + MiB < len(body) and memory.used == 0


# --- recrawl: a feed's dates as change signals ---

def feed_of(w: Lab, host: str, when: float) -> Page:
    """An RSS feed listing /a.html as published at `when`."""
    return Page(rss((w.url(host, "/a.html"), formatdate(when, usegmt=True))),
                content_type=RSS)


async def test_feed_dates_make_a_page_due_until_they_prove_false(lab):  # noqa: F811
    w = await lab("honest")
    host = "honest.revisit.test"
    site = w.web.sites[host]
    feed_url = w.url(host, "/feed.rss")
    site.pages["/feed.rss"] = feed_of(w, host, time.time() - 7200)
    page = w.web.changing[host]["/a.html"]

    def a_fetches() -> int:
        return len(w.web.answers(host, "/a.html"))

    def feed_lines() -> int:
        return sum(x["url"] == feed_url for x in w.log_lines())

    # revisits far off (45 s at least, past the test's rounds): only the feed's dates make
    # /a.html due; the feed itself is made due by hand (`submit --force`'s path), standing for
    # its own schedule (a forced page comes out within a granularity, recrawlMin / 16)
    slow = "recrawlMin 60\nrecrawlMax 120\n"
    async with w.crawling(f"startUrl {w.url(host, '/a.html')}\nstartUrl {feed_url}\n"
                          + slow) as crawler:
        await until(lambda: a_fetches() == 1 and feed_lines() == 1, "the first pass")
        await until(lambda: crawler.recrawl.schedule.get(feed_url) is not None, "scheduled")
        for n, (changes, expect) in enumerate([(True, 200), (False, 304)]):
            if changes:
                page.change()
            # a date in another second than the last one's: a feed whose body did not change
            # is not read again (its revisit is `unchanged`)
            await asyncio.sleep(1.1)
            site.pages["/feed.rss"] = feed_of(w, host, time.time() + 2)
            assert crawler.recrawl.force(feed_url)  # the feed revisited
            due = crawler.recrawl.schedule.get(w.url(host, "/a.html")).due
            await until(lambda n=n: a_fetches() == n + 2, f"feed date {n + 1} acted on")
            # made due by the feed's date: fetched long before its schedule said
            assert w.web.answers(host, "/a.html")[-1].at < due - 30
            assert w.web.answers(host, "/a.html")[-1].status == expect
        # the second date was false (a 304): the site's dates are not trusted any more
        page.change()
        await asyncio.sleep(1.1)
        site.pages["/feed.rss"] = feed_of(w, host, time.time() + 2)
        before = feed_lines()
        assert crawler.recrawl.force(feed_url)
        await until(lambda: feed_lines() > before, "the feed read again")
        assert w.url(host, "/a.html") not in crawler.recrawl.claims
        site_record = crawler.sites.by_key[w.url(host, "/")[:-1]]
        assert crawler.recrawl.site_state(site_record).lastmod_trusted is False
        await asyncio.sleep(0.5)  # time enough for a fetch the false date would have caused
    assert a_fetches() == 3


async def test_a_feed_is_revisited_for_the_new_pages_it_lists_and_they_come_soon(
        lab):  # noqa: F811
    """A feed is a page the recrawl schedules: its revisits find the articles it announces
    (its entries are its links), so it is revisited as often as they come, and each new
    article is fetched within seconds; the feed's crawl-log lines say what each found."""
    from revisitweb import ChangingPage

    w = await lab("honest", more=60)
    host = "honest.revisit.test"
    site = w.web.sites[host]
    feed_url = w.url(host, "/feed.rss")
    entries: list[tuple[str, str | None]] = []
    site.pages["/feed.rss"] = Page(rss(), content_type=RSS)
    extra = ("recrawlMax 30\nwaitDuration 0.1\nconnectionsPerHost 1\n"
             f"startUrl {w.url(host)}\nstartUrl {feed_url}\n")
    async with w.crawling(extra):
        await until(lambda: w.web.answers(host, "/p59.html"), "the first pass")
        delays = []
        for k in range(6):
            path = f"/new{k}.html"
            w.web.changing[host][path] = ChangingPage()
            entries.insert(0, (w.url(host, path), formatdate(time.time(), usegmt=True)))
            site.pages["/feed.rss"] = Page(rss(*entries), content_type=RSS)
            published = time.monotonic()
            await until(lambda path=path: w.web.answers(host, path), f"{path} fetched")
            delays.append(time.monotonic() - published)
    assert sorted(delays)[len(delays) // 2] < 1.5 and max(delays) < 5.0, delays
    # only the feed lists them: each was found by one of its revisits
    found = [x.get("new", 0) for x in w.log_lines() if x["url"] == feed_url]
    assert sum(found) == 6, found
