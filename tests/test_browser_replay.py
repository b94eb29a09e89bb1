"""An archive replays as the pages looked: a real browser, live and through pywb.

A site on loopback whose pages need what pages need to render (a stylesheet with a
background image and an @import of another with its own, an image chosen from a srcset, a
picture's source, a script that draws, an icon, an image on another host, an <iframe> with
its own stylesheet) is crawled with `output warc`. pywb serves the WARCs in proxy mode
(tests/replay.py), and headless Chromium (tests/devtools.py) loads each page twice: live, and
through the replay. No request the page makes during replay may be answered "not in archive"
(pywb's 404) or fail, it makes the requests it makes live, and its screenshot matches the
live one within a small pixel tolerance. Then the same for a page that changed under `recrawl
on`, its requisites conditional-GET'd (a 304, or an identical payload without validators)
and so replayed from revisit records.
"""

from __future__ import annotations

import hashlib
import io
import math
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from conftest import until
from devtools import Browser, Request, Tab, chromium
from PIL import Image, ImageChops, ImageDraw
from replay import ProxyPywb, pywb_bin
from test_recrawl import Lab
from test_warc import check, records, warc_files

from larbinpy.demo import DnsServer, LocalWeb, Page, Site

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium() is None,
                       reason="Chromium is not installed (.ci/run installs Debian's chromium)"),
    pytest.mark.skipif(pywb_bin() is None, reason="pywb is not installed: make .venv-pywb"),
]

HOSTS = {"w.test": "127.0.0.2", "cdn.test": "127.0.0.3"}
# a channel of a pixel may differ by this much (antialiasing) without the pixel counting
PIXEL_THRESHOLD = 24
# at most this share of the pixels may differ: what a missing stylesheet, image or script
# changes is far more (the test checks that too)
TOLERANCE = 0.005


def png(width: int, height: int, colour: str, stripes: str | None = None) -> Page:
    """A PNG image of one colour, with diagonal stripes of another."""
    image = Image.new("RGB", (width, height), colour)
    if stripes:
        draw = ImageDraw.Draw(image)
        for x in range(-height, width, 12):
            draw.line([(x, height), (x + height, 0)], fill=stripes, width=4)
    out = io.BytesIO()
    image.save(out, "PNG")
    return Page(out.getvalue(), content_type="image/png")


def css(text: str) -> Page:
    """A stylesheet."""
    return Page(text, content_type="text/css")


HEAD = """<!doctype html><html><head><meta charset=utf-8><title>{title}</title>
<link rel=stylesheet href="/css/main.css"><link rel=icon href="/favicon.png">
<script src="/js/app.js"></script></head>"""

HOME = HEAD + """<body class="{version}"><div id=banner></div><h1>{heading}</h1>
<img src="/img/photo.png" srcset="/img/photo-1x.png 1x, /img/photo-2x.png 2x" width=120
 height=90 alt=photo><img src="http://cdn.test:{port}/logo.png" width=90 height=90 alt=logo>
<div class=imported></div><p id=js>no script</p>
<iframe src="/frame.html" width=320 height=120></iframe>
<p><a href="/about.html">about</a></p></body></html>"""

ABOUT = HEAD.replace("{title}", "About") + """<body><div id=banner></div><h1>About</h1>
<picture><source srcset="/img/wide.png" media="(min-width: 600px)">
<img src="/img/narrow.png" width=200 height=80 alt=wide></picture>
<div class=imported></div><p id=js>no script</p></body></html>"""

FRAME = """<!doctype html><html><head><link rel=stylesheet href="/css/frame.css"></head>
<body><div class=boxed>in the frame</div></body></html>"""

# where the home page's own requisites are: what a change of the page has revisited
HOME_REQUISITES = ("/css/main.css", "/favicon.png", "/js/app.js", "/img/photo.png",
                   "/img/photo-1x.png", "/img/photo-2x.png")


def site_pages(port: int) -> dict[str, dict[str, Page]]:
    """host -> path -> page; the home page names the image host with the server's port."""
    return {
        "w.test": {
            "/": home(port, "v1", "Home"),
            "/about.html": Page(ABOUT),
            "/frame.html": Page(FRAME),
            "/css/main.css": css(
                '@import url("parts/imported.css");\n'
                "body { margin: 0; font: 18px sans-serif; background: #fff }\n"
                "#banner { height: 70px; background: url(../img/tile.png) repeat-x }\n"
                ".v2 #banner { height: 140px }\n"
                "iframe { border: 0 }\n"),
            "/css/parts/imported.css": css(
                ".imported { width: 400px; height: 60px;"
                " background-image: url('/img/stripe.png') }\n"),
            "/css/frame.css": css(".boxed { height: 100px; background: url(/img/frame-bg.png) }"),
            "/js/app.js": Page(
                "document.addEventListener('DOMContentLoaded', () => {\n"
                "  const p = document.getElementById('js');\n"
                "  p.textContent = 'drawn by the script';\n"
                "  p.style.cssText = 'background: #2a6; height: 50px; width: 500px';\n"
                "});\n", content_type="text/javascript"),
            "/favicon.png": png(16, 16, "#c33"),
            "/img/tile.png": png(40, 70, "#36c", "#fc3"),
            "/img/stripe.png": png(60, 60, "#939", "#fff"),
            "/img/frame-bg.png": png(30, 30, "#f80", "#333"),
            "/img/photo.png": png(120, 90, "#000"),  # the fallback: never shown at scale 1
            "/img/photo-1x.png": png(120, 90, "#0aa", "#055"),
            "/img/photo-2x.png": png(240, 180, "#0aa", "#055"),
            "/img/wide.png": png(200, 80, "#a50", "#ff0"),
            "/img/narrow.png": png(200, 80, "#000"),
        },
        "cdn.test": {"/logo.png": png(90, 90, "#6c3", "#030")},
    }


def home(port: int, version: str, heading: str) -> Page:
    """The home page, as its `version` is (v2's banner is twice as high)."""
    return Page(HOME.format(title=heading, version=version, heading=heading, port=port))


def differing(a: bytes, b: bytes) -> float:
    """The share of the pixels that differ between two screenshots of the same size."""
    with Image.open(io.BytesIO(a)) as x, Image.open(io.BytesIO(b)) as y:
        assert x.size == y.size
        diff = ImageChops.difference(x.convert("RGB"), y.convert("RGB")).convert("L")
        changed = sum(diff.histogram()[PIXEL_THRESHOLD + 1:])
        return changed / (x.width * x.height)


def own(requests: list[Request]) -> list[Request]:
    """The requests for the site's URLs (not pywb's inserted scripts, on its pywb.proxy)."""
    return [r for r in requests if urlsplit(r.url).hostname in HOSTS]


async def looks_as_live(web_: LocalWeb, live: Tab, replay: Tab, url: str, keep: Path
                        ) -> bytes:
    """Load `url` live and through the replay: no request of the replayed page answered "not
    in archive" or failed, none reached the live site, the same requests as live, the
    screenshots alike. The live one."""
    seen_live = own(await live.load(url))
    assert seen_live and all(r.status == 200 for r in seen_live), seen_live
    shot_live = await live.screenshot()
    hits = len(web_.hits)
    seen_replay = own(await replay.load(url))
    assert len(web_.hits) == hits, web_.hits[hits:]  # all from the archive
    missing = [(r.url, r.status, r.failure) for r in seen_replay
               if r.status != 200 or r.failure]
    assert not missing, f"{url}: not in the archive, or failed, in replay: {missing}"
    assert {r.url for r in seen_replay} == {r.url for r in seen_live}, url
    shot_replay = await replay.screenshot()
    share = differing(shot_live, shot_replay)
    if share > TOLERANCE:  # kept for whoever looks into it
        name = hashlib.sha1(url.encode()).hexdigest()[:8]
        (keep / f"{name}-live.png").write_bytes(shot_live)
        (keep / f"{name}-replay.png").write_bytes(shot_replay)
    assert share <= TOLERANCE, (f"{url}: {share:.2%} of the pixels differ from the live page"
                                f" (screenshots in {keep})")
    return shot_live


async def replayed_as_live(tmp: Path, web_: LocalWeb, pages: list[str], blocked: list[str]
                           ) -> None:
    """pywb over the crawl's WARCs and Chromium: each page looks as live (see looks_as_live),
    and the checks can fail: a URL not in the archive is seen as such, and the first page
    without its `blocked` URLs (patterns) differs from the live page beyond the tolerance."""
    warcs = warc_files(tmp)
    check(warcs)
    work = tmp / "pywb"
    work.mkdir()
    rules = ", ".join(f"MAP {h} {ip}" for h, ip in HOSTS.items())
    with ProxyPywb(warcs, work) as pywb:
        async with Browser(chromium() or "", tmp / "chrome",
                           f"--host-resolver-rules={rules}") as browser:
            live, replay = await browser.tab(), await browser.tab(proxy=pywb.proxy)
            shots = [await looks_as_live(web_, live, replay, url, tmp) for url in pages]
            absent = f"http://w.test:{web_.port}/never-archived.png"
            seen = {r.url: r.status for r in own(await replay.load(absent))}
            assert seen[absent] == 404, seen  # pywb's "not in archive", as the check sees it
            await live.call("Network.setBlockedURLs", urls=blocked)
            await live.load(pages[0])
            assert differing(shots[0], await live.screenshot()) > 4 * TOLERANCE


def fill(web_: LocalWeb) -> None:
    """Give a started web its pages (the home page names the port it listens on)."""
    for host, pages in site_pages(web_.port).items():
        web_.sites[host].pages.update(pages)


async def start_web(web_: LocalWeb) -> DnsServer:
    """Start the web, fill it and start its DNS server."""
    await web_.start()
    fill(web_)
    dns = DnsServer(web_.dns_records)
    await dns.start()
    return dns


def sites() -> list[Site]:
    """The two hosts, their pages filled in by `fill`."""
    return [Site(host, ip) for host, ip in HOSTS.items()]


async def test_each_page_replays_in_a_browser_as_it_looked_live(make_web):
    """One `output warc` crawl; the home page (its iframe too) and the about page, replayed."""
    tw = await make_web(sites())
    fill(tw.web)
    await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\n")
    await replayed_as_live(tw.tmp, tw.web, [tw.url("w.test", p) for p in ("/", "/about.html")],
                           ["*.css", "*.png"])


class ValidatedWeb(LocalWeb):
    """LocalWeb whose pages carry an ETag (a hash of the body) and answer a conditional GET
    naming it with a 304, but for the paths in `plain`: served without validators, always
    in full."""

    def __init__(self, sites: list[Site], plain: set[str]) -> None:
        super().__init__(sites)
        self.plain = plain

    async def _respond(self, request: web.BaseRequest, page: Page) -> web.StreamResponse:
        """A 304 when If-None-Match names the body's ETag; else the page with its ETag."""
        if request.raw_path in self.plain or page.status != 200:
            return await super()._respond(request, page)
        body = page.body.encode() if isinstance(page.body, str) else page.body
        etag = f'"{hashlib.sha1(body).hexdigest()[:16]}"'
        if request.headers.get("If-None-Match") == etag:
            resp = web.Response(status=304, headers={"ETag": etag})
            await resp.prepare(request)
            await resp.write_eof()
            return resp
        return await super()._respond(request, replace(page, headers={**page.headers,
                                                                      "ETag": etag}))


async def test_a_changed_page_replays_from_its_requisites_revisit_records(tmp_path):
    """`recrawl on`: the home page fetched, found not modified, changed (v2's banner is twice
    as high, so a replay of v1 would differ by a quarter of the screen) and fetched again, its
    requisites conditional-GET'd into revisit records of both profiles; replayed, it looks as
    v2 does live."""
    plain = {"/js/app.js", "/img/photo-1x.png"}  # no validators: identical payloads
    web_ = ValidatedWeb(sites(), plain)
    dns = await start_web(web_)
    lab = Lab(web_, dns, tmp_path)  # type: ignore[arg-type]  # (any LocalWeb will do)
    home_url = lab.url("w.test")
    wanted = {lab.url("w.test", p) for p in HOME_REQUISITES}

    def kinds(url: str) -> set[str]:
        return {x["kind"] for x in lab.log_lines() if x["url"] == url}

    try:
        async with lab.crawling(f"startUrl {home_url}\noutput warc\n"):
            await until(lambda: all("requisite" in kinds(u) for u in wanted),
                        "the home page's requisites fetched", timeout=30)
            await until(lambda: "notModified" in kinds(home_url), "the home page revisited")
            web_.sites["w.test"].pages["/"] = home(web_.port, "v2", "Home, changed")
            changed = math.floor(time.time())
            await until(lambda: all(kinds(u) & {"notModified", "unchanged"} for u in wanted),
                        "the requisites checked again after the page changed", timeout=30)
            # pywb's index tells captures apart by the second: the page's latest capture must
            # be seconds after the change, not in a second it shares with the old version
            await until(lambda: any(x["url"] == home_url and x["t"] >= changed + 2
                                    for x in lab.log_lines()), "the page fetched again")
        revisits = {r["warc"]["WARC-Target-URI"]: r["warc"]["WARC-Profile"].rsplit("/", 1)[1]
                    for r in records(warc_files(tmp_path)) if r["type"] == "revisit"}
        assert {revisits.get(lab.url("w.test", p)) for p in HOME_REQUISITES} == {
            "server-not-modified", "identical-payload-digest"}
        await replayed_as_live(tmp_path, web_, [home_url], ["*.css", "*.png"])
    finally:
        await web_.stop()
        await dns.stop()
