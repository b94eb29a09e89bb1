"""Surviving the hostile web: one crawl against every trap at once, with canaries that must all
be fetched meanwhile, under a memory bound; then smaller crawls for
redirects, spider traps, encodings, DNS failures and the network policy.

The traps are served by `hostile` (raw asyncio streams, one IP per trap so
politeness never serializes them); the canaries by the ordinary LocalWeb. Every assertion is on
what the servers saw and what the stats counted.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import hostile as h
import pytest
from conftest import WAIT_TIMEOUT, html, until
from conftest import TestWeb as _Web

from larbinpy.demo import DnsServer, LocalWeb, Page, Site, redirect
from larbinpy.net.body import BodyError, read_body
from larbinpy.stages import dns as dns_stage

MiB = 1024 * 1024
CAP = 8 * MiB  # maxPageSize of the hostile crawl (the link flood is 6 MB)
TIMEOUTS = "timeoutConnect 1\ntimeoutRead 1.5\ntimeoutTotal 6\nminRate 2000\n"
# Peak memory growth allowed during it, besides parsing the link flood (lexbor's tree of a
# 5.7 MB page takes ~25 bytes per byte, measured in the test): bodies held at once, under
# their caps. A single 200 MB body would exceed it.
RSS_GROWTH = 150 * MiB


def traps() -> dict[str, tuple[h.Trap, str]]:
    """Trap host name -> (trap, the outcome kind it must be counted under)."""
    return {
        "drip": (h.drip(0.3), "timeout"),  # 30 B/s: under minRate, cut after the grace period
        "firehose": (h.drip(0.05, b"x" * 4096), "timeout"),  # fast enough, endless: timeoutTotal
        "stallhead": (h.stall(after_head=True), "timeout"),  # head then nothing: timeoutRead
        "stall": (h.stall(), "timeout"),  # accepted, never answered: timeoutRead
        "huge": (h.endless(), "tooBig"),  # 200 MB text/html, no Content-Length
        "hugelen": (h.endless(length=True), "tooBig"),  # 200 MB announced: not read at all
        "binary": (h.endless(total=20 * MiB, binary=True), "tooBig"),  # binary as text/html
        "smallbinary": (h.endless(total=100_000, binary=True, length=True), "success"),
        "bombgz": (h.bomb("gzip"), "tooBig"),
        "bombdeflate": (h.bomb("deflate"), "tooBig"),
        "bombbr": (h.bomb("br"), "tooBig"),
        "badstatus": (h.raw(b"HTTP/1.1 OOPS\r\n\r\n<html>"), "badHttp"),
        "truncated": (h.truncated(), "earlyStop"),
        "badchunk": (h.bad_chunked(), "badHttp"),
        "reset": (h.reset_mid_body(), "earlyStop"),
        "longheader": (h.long_header(), "badHttp"),
        "manyheaders": (h.many_headers(), "badHttp"),
    }


def canary_sites(n: int = 12) -> list[Site]:
    """Two normal sites, each a chain of n pages (so they are crawled throughout)."""
    sites = []
    for host, ip in (("canary1.test", "127.0.0.2"), ("canary2.test", "127.0.0.3")):
        pages = {"/": html("/c0.html")}
        pages.update({f"/c{i}.html": html(f"/c{i + 1}.html") for i in range(n - 1)})
        pages[f"/c{n - 1}.html"] = html()
        sites.append(Site(host, ip, pages))
    return sites


def flood(n: int = 200_000) -> Page:
    """A page with n distinct links (to a forbidden extension, so none is fetched)."""
    return Page("<html><body>" + "".join(f'<a href="/f/{i}.zip">.</a>' for i in range(n)))


def flood_parse_cost() -> int:
    """Peak memory growth of extracting the links of the flood page, measured in a fresh
    process (in this one, the freed memory would then hide part of the crawl's growth)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from test_hostile import flood, peak_rss, peak_rss_reset\n"
        "from larbinpy.links.extract import extract_links\n"
        "from larbinpy.links.urls import Normalizer\n"
        "body = flood().body.encode(); peak_rss_reset(); before = peak_rss()\n"
        "extract_links(body, 'http://flood.test/', Normalizer())\n"
        "print(peak_rss() - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout)


def peak_rss_reset() -> None:
    """Reset the kernel's peak-RSS mark of this process (Linux)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss() -> int:
    """Peak RSS of this process since the last reset, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


class HostileWeb(_Web):
    """Canaries on LocalWeb, traps on the hostile server, one DNS server for both."""

    hostile: h.HostileServer


@pytest.fixture
async def hostile_web(tmp_path: Path) -> AsyncIterator[HostileWeb]:
    """Canaries, traps, a stalled listener and a silent DNS name; all stopped after."""
    sites = [h.HostileSite(f"{name}.trap", f"127.0.3.{i + 1}", trap)
             for i, (name, (trap, _)) in enumerate(traps().items())]
    server = h.HostileServer(sites, stalled_ips=["127.0.3.200"])
    for enc in ("gzip", "deflate", "br"):  # built once, before the clock starts
        await asyncio.to_thread(h.bomb_bytes, enc, 256 * MiB)
    web = LocalWeb(canary_sites())
    web.sites["flood.test"] = Site("flood.test", "127.0.0.4", {"/": flood()})
    await web.start()
    await server.start()
    records = {**web.dns_records, **server.dns_records, "stalled.trap": ["127.0.3.200"],
               "silent.trap": ["127.0.3.201"]}
    dns = DnsServer(records, silent={"silent.trap"})
    await dns.start()
    tw = HostileWeb(web, dns, tmp_path)
    tw.hostile = server
    try:
        yield tw
    finally:
        await server.stop()
        await web.stop()
        await dns.stop()


async def test_every_trap_is_cut_off_counted_and_the_canaries_go_on(hostile_web: HostileWeb,
                                                                    monkeypatch):
    monkeypatch.setattr(dns_stage, "RETRY_AFTER", (0.1,))  # the silent name: one more round
    tw, srv = hostile_web, hostile_web.hostile
    port = tw.web.port
    trap_urls = [srv.url(f"{name}.trap", "/") for name in traps()]
    extra = [srv.url("stalled.trap", "/"), srv.url("silent.trap", "/"),
             f"http://nxdomain.trap:{port}/", tw.url("flood.test", "/")]
    tw.web.sites["canary1.test"].pages["/"] = html(
        "/c0.html", tw.url("canary2.test", "/"), *trap_urls, *extra)
    parse_cost = flood_parse_cost()
    peak_rss_reset()
    before = peak_rss()
    crawler = await tw.crawl(
        f"depthInSite 30\nstartUrl {tw.url('canary1.test')}\n{TIMEOUTS}maxPageSize {CAP}\n"
        "robots off\npagesConnexions 40\nforbiddenExtensions .zip end\n")
    growth = peak_rss() - before
    out = crawler.stats.outcomes
    await until(lambda: all(x.end for x in srv.hits), "the traps' server seeing every hang-up")
    firehose = srv.hits_for("firehose.trap")[0]  # endless and fast: only timeoutTotal ends it

    # every canary fetched while the firehose still ran: the traps never held them up
    canaries = [x for x in tw.web.hits if x.host.startswith("canary")]
    assert len(canaries) == 2 * 13
    assert max(x.end for x in canaries) < firehose.end, "canaries were held up by the traps"
    # each trap was cut off and counted; the kinds add up exactly
    expected = Counter(kind for _, kind in traps().values())
    expected["timeout"] += 1  # the stalled accept (timeoutConnect)
    expected["success"] += 2 * 13 + 1  # canaries and the link flood
    for kind, n in expected.items():
        assert out[kind] == n, (kind, out[kind], n)
    assert out["noDNS"] == 2  # silent DNS server and NXDOMAIN
    for name in traps():
        assert len(srv.hits_for(f"{name}.trap")) == 1, name
    # cut before the firehose was: timeoutRead (1.5 s) and minRate (after its 3 s of grace),
    # not timeoutTotal (6 s), ended these
    for name in ("stall", "stallhead", "drip"):
        hit = srv.hits_for(f"{name}.trap")[0]
        assert hit.end - hit.start < firehose.end - firehose.start, name
    assert srv.hits_for("hugelen.trap")[0].sent < 20 * MiB  # refused on its Content-Length
    assert srv.hits_for("huge.trap")[0].sent < 60 * MiB  # read up to the cap, then hung up
    # the link flood: 10,000 links kept (all refused by extension), the rest dropped, counted
    assert crawler.stats.links_dropped == 190_000
    assert out["outOfScope"] == 10_000
    assert growth < parse_cost + RSS_GROWTH, (
        f"peak RSS grew by {growth / MiB:.0f} MiB (parsing the flood: {parse_cost / MiB:.0f})")


class FakeContent:
    """A response body arriving in chunks, remembering how much was consumed."""

    def __init__(self, data: bytes, chunk: int = 4096) -> None:
        self.data, self.chunk, self.consumed = data, chunk, 0

    async def iter_any(self) -> AsyncIterator[bytes]:
        """Yield the body chunk by chunk (slowly, when asked)."""
        for i in range(0, len(self.data), self.chunk):
            self.consumed = i + self.chunk
            yield self.data[i : i + self.chunk]


class FakeResponse:
    """Just what read_body looks at."""

    def __init__(self, data: bytes, encoding: str) -> None:
        self.headers = {"Content-Encoding": encoding}
        self.content_length = None
        self.content = FakeContent(data)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
async def test_a_bomb_is_not_inflated_past_the_cap(encoding: str):
    data = h.bomb_bytes(encoding, 256 * MiB)
    resp = FakeResponse(data, encoding)
    with pytest.raises(BodyError) as err:
        await read_body(resp, MiB)  # type: ignore[arg-type]
    assert err.value.kind == "tooBig"
    # 1 MiB of output needs about 1/256 of the compressed stream: the rest is never touched
    assert resp.content.consumed < len(data) // 8


async def test_min_rate_cuts_a_drip_after_the_grace_period(monkeypatch):
    from larbinpy.net import body

    monkeypatch.setattr(body, "MIN_RATE_GRACE", 0.2)

    class Drip(FakeContent):
        async def iter_any(self) -> AsyncIterator[bytes]:
            while True:
                await asyncio.sleep(0.05)
                yield b"x"

    resp = FakeResponse(b"", "identity")
    resp.content = Drip(b"")
    start = time.monotonic()
    reading = read_body(resp, MiB, min_rate=1000)  # type: ignore[arg-type]
    with pytest.raises(BodyError) as err:  # the drip is endless: only minRate can end it
        await asyncio.wait_for(reading, WAIT_TIMEOUT)
    assert err.value.kind == "timeout"
    assert time.monotonic() - start >= 0.2  # not before the grace period


def test_corrupt_deflate_and_brotli_are_bad_encoding():
    for enc, data in (("deflate", b"\x78\x9cnot deflate"), ("br", b"\xffnot brotli at all")):
        resp = FakeResponse(data, enc)
        with pytest.raises(BodyError) as err:
            asyncio.run(read_body(resp, MiB))  # type: ignore[arg-type]
        assert err.value.kind == "badEncoding", enc


async def test_redirects_are_bounded_scoped_and_deduplicated(make_web):
    pages = {
        "/": html("/chain0", "/loop1", "/self", "/ftp", "/mailto", "/bad", "/none",
                  "/to-zip", "/to-seen", "/seen.html", "/to-private"),
        **{f"/chain{i}": redirect(f"/chain{i + 1}") for i in range(8)},
        "/chain8": html(),
        "/loop1": redirect("/loop2"), "/loop2": redirect("/loop1"),
        "/self": redirect("/self"),
        "/ftp": redirect("ftp://files.example/x"),
        "/mailto": redirect("mailto:someone@example.org"),
        "/bad": redirect("http://[::1"),
        "/none": Page(b"", status=302),
        "/to-zip": redirect("/file.zip"),
        "/to-seen": redirect("/seen.html"),
        "/seen.html": html(),
        "/to-private": redirect("http://10.1.2.3/"),
    }
    tw = await make_web([Site("r.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(
        f"startUrl {tw.url('r.test')}\nmaxRedirects 5\nforbiddenExtensions .zip end")
    out, paths = crawler.stats.outcomes, Counter(x.path for x in tw.web.hits)
    assert paths["/chain5"] == 1 and paths["/chain6"] == 0  # hop 6 refused
    assert out["tooManyRedirects"] == 1
    assert paths["/loop1"] == paths["/loop2"] == paths["/self"] == 1  # loops end at the seen-set
    assert paths["/seen.html"] == 1 and "/file.zip" not in paths
    assert out["badHttp"] == 2  # unparsable Location, 302 without one
    # ftp and mailto targets and the .zip are refused like links; 10.1.2.3 is a private address
    assert out["outOfScope"] == 3
    assert out["deniedNetwork"] == 1
    assert all(n == 1 for n in paths.values()), paths


async def test_spider_traps_are_refused_and_counted(make_web):
    long_link = "/long/" + "x" * 3000
    pages = {
        "/": html("/a/a/a/a/a/a", "/b/c/b/c/b/c/b/c/", "/cal/2025/01/", long_link,
                  "/s?sid=1", "/s?sid=2", "/s?PHPSESSID=3&utm_source=x", "/t?token=1",
                  "/t?token=2", "/p1.html", "/p2.html", "/p3.html"),
        # an endless calendar: every month links to the next one
        **{f"/cal/{y}/{m:02d}/": html(f"/cal/{y + m // 12}/{m % 12 + 1:02d}/")
           for y in range(2025, 2300) for m in range(1, 13)},
        "/s": html(), "/t": html(), "/p1.html": html(), "/p2.html": html(), "/p3.html": html(),
    }
    tw = await make_web([Site("trap.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(
        f"depthInSite 400\nstartUrl {tw.url('trap.test')}\nstripParams sid phpsessid utm_* "
        "token end\nmaxPagesPerSite 200")
    out, paths = crawler.stats.outcomes, Counter(x.path for x in tw.web.hits)
    assert not any(p.startswith("/a/a/a/a") or p.startswith("/b/c/b/c/b/c/b") for p in paths)
    assert long_link not in paths
    cal = [p for p in paths if p.startswith("/cal/")]
    assert 12 < len(cal) <= 12 * 8  # stopped within a few years, not 275 of them
    assert paths["/s"] == 1 and paths["/t"] == 1  # session ids stripped: one page each
    assert out["trap"] >= 4  # repeated segments (2), the long URL, the runaway calendar
    assert sum(paths.values()) <= 200 + 1  # maxPagesPerSite (plus robots.txt)


async def test_charsets_from_header_meta_bom_or_detection_nul_bytes_and_junk(make_web):
    cafe = "caf\u00e9"
    pages = {
        "/": html("/h.html", "/m.html", "/d.html", "/u.html", "/nul.html", "/junk.html",
                  "/bom.html"),
        # header says latin-1, the page's meta lies: the header wins
        "/h.html": Page(b'<meta charset="utf-8"><a href="/h-caf\xe9">x</a>',
                        content_type="text/html; charset=iso-8859-1"),
        "/m.html": Page(b'<meta charset="windows-1252"><a href="/m-caf\xe9">x</a>'),
        "/d.html": Page(b'<a href="/d-caf\xe9">x</a>'),  # no declaration: detected
        "/u.html": Page('<a href="/u-café">x</a>'.encode()),  # no declaration, UTF-8
        "/nul.html": Page(b'<html>\x00\x00<a href="/after-nul">x</a>\x00'),
        # an unknown charset and bytes that are no text: read as windows-1252, the link found
        "/junk.html": Page(b"<a href='/after-junk'>\x80\x81\xff\xfe\x00\xd8</a>",
                           content_type="text/html; charset=no-such-charset"),
        # the same junk behind a UTF-16 (little-endian) BOM, which a browser obeys whatever
        # the header says: two bytes to a character, no "<a" left in it, so no link
        "/bom.html": Page(b"\xff\xfe\x00\xd8<a href='/after-bom'>\x80\x81</a>",
                          content_type="text/html; charset=no-such-charset"),
    }
    for prefix in ("h", "m", "d", "u"):
        pages[f"/{prefix}-caf%C3%A9"] = html()
    pages["/after-nul"] = html()
    pages["/after-junk"] = html()
    pages["/after-bom"] = html()
    tw = await make_web([Site("enc.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(f"startUrl {tw.url('enc.test')}")
    paths = {x.path for x in tw.web.hits}
    for prefix in ("h", "m", "d", "u"):
        assert f"/{prefix}-caf%C3%A9" in paths, (prefix, cafe)
    assert "/after-nul" in paths and "/after-junk" in paths
    assert "/after-bom" not in paths
    # every page fetched is a success, the junk ones too: / and its 7, 4 cafés, 2 after
    assert crawler.stats.outcomes["success"] == 8 + 4 + 2, crawler.stats.outcomes


async def test_dns_failures_are_cached_negatively_and_other_hosts_go_on(tmp_path, monkeypatch):
    monkeypatch.setattr(dns_stage, "RETRY_AFTER", (0.2,))  # one more round for a silent host
    web = LocalWeb([Site("ok.test", "127.0.0.2", {"/": html("/a.html"), "/a.html": html()})])
    await web.start()
    dns = DnsServer(web.dns_records, silent={"mute.test"})
    await dns.start()
    try:
        tw = _Web(web, dns, tmp_path)
        links = [f"http://{host}:{web.port}/{p}" for host in ("mute.test", "gone.test")
                 for p in ("", "x.html", "y.html")]
        web.sites["ok.test"].pages["/"] = html("/a.html", *links)
        crawler = await tw.crawl(f"startUrl {tw.url('ok.test')}\ntimeoutConnect 0.5")
        assert {x.path for x in web.hits} == {"/robots.txt", "/", "/a.html"}
        assert crawler.stats.outcomes["noDNS"] == 6  # every URL of both hosts, counted
        # bounded queries per failed host: no AAAA after a timeout, no query per URL; a host
        # no server answered is asked once more (RETRY_AFTER), one that does not exist is not
        per_host = Counter(name for (name, _qtype) in dns.queries)
        assert per_host["gone.test"] <= 2 and 1 <= per_host["mute.test"] <= 4
    finally:
        await web.stop()
        await dns.stop()


async def test_a_host_whose_dns_answers_only_the_second_time_is_crawled(make_web, monkeypatch):
    """A DNS answer lost (a datagram dropped, a server overloaded) is not "no such host": the
    host is asked again after a pause, its URLs waiting, and then crawled."""
    monkeypatch.setattr(dns_stage, "RETRY_AFTER", (0.5, 0.5))
    tw = await make_web([Site("late.test", "127.0.0.2", {"/": html("/a.html"),
                                                          "/a.html": html()})])
    tw.dns.silent.add("late.test")

    async def answer_later() -> None:
        # every try of the first round reached the server while it was silent: that round
        # has no answer whatever comes after
        await until(lambda: tw.dns.queries[("late.test", "A")] >= dns_stage.QUERY_TRIES,
                    "late.test asked for, every try")
        tw.dns.silent.clear()

    helper = asyncio.ensure_future(answer_later())
    crawler = await tw.crawl(f"startUrl {tw.url('late.test')}\ntimeoutConnect 0.5")
    await helper
    assert {x.path for x in tw.web.hits} == {"/robots.txt", "/", "/a.html"}
    assert crawler.stats.outcomes.get("noDNS", 0) == 0


async def test_no_way_in_private_addresses_after_redirects_and_dns(make_web):
    inside = Site("inside.test", "127.0.0.3", {"/": html(), "/robots.txt": Page("")})
    pages = {
        "/": html("/to-inside", "/to-literal", "/to-inside-name"),
        "/to-inside": redirect("http://127.0.0.3/"),
        "/to-literal": redirect("http://[::1]/"),
        "/robots.txt": Page("", content_type="text/plain"),
    }
    tw = await make_web([Site("out.test", "127.0.0.2", pages), inside])
    pages["/to-inside-name"] = redirect(tw.url("inside.test", "/"))
    text = tw.config_text(f"exitAtEnd\nstartUrl {tw.url('out.test')}").replace(
        "allowNetworks 127.0.0.0/8 end", "allowNetworks 127.0.0.2/32 end")
    from larbinpy.config import parse_config
    from larbinpy.crawler import Crawler

    crawler = Crawler(parse_config(text), scratch=True)
    await asyncio.wait_for(crawler.run(), 30)
    assert tw.web.hits_for("inside.test") == []
    assert {x.ip for x in tw.web.hits} == {"127.0.0.2"}
    assert crawler.stats.outcomes["deniedNetwork"] == 3


async def test_navigation_links_charset_names_and_huge_links(make_web):
    long_link = "/" + "y" * 100_000
    pages = {
        "/": Page('<html><head><link rel="next" href="/next.html">'
                  '<link rel="stylesheet" href="/style.css"></head><body>'
                  f'<a href="mailtoISO-8859-1.html">charset</a><a href="{long_link}">long</a>'
                  "</body></html>"),
        "/next.html": html(), "/mailtoISO-8859-1.html": html(), "/style.css": html(),
    }
    tw = await make_web([Site("nav.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(f"startUrl {tw.url('nav.test')}\nrobots off")
    paths = Counter(x.path for x in tw.web.hits)
    assert paths["/next.html"] == 1  # <link rel=next>, as wget follows it
    assert paths["/mailtoISO-8859-1.html"] == 1  # "8859-1" is no calendar date
    assert "/style.css" not in paths
    assert long_link not in paths
    assert crawler.stats.outcomes["trap"] == 1  # the 100,000-character link, counted


@pytest.fixture
async def framing_web(tmp_path: Path) -> AsyncIterator[HostileWeb]:
    """Traps that send endless chunk framing, and a control cut only by timeoutTotal."""
    sites = [h.HostileSite("ext.trap", "127.0.4.1", h.chunk_extension()),
             h.HostileSite("zeros.trap", "127.0.4.2", h.chunk_size_zeros()),
             h.HostileSite("slowext.trap", "127.0.4.3", h.chunk_extension(every=0.05)),
             h.HostileSite("control.trap", "127.0.4.4", h.drip(0.05, b"x" * 4096))]
    server = h.HostileServer(sites)
    await server.start()
    dns = DnsServer(server.dns_records)
    await dns.start()
    tw = HostileWeb(LocalWeb([]), dns, tmp_path)
    tw.hostile = server
    try:
        yield tw
    finally:
        await server.stop()
        await dns.stop()


async def test_chunk_framing_counts_against_the_size_budget_and_min_rate(framing_web, monkeypatch):
    from larbinpy.net import body

    monkeypatch.setattr(body, "MIN_RATE_GRACE", 0.5)
    tw, srv = framing_web, framing_web.hostile
    seeds = "".join(f"startUrl {srv.url(f'{n}.trap')}\n" for n in ("ext", "zeros", "slowext",
                                                                   "control"))
    crawler = await tw.crawl(f"{seeds}robots off\nmaxPageSize {MiB}\ntimeoutRead 30\n"
                             "timeoutTotal 4\nminRate 2000\n")
    await until(lambda: all(x.end for x in srv.hits), "the traps' server seeing every hang-up")
    out = crawler.stats.outcomes
    # endless framing at full speed: refused once it outgrew the page's budget, as tooBig, not
    # read until timeoutTotal (the kernel's socket buffers hold a few MiB more)
    assert out["tooBig"] == 2
    for name in ("ext", "zeros"):
        assert srv.hits_for(f"{name}.trap")[0].sent < 16 * MiB, name
    # framing dripped at 20 bytes/s: under minRate, measured on every byte, not on content
    assert out["timeout"] == 2
    slow, control = srv.hits_for("slowext.trap")[0], srv.hits_for("control.trap")[0]
    assert slow.end < control.end, "the framing drip ran until timeoutTotal"


class TrapLookup:
    """The DNS stage as aiohttp's resolver asks it: every host is on one loopback address."""

    def __init__(self, addr: str) -> None:
        import ipaddress

        from larbinpy.net.policy import NetworkPolicy

        self.addr = addr
        self.policy = NetworkPolicy([ipaddress.ip_network("127.0.0.0/8")])

    async def lookup(self, host: str) -> list[str]:
        """The one address."""
        return [self.addr]


async def test_aiohttp_path_counts_chunk_framing_against_the_budget(tmp_path: Path):
    from larbinpy.config import parse_config
    from larbinpy.net.aio import make_session
    from larbinpy.net.fetcher import keepalive_seconds, request_headers

    server = h.HostileServer([h.HostileSite("ext.trap", "127.0.4.5", h.chunk_extension()),
                              h.HostileSite("zeros.trap", "127.0.4.5", h.chunk_size_zeros())])
    await server.start()
    cfg = parse_config(f"stateDir {tmp_path}/state\ntimeoutRead 30\ntimeoutTotal 30\n")
    # HTTPS and proxies go this way
    session = make_session(cfg, TrapLookup("127.0.4.5"), request_headers(cfg),
                           keepalive_seconds(cfg))
    try:
        for name in ("ext", "zeros"):
            with pytest.raises(BodyError) as err:
                async with session.get(server.url(f"{name}.trap")) as resp:
                    await read_body(resp, MiB)
            assert err.value.kind == "tooBig", name
            await until(lambda: server.hits[-1].end, "the trap seeing the hang-up")
            assert server.hits[-1].sent < 16 * MiB, name  # not read until timeoutTotal
    finally:
        await session.close()
        await server.stop()
