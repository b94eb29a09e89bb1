"""`requisites`: what a page needs to render is fetched and archived, once, bounded.

Crawls of a real loopback web (real DNS, real HTTP servers on several hosts and IPs) with
`output warc`: a page's images, srcset candidates, stylesheets and their url()s and @imports,
scripts, icons and media are fetched one hop past the page (another host too, whatever
limitToDomain says), archived, marked in the crawl log; never parsed for links, never counted
as pages. Bad input: @import loops, a 10 MiB stylesheet, a srcset of 10,000 candidates, a CSS
url() to a private address. With recrawl, requisites checked again (conditional GETs, revisit
records) only when their page changed. And (slow) a real site's requisites, in the WARCs.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
import os
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin

import pytest
import tinycss2
from conftest import CRAWL_TIMEOUT, html, until
from revisitweb import ChangingPage, RevisitWeb
from test_recrawl import Lab
from test_warc import check, records, warc_files

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.daemon.status import snapshot
from larbinpy.demo import DnsServer, Page, Site, redirect
from larbinpy.links.requisites import CSS_MAX_CHARS, css_urls, srcset_urls
from larbinpy.stats import Outcome

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


def img(body: bytes = PNG) -> Page:
    """An image."""
    return Page(body, content_type="image/png")


def css(text: str) -> Page:
    """A stylesheet."""
    return Page(text, content_type="text/css")


PAGE = """<!doctype html><html><head><title>home</title>
<link rel=stylesheet href="/s/main.css"><link rel="shortcut icon" href="/favicon.ico">
<link rel=modulepreload href="/m.js"><link rel=next href="/next.html">
<script src="/app.js"></script>
<style>h1 { background: url("/img/h1.png") }</style>
</head><body background="/img/body.png" style="border-image: url(/img/border.png)">
<img src="http://cdn.test:{port}/logo.png" srcset="/img/a1.png 1x, /img/a2.png 2x">
<picture><source srcset="/img/wide.webp 800w"><img src="/img/narrow.png"></picture>
<input type=image src="/img/go.png"><video src="/v.mp4" poster="/img/poster.png"></video>
<object data="/o.svg"></object><embed src="/e.swf"><img src="/moved.png">
<a href="/next.html">next</a>
</body></html>"""


def web(port_holder: list[int]) -> list[Site]:
    """w.test (a page with every kind of requisite, on 127.0.0.2) and cdn.test (an image, on
    127.0.0.3); the page is made once the server's port is known."""
    return [
        Site("w.test", "127.0.0.2", {
            "/next.html": html("/"),
            "/s/main.css": css('@import url("print.css"); body { background: url(../img/bg.png) }'
                               ' .x { background-image: image-set("/img/set.png" 1x) }'),
            "/s/print.css": css("a { cursor: url('/img/cursor.png'), auto }"),
            "/favicon.ico": Page(b"ico", content_type="image/x-icon"),
            "/m.js": Page("export {}", content_type="text/javascript"),
            "/app.js": Page("var a;", content_type="text/javascript"),
            # an HTML requisite: archived, its links never followed
            "/o.svg": Page('<svg xmlns="http://www.w3.org/2000/svg"><a href="/never.html"/></svg>',
                           content_type="image/svg+xml"),
            "/e.swf": Page('<html><a href="/never2.html">x</a></html>'),
            "/v.mp4": Page(b"\0\0\0\x18ftypmp42", content_type="video/mp4"),
            **{f"/img/{n}": img() for n in (
                "h1.png", "body.png", "border.png", "a1.png", "a2.png", "wide.webp",
                "narrow.png", "go.png", "poster.png", "bg.png", "set.png", "cursor.png")},
        }),
        Site("cdn.test", "127.0.0.3", {"/logo.png": img(), "/moved.png": img()}),
    ]


EXPECTED = {"/s/main.css", "/s/print.css", "/favicon.ico", "/m.js", "/app.js", "/o.svg",
            "/e.swf", "/v.mp4", *(f"/img/{n}" for n in (
                "h1.png", "body.png", "border.png", "a1.png", "a2.png", "wide.webp",
                "narrow.png", "go.png", "poster.png", "bg.png", "set.png", "cursor.png"))}


def log_lines(tmp: Path) -> list[dict]:
    """The crawl log."""
    return [json.loads(line) for line in (tmp / "save" / "crawl.jsonl").read_text().splitlines()]


async def start(make_web):
    """The web above, its page filled in with the server's port."""
    tw = await make_web(web([]))
    port = int(tw.url("w.test").rsplit(":", 1)[1].split("/")[0])
    tw.web.sites["w.test"].pages["/"] = Page(PAGE.replace("{port}", str(port)))
    tw.web.sites["w.test"].pages["/moved.png"] = redirect(tw.url("cdn.test", "/moved.png"))
    return tw


async def test_a_pages_requisites_are_fetched_once_archived_and_marked(make_web):
    tw = await start(make_web)
    crawler = await tw.crawl(
        f"startUrl {tw.url('w.test')}\noutput warc\nlimitToDomain w.test end\n"
        "maxPagesPerSite 2\ndepthInSite 1\n")
    fetched = Counter(tw.pages_fetched())
    wanted = {tw.url("w.test", p) for p in EXPECTED} | {
        tw.url("cdn.test", p) for p in ("/logo.png", "/moved.png")}  # (a redirect's target)
    assert wanted <= set(fetched), wanted - set(fetched)
    assert max(fetched.values()) == 1  # once each
    # pages: the seed and its link, within maxPagesPerSite 2 whatever the requisites;
    # nothing an HTML or SVG requisite links to
    pages = {u for u in fetched if u not in wanted} - {tw.url("w.test", "/moved.png")}
    assert pages == {tw.url("w.test", "/"), tw.url("w.test", "/next.html")}
    # another host, though limitToDomain names only w.test
    assert tw.web.hits_for("cdn.test")
    stats = crawler.stats.outcomes
    assert stats[Outcome.requisite] == len(wanted)
    check(warc_files(tw.tmp))
    archived = {r["warc"]["WARC-Target-URI"] for r in records(warc_files(tw.tmp))
                if r["type"] == "response"}
    assert wanted <= archived
    lines = {line["url"]: line for line in log_lines(tw.tmp)}
    for url in wanted:
        assert lines[url]["requisite"] is True and lines[url]["kind"] == "requisite"
    assert lines[tw.url("w.test", "/img/cursor.png")]["via"] == tw.url("w.test", "/s/print.css")
    assert lines[tw.url("w.test", "/s/print.css")]["via"] == tw.url("w.test", "/s/main.css")
    assert lines[tw.url("w.test", "/app.js")]["via"] == tw.url("w.test", "/")
    assert "requisite" not in lines[tw.url("w.test", "/next.html")]


async def test_without_output_warc_no_requisite_is_fetched(make_web):
    tw = await start(make_web)
    crawler = await tw.crawl(f"startUrl {tw.url('w.test')}\noutput save\n")
    assert set(tw.pages_fetched()) == {tw.url("w.test", "/"), tw.url("w.test", "/next.html")}
    assert crawler.stats.outcomes[Outcome.requisite] == 0


async def test_import_loops_end_at_the_seen_set(make_web):
    tw = await make_web([Site("w.test", "127.0.0.2", {
        "/": Page('<link rel=stylesheet href="/self.css"><link rel=stylesheet href="/a.css">'),
        "/self.css": css('@import "self.css"; @import url(/self.css);'),
        "/a.css": css('@import "b.css"; p { background: url(x.png) }'),
        "/b.css": css('@import "a.css";'),
        "/x.png": img(),
    })])
    # and a chain of distinct sheets, each importing the next: ended by the nesting limit
    chain = tw.web.sites["w.test"].pages
    chain["/"] = Page(chain["/"].body + '<style>@import "/c0.css";</style>')
    for i in range(20):
        chain[f"/c{i}.css"] = css(f'@import "c{i + 1}.css";')
    crawler = await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\n")
    fetched = Counter(tw.pages_fetched())
    assert max(fetched.values()) == 1
    assert {tw.url("w.test", p) for p in ("/self.css", "/a.css", "/b.css", "/x.png")} <= set(
        fetched)
    chained = [u for u in fetched if "/c" in u]
    assert 1 < len(chained) < 10  # REQUISITE_NESTING levels below the page, not 20
    assert crawler.stats.outcomes[Outcome.tooDeep] >= 1


async def test_a_10_mib_stylesheet_is_read_up_to_the_bound_and_counted(make_web):
    head = "a { background: url(/early.png) }\n"
    filler = "p { color: red; margin: 0 auto }\n" * ((10 * 1024 * 1024) // 33)
    tail = "b { background: url(/late.png) }\n"
    sheet = head + filler + tail
    assert len(sheet) > 10 * 1024 * 1024 - 64
    tw = await make_web([Site("w.test", "127.0.0.2", {
        "/": Page('<link rel=stylesheet href="/big.css">'), "/big.css": css(sheet),
        "/early.png": img(), "/late.png": img()})])
    crawler = await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\nmaxPageSize 11MiB\n")
    fetched = set(tw.pages_fetched())
    assert tw.url("w.test", "/big.css") in fetched and tw.url("w.test", "/early.png") in fetched
    assert tw.url("w.test", "/late.png") not in fetched  # past CSS_MAX_CHARS: not read
    assert crawler.stats.requisites_cut == 1
    archived = {r["warc"]["WARC-Target-URI"]: r for r in records(warc_files(tw.tmp))
                if r["type"] == "response"}
    assert len(archived[tw.url("w.test", "/big.css")]["raw"]) == len(sheet)  # archived whole


async def test_a_srcset_of_10000_candidates_is_bounded_and_counted(make_web):
    candidates = ", ".join(f"/i/{n}.png {n + 1}w" for n in range(10000))
    pages = {"/": Page(f'<img src="/i/first.png" srcset="{candidates}">'), "/i/first.png": img()}
    tw = await make_web([Site("w.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\nmaxLinksPerPage 50\n")
    fetched = tw.pages_fetched()
    requisites = [u for u in fetched if "/i/" in u]
    assert len(requisites) == 50  # maxLinksPerPage, the src first
    assert tw.url("w.test", "/i/first.png") in requisites
    assert crawler.stats.requisites_cut == 1
    assert crawler.stats.outcomes[Outcome.err40X] == 49  # (this server has none of them)
    status = snapshot(crawler)  # what status.json and /metrics say
    assert status["requisites_cut"] == 1 and status["outcomes"]["requisite"] == 1


async def test_a_css_url_to_a_private_address_is_refused(make_web):
    page = Page('<link rel=stylesheet href="/s.css">')
    tw = await make_web([Site("w.test", "127.0.0.2", {"/": page}),
                         Site("loop.test", "127.0.0.5", {"/y.png": img()})],
                        extra_dns={"intranet.test": ["192.168.7.7"]})
    tw.web.sites["w.test"].pages["/s.css"] = css(
        "a { background: url(http://intranet.test/secret.png) }"
        " b { background: url(http://10.1.2.3/x.png) }"
        f" i {{ background: url({tw.url('loop.test', '/y.png')}) }}")
    # only w.test's address allowed: loop.test is on loopback too, but not allowed
    text = tw.config_text(f"exitAtEnd\nstartUrl {tw.url('w.test')}\noutput warc\n").replace(
        "allowNetworks 127.0.0.0/8 end", "allowNetworks 127.0.0.2/32 end")
    crawler = Crawler(parse_config(text), scratch=True)
    await asyncio.wait_for(crawler.run(), CRAWL_TIMEOUT)
    assert crawler.stats.outcomes[Outcome.deniedNetwork] == 3
    assert not tw.web.hits_for("loop.test")
    lines = {line["url"]: line for line in log_lines(tw.tmp)}
    for name in ("secret.png", "x.png", "y.png"):
        url = next(u for u in lines if name in u)
        assert lines[url]["kind"] == "deniedNetwork" and lines[url]["requisite"] is True


def test_srcset_is_split_as_the_html_standard_says() -> None:
    assert srcset_urls("a.png 1x,b.png 2x , c.png", 10) == ["a.png", "b.png", "c.png"]
    assert srcset_urls("data:image/png;base64,AAA= 1x, d.png", 10) == [
        "data:image/png;base64,AAA=", "d.png"]
    assert srcset_urls("e.png,, f.png 100w", 10) == ["e.png", "f.png"]
    assert srcset_urls("g.png (max-width: 1px, x) 1x, h.png", 10) == ["g.png", "h.png"]
    assert srcset_urls("a b, c d, e f", 2) == ["a", "c"]


def test_css_urls_come_from_the_css_tokens_not_the_text() -> None:
    text = ('/* url(comment.png) */ @import "imp.css" screen; @IMPORT url(imp2.css);'
            'a { content: "url(string.png)"; background: URL( "q.png" ) }'
            ' b { background: u\\72l(escaped.png) } c { mask: image-set("s1.png" 1x,'
            ' url(s2.png) 2x) }')
    urls, cut = css_urls(text, 100)
    assert urls == ["imp.css", "imp2.css", "q.png", "escaped.png", "s1.png", "s2.png"]
    assert not cut
    assert css_urls("a{}" * CSS_MAX_CHARS, 10) == ([], True)


# --- with recrawl: a page's requisites are checked again when the page changes ---


class PageWithImages(ChangingPage):
    """A changing page that shows two images: one behind honest validators (a changing page
    of its own, never changed), one served without any."""

    def body(self) -> str:
        """Its HTML, with the images."""
        return super().body().replace(
            "</body>", '<img src="/img.png"><img src="/plain.png"></body>')


async def test_with_recrawl_requisites_are_checked_again_only_when_their_page_changes(tmp_path):
    host = "honest.revisit.test"
    page = PageWithImages()
    site = Site(host, "127.0.5.1", {"/plain.png": img()})
    web = RevisitWeb([site], {host: "honest"}, {host: {"/": page, "/img.png": ChangingPage()}})
    await web.start()
    dns = DnsServer(web.dns_records)
    await dns.start()
    w = Lab(web, dns, tmp_path)
    try:
        async with w.crawling(f"startUrl {w.url(host)}\noutput warc\n"):
            await until(lambda: sum(a.status == 304 for a in web.answers(host, "/")) >= 2,
                        "the page revisited, unchanged, twice")
            # not on a schedule of their own: fetched once while their page did not change
            assert len(web.answers(host, "/img.png")) == 1
            assert len(web.hits_for(host)) - len(web.answers(host, "/")) <= 3  # + robots.txt
            page.change()
            await until(lambda: len(web.answers(host, "/img.png")) == 2
                        and sum(h.path == "/plain.png" for h in web.hits_for(host)) == 2,
                        "the images checked again after the page changed")
            await until(lambda: sum(x["kind"] == "unchanged" for x in w.log_lines()) >= 1,
                        "the image without validators logged")
            await until(lambda: sum(a.status == 304 and a.version == 1
                                    for a in web.answers(host, "/")) >= 1,
                        "the changed page revisited, unchanged")
        first, again = web.answers(host, "/img.png")
        assert first.status == 200 and again.status == 304
        assert again.if_none_match == first.etag  # a conditional GET with its validators
    finally:
        await web.stop()
        await dns.stop()
    lines = [x for x in w.log_lines() if x.get("requisite")]
    kinds = {(x["url"].rsplit("/", 1)[1], x["kind"]) for x in lines}
    assert kinds == {("img.png", "requisite"), ("img.png", "notModified"),
                     ("plain.png", "requisite"), ("plain.png", "unchanged")}
    assert all(x["via"] == w.url(host) and "next" not in x for x in lines)
    warcs = warc_files(tmp_path)
    check(warcs)
    revisits = {r["warc"]["WARC-Target-URI"]: r["warc"] for r in records(warcs)
                if r["type"] == "revisit"}
    assert revisits[w.url(host, "/img.png")]["WARC-Profile"].endswith("server-not-modified")
    assert revisits[w.url(host, "/plain.png")]["WARC-Profile"].endswith(
        "identical-payload-digest")


# --- a real site: its pages' requisites, in the archive ---

REAL_SITE = Path(os.environ.get(
    "LARBINPY_REAL_SITE",
    Path.home() / ".rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html/book"))


def css_refs(text: str) -> list[str]:
    """The url()s and @import strings of CSS, read apart from `requisites.css_urls`: a
    recursive walk of tinycss2's component values."""
    def walk(nodes: list) -> list[str]:
        out, importing = [], False
        for node in nodes:
            if node.type in ("whitespace", "comment"):
                continue
            if node.type == "url" or (node.type == "string" and importing):
                out.append(node.value)
            elif node.type == "function":
                out += ([a.value for a in node.arguments if a.type == "string"]
                        if node.lower_name == "url" else walk(node.arguments))
            elif getattr(node, "content", None) is not None:
                out += walk(node.content)
            importing = node.type == "at-keyword" and node.lower_value == "import"
        return out

    return walk(tinycss2.parse_component_value_list(text, skip_comments=True))


class Referenced(HTMLParser):
    """What a page needs to render, read apart from larbinpy's scan: the standard library's
    HTML parser, the attributes the `requisites` key names."""

    RELS = frozenset({"stylesheet", "icon", "preload", "modulepreload", "apple-touch-icon"})

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.css: list[str] = []
        self.in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a: dict[str, str | None] = {}
        for name, value in attrs:
            a.setdefault(name, value)
        wanted = [a.get("background")]
        if tag in ("img", "script", "embed", "source", "video", "audio", "track") or (
                tag == "input" and (a.get("type") or "").lower() == "image"):
            wanted.append(a.get("src"))
        if tag == "link" and self.RELS & set((a.get("rel") or "").lower().split()):
            wanted.append(a.get("href"))
        wanted += [a.get("poster") if tag == "video" else None,
                   a.get("data") if tag == "object" else None]
        if tag in ("img", "source") and a.get("srcset"):
            wanted += [c.split()[0] for c in (a["srcset"] or "").split(",") if c.strip()]
        self.urls += [u.strip() for u in wanted if u and u.strip()]
        if a.get("style"):
            self.css.append(a["style"] or "")
        self.in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self.in_style = False

    def handle_data(self, data: str) -> None:
        if self.in_style:
            self.css.append(data)


@pytest.mark.slow
async def test_a_real_sites_requisites_are_in_the_warcs(make_web):
    """The Rust book as rustup installs it (mdBook pages people wrote, their stylesheets,
    fonts, scripts, icons and images; LARBINPY_REAL_SITE names another directory), served on
    loopback and crawled with `output warc`, every page a seed: every page is archived, and
    at least 98% of the requisites its pages (and their stylesheets) reference and the site
    serves; the WARC files pass `warcio check`, and the crawl packs as a valid WACZ."""
    if not (REAL_SITE / "index.html").is_file():
        pytest.skip(f"no site in {REAL_SITE} (rustup component add rust-docs, or "
                    "LARBINPY_REAL_SITE=DIR)")
    files = {"/" + str(f.relative_to(REAL_SITE)): f for f in REAL_SITE.rglob("*") if f.is_file()}
    pages = {path: Page(f.read_bytes(), content_type=mimetypes.guess_type(f.name)[0]
                        or "application/octet-stream") for path, f in files.items()}
    tw = await make_web([Site("book.test", "127.0.0.2", pages)])
    html_paths = [p for p in pages if p.endswith(".html")]
    seeds = tw.tmp / "seeds.txt"
    seeds.write_text("".join(tw.url("book.test", p) + "\n" for p in html_paths))
    await tw.crawl(f"seedFile {seeds}\noutput warc\ndepthInSite 100\n", timeout=600)
    warcs = warc_files(tw.tmp)
    check(warcs)
    archived = {r["warc"]["WARC-Target-URI"]: r["status"] for r in records(warcs)
                if r["type"] == "response"}
    assert all(archived.get(tw.url("book.test", p)) == "200" for p in html_paths)
    origin = tw.url("book.test", "/")

    def served(url: str) -> bool:
        return url.startswith(origin) and "/" + url[len(origin):] in pages

    wanted: set[str] = set()
    sheets: list[str] = []
    for path in html_paths:
        page_url = tw.url("book.test", path)
        refs = Referenced()
        refs.feed(pages[path].body.decode("utf-8", "replace"))
        urls = [*refs.urls, *(u for text in refs.css for u in css_refs(text))]
        found = {urldefrag(urljoin(page_url, u))[0] for u in urls} - wanted
        wanted |= {u for u in found if served(u)}
        sheets += [u for u in found if served(u) and u.endswith(".css")]
    while sheets:  # and what the stylesheets they need name, recursively
        sheet = sheets.pop()
        text = pages["/" + sheet[len(origin):]].body.decode("utf-8", "replace")
        found = {urldefrag(urljoin(sheet, u))[0] for u in css_refs(text)} - wanted
        wanted |= {u for u in found if served(u)}
        sheets += [u for u in found if served(u) and u.endswith(".css")]
    assert len(wanted) > 50  # fonts, stylesheets, scripts, icons, images
    kept = [u for u in wanted if archived.get(u) == "200"]
    assert len(kept) >= 0.98 * len(wanted), sorted(set(wanted) - set(kept))[:20]
    # and the crawl packs as a WACZ py-wacz's validator accepts
    from test_wacz import larbinpy_wacz, validate

    packed = tw.tmp / "book.wacz"
    result = larbinpy_wacz(str(tw.tmp / "save"), "-o", str(packed))
    assert result.returncode == 0, result.stderr
    validate(packed)
