"""pywb replays every capture of a recrawled page: full responses and both revisit profiles."""

from __future__ import annotations

import base64
import hashlib
import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from replay import Pywb, pywb_bin
from test_warc import check
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

pytestmark = pytest.mark.skipif(pywb_bin() is None,
                                reason="pywb is not installed: make .venv-pywb")

PROFILE = "http://netpreserve.org/warc/1.1/revisit/"
URL = "http://replay.test/page.html"
URL_304 = "http://replay.test/kept-304.html"


def sha1(body: bytes) -> str:
    """A WARC payload digest."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


def date(day: int) -> str:
    """A WARC-Date, one day a capture."""
    return datetime(2026, 11, day, 12, 0, 0, tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_warc(path: Path, url: str, not_modified_headers: bool = False) -> list[tuple[str, bytes]]:
    """v1 on the 1st, v2 on the 2nd, a 304 on the 3rd and an unchanged 200 on the 4th (both
    revisits of the 2nd), v3 on the 5th: [(timestamp, body of the capture)]. The 304's revisit
    has an empty block, or with `not_modified_headers` the 304's own HTTP headers."""
    v1, v2, v3 = (f"<html><body>version {i}</body></html>".encode() for i in (1, 2, 3))
    with open(path, "wb") as f:
        writer = WARCWriter(f, gzip=True, warc_version="1.1")

        def response(day: int, body: bytes) -> None:
            headers = StatusAndHeaders("200 OK", [("Content-Type", "text/html"),
                                                  ("Content-Length", str(len(body)))],
                                       protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(
                url, "response", payload=io.BytesIO(body), http_headers=headers,
                warc_headers_dict={"WARC-Date": date(day)}))

        def revisit(day: int, profile: str, status: str | None, original: int,
                    body: bytes) -> None:
            headers = None if status is None else StatusAndHeaders(
                status, [("Content-Type", "text/html")], protocol="HTTP/1.1")
            record = writer.create_revisit_record(url, sha1(body), url, date(original),
                                                  http_headers=headers,
                                                  warc_headers_dict={"WARC-Date": date(day)})
            record.rec_headers.replace_header("WARC-Profile", PROFILE + profile)
            writer.write_record(record)

        response(1, v1)
        response(2, v2)
        revisit(3, "server-not-modified", "304 Not Modified" if not_modified_headers else None,
                2, v2)
        revisit(4, "identical-payload-digest", "200 OK", 2, v2)
        response(5, v3)
    return [(f"202611{d:02}120000", body) for d, body in
            ((1, v1), (2, v2), (3, v2), (4, v2), (5, v3))]


def test_pywb_replays_each_capture_of_hand_made_warcs(tmp_path) -> None:
    """Both revisit profiles, each naming its original by WARC-Refers-To-Target-URI and -Date
    and the payload digest: every capture replays with its own body. pywb (since 2.7, its pull
    request 751) replays a revisit's own HTTP headers over the original's payload, so a
    server-not-modified revisit that keeps the 304's headers replays as a 304 with no body:
    the capture's page is there only when that block is left empty."""
    empty, with_304 = tmp_path / "empty.warc.gz", tmp_path / "with304.warc.gz"
    expected = write_warc(empty, URL)
    write_warc(with_304, URL_304, not_modified_headers=True)
    check([empty, with_304])  # `warcio check`, every digest verified
    work = tmp_path / "pywb"
    work.mkdir()
    with Pywb([empty, with_304], work) as pywb:
        got, got_304 = pywb.replay_all(URL), pywb.replay_all(URL_304)
    assert [c.timestamp for c, _, _ in got] == [ts for ts, _ in expected]
    assert [c.mime == "warc/revisit" for c, _, _ in got] == [False, False, True, True, False]
    for (capture, status, body), (_, want) in zip(got, expected, strict=True):
        assert (status, body) == (200, want), capture
    assert [(status, body == want) for (_, status, body), (_, want) in
            zip(got_304, expected, strict=True)] == [(200, True), (200, True), (304, False),
                                                     (200, True), (200, True)]


def has_recrawl() -> bool:
    """Whether this larbinpy has the recrawl keys."""
    from larbinpy.config import KEYS

    return "recrawl" in KEYS


@pytest.mark.slow
@pytest.mark.skipif(not has_recrawl(), reason="needs the recrawl keys")
async def test_pywb_replays_every_capture_of_a_recrawled_page(tmp_path) -> None:
    """The crawler with `recrawl on` and `output warc` on a real loopback web: a page behind
    honest ETags is fetched, changed, fetched, found not modified (a 304), changed and fetched
    again; a page without validators is fetched, found unchanged (same digest), changed and
    fetched. `warcio check` passes and pywb replays every capture with the body it had."""
    import asyncio
    import time

    from conftest import until

    from larbinpy.bench.changing import ChangingWeb, version_of
    from larbinpy.config import parse_config
    from larbinpy.crawler import Crawler
    from larbinpy.demo import DnsServer

    web = ChangingWeb(("etag", "none"), hosts_per_kind=1, pages=2, fixed_rate=0.0)
    await web.start()
    dns = DnsServer(web.dns_records)
    await dns.start()
    etag, plain = "etag-0.changing.test", "none-0.changing.test"
    conf = (f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\n"
            f"dnsServers {dns.address}\nallowNetworks 127.0.0.0/8 end\nhttpPort 0\n"
            f"inputPort 0\nwaitDuration 0\noutput warc\nrecrawl on\nrecrawlMin 1.2\n"
            f"recrawlMax 1.5\nstartUrl {web.url(etag, '/p1.html')}\n"
            f"startUrl {web.url(plain, '/p1.html')}\n")
    crawler = Crawler(parse_config(conf), scratch=True)
    task = asyncio.ensure_future(crawler.run())

    def answers(host: str) -> list[tuple[int, int]]:
        return [(a.status, a.version) for a in web.answers
                if a.host == host and a.path == "/p1.html"]

    async def step(host: str, n: int, then_change: bool) -> None:
        await until(lambda: len(answers(host)) >= n, f"fetch {n} of {host}", timeout=30)
        if then_change:
            web.pages[(host, "/p1.html")].bump(time.time())

    try:
        # the etag page: 200 v0, change, 200 v1, 304, change, 200 v2; the plain one: 200 v0,
        # 200 v0 (unchanged), change, 200 v1
        await step(etag, 1, True)
        await step(plain, 1, False)
        await step(etag, 2, False)
        await step(plain, 2, True)
        await step(etag, 3, True)
        await step(plain, 3, False)
        await step(etag, 4, False)
    finally:
        crawler.request_stop()
        code = await asyncio.wait_for(task, 30)
        await dns.stop()
        await web.stop()
    assert code == 0
    assert answers(etag)[:4] == [(200, 0), (200, 1), (304, 1), (200, 2)]
    assert answers(plain)[:3] == [(200, 0), (200, 0), (200, 1)]
    warcs = sorted((tmp_path / "save").glob("*.warc.gz"))
    assert warcs
    check(warcs)
    work = tmp_path / "pywb"
    work.mkdir()
    with Pywb(warcs, work) as pywb:
        for host, want in ((etag, answers(etag)), (plain, answers(plain))):
            got = pywb.replay_all(web.url(host, "/p1.html"))
            copies = []  # the version the crawler held after each fetch
            for status, v in want:
                copies.append(v if status == 200 else copies[-1])
            # a fetch in flight at the stop may be missing from the WARC, no other
            assert len(want) - 1 <= len(got) <= len(want), (host, want, got)
            assert [(status, version_of(body)) for _, status, body in got] == \
                [(200, v) for v in copies[:len(got)]], host
