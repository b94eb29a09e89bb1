"""larbin's compile-time options as larbin.conf keys, end to end: followImages (IMAGES), anyType
(ANYTYPE), cookies (COOKIES), cgiLevel (CGILEVEL), depthBySite (DEPTHBYSITE), URL tags
(URL_TAGS) through the input port, kept across redirects, in the save index and links output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import html
from test_ports import daemon, wait_idle

from larbinpy.demo import Page, Site, redirect

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32


def saved(tmp_path: Path) -> dict[str, list[str]]:
    """The save index: URL -> the rest of its line (file name, and tag when there is one)."""
    index = tmp_path / "save" / "d00000" / "index"
    if not index.exists():
        return {}
    lines = [line.split(" ") for line in index.read_text().splitlines()]
    return {parts[1]: [parts[0], *parts[2:]] for parts in lines}


@pytest.mark.parametrize("follow", [True, False])
async def test_follow_images(make_web, tmp_path: Path, follow: bool):
    tw = await make_web([Site("img.test", "127.0.0.2", {
        "/": Page('<html><body><img src="/pic.png"><a href="/a.html">a</a></body></html>'),
        "/a.html": html(), "/pic.png": Page(PNG, content_type="image/png")})])
    crawler = await tw.crawl(f"startUrl {tw.url('img.test')}\noutput save\n"
                             + ("followImages\n" if follow else ""))
    paths = {h.path for h in tw.web.hits}
    assert ("/pic.png" in paths) is follow
    assert (tw.url("img.test", "/pic.png") in saved(tmp_path)) is follow
    assert crawler.stats.outcomes["success"] == (3 if follow else 2)


@pytest.mark.parametrize("any_type", [True, False])
async def test_any_type(make_web, tmp_path: Path, any_type: bool):
    tw = await make_web([Site("doc.test", "127.0.0.2", {
        "/": html("/doc.pdf"), "/doc.pdf": Page(b"%PDF-1.4 x", content_type="application/pdf")})])
    crawler = await tw.crawl(f"startUrl {tw.url('doc.test')}\noutput save\n"
                             + ("anyType\n" if any_type else ""))
    assert "/doc.pdf" in {h.path for h in tw.web.hits}  # its type is known only once asked
    index = saved(tmp_path)
    assert (tw.url("doc.test", "/doc.pdf") in index) is any_type
    assert crawler.stats.outcomes["badType"] == (0 if any_type else 1)
    if any_type:
        name = index[tw.url("doc.test", "/doc.pdf")][0]
        assert (tmp_path / "save" / "d00000" / name).read_bytes() == b"%PDF-1.4 x"


@pytest.mark.parametrize("level", [0, 1])
async def test_cgi_level(make_web, level: int):
    tw = await make_web([Site("cgi.test", "127.0.0.2", {
        "/": html("/q?x=1", "/k=v", "/star*", "/plain.html"),
        "/q?x=1": html(), "/k=v": html(), "/star*": html(), "/plain.html": html()})])
    crawler = await tw.crawl(f"startUrl {tw.url('cgi.test')}\ncgiLevel {level}")
    paths = {h.path for h in tw.web.hits}
    if level:
        assert paths == {"/robots.txt", "/", "/plain.html"}
        assert crawler.stats.outcomes["outOfScope"] == 3
    else:
        assert {"/q?x=1", "/k=v", "/star*", "/plain.html"} <= paths


@pytest.mark.parametrize("by_site", ["on", "off"])
async def test_depth_by_site(make_web, by_site: str):
    tw = await make_web([
        Site("a.test", "127.0.0.2", {"/": html()}),
        Site("b.test", "127.0.0.3", {"/": html("/b1.html"), "/b1.html": html()}),
    ])
    tw.web.sites["a.test"].pages["/"] = html(tw.url("b.test", "/"))
    crawler = await tw.crawl(f"depthInSite 1\nstartUrl {tw.url('a.test')}\ndepthBySite {by_site}")
    b_paths = {h.path for h in tw.web.hits_for("b.test")}
    # on: b.test's / starts with the full depth again, so its link is followed
    assert ("/b1.html" in b_paths) is (by_site == "on")
    assert "/" in b_paths
    assert crawler.stats.outcomes["tooDeep"] == (0 if by_site == "on" else 1)


async def test_cookies_are_kept_per_site_and_sent_back_bounded(make_web):
    tw = await make_web([
        Site("ck.test", "127.0.0.2", {
            "/": Page(html("/next.html").body, headers={"Set-Cookie": "session=abc; Path=/"}),
            "/next.html": Page(html("/sec.html").body,
                               headers={"Set-Cookie": "big=" + "x" * 5000}),  # over the bound
            "/sec.html": Page(html("/last.html").body, headers={"Set-Cookie": "sec=1; Secure"}),
            "/last.html": html()}),
        Site("other.test", "127.0.0.3", {"/": html()}),
    ])
    tw.web.sites["ck.test"].pages["/last.html"] = html(tw.url("other.test", "/"))
    await tw.crawl(f"startUrl {tw.url('ck.test')}\ncookies")
    sent = {h.path: h.headers.get("Cookie") for h in tw.web.hits_for("ck.test")}
    assert sent["/"] is None
    assert sent["/next.html"] == "session=abc"
    assert sent["/last.html"] == "session=abc"  # no over-size cookie, no Secure one over http
    assert [h.headers.get("Cookie") for h in tw.web.hits_for("other.test")] == [None, None]


async def test_without_cookies_no_cookie_is_sent(make_web):
    tw = await make_web([Site("ck.test", "127.0.0.2", {
        "/": Page(html("/next.html").body, headers={"Set-Cookie": "session=abc"}),
        "/next.html": html()})])
    await tw.crawl(f"startUrl {tw.url('ck.test')}")
    assert all("Cookie" not in h.headers for h in tw.web.hits)


async def test_url_tags_from_the_input_port_survive_redirects_into_the_outputs(
    make_web, tmp_path: Path
):
    tw = await make_web([Site("tag.test", "127.0.0.2", {
        "/": html("/child.html"), "/child.html": html(), "/r": redirect("/target.html"),
        "/target.html": html(), "/plain.html": html(), "/text.html": html()})])
    async with daemon(tw, "output save\noutput links\n") as (crawler, client, status, inp):
        body = {"urls": [{"url": tw.url("tag.test", "/r"), "tag": 42},
                         {"url": tw.url("tag.test", "/"), "tag": 7},
                         tw.url("tag.test", "/plain.html")]}
        async with client.post(inp + "/urls", json=body) as r:
            assert r.status == 202 and (await r.json())["accepted"] == 3
        text = f"{tw.url('tag.test', '/text.html')} -3\n"
        async with client.post(inp + "/urls", data=text,
                               headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 202
        await wait_idle(client, status)
    u = lambda path: tw.url("tag.test", path)  # noqa: E731
    index = saved(tmp_path)
    assert index[u("/target.html")][1:] == ["42"]  # kept across the redirect
    assert index[u("/")][1:] == ["7"]
    assert index[u("/child.html")][1:] == []  # a link is not the submitted URL: no tag
    assert index[u("/plain.html")][1:] == [] and index[u("/text.html")][1:] == ["-3"]
    links = {r["url"]: r for r in map(json.loads, (tmp_path / "save" / "links.jsonl")
                                      .read_text().splitlines())}
    assert links[u("/target.html")]["tag"] == 42 and links[u("/child.html")]["tag"] == 0
    assert {h.path for h in tw.web.hits} >= {"/r", "/target.html", "/child.html"}
