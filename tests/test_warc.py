"""`output warc`: crawls of the loopback web archived, checked with warcio's own tools."""

from __future__ import annotations

import asyncio
import errno
import gc
import gzip
import json
import re
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

from conftest import html
from warcio.archiveiterator import ArchiveIterator

from larbinpy.config import parse_config
from larbinpy.demo import Page as WebPage
from larbinpy.demo import Site, redirect
from larbinpy.outputs import Outputs
from larbinpy.outputs.warc import WarcOutput, response_block
from larbinpy.records import Job, Page
from larbinpy.stats import Stats

BIN = Path(sys.executable).parent
NAME = re.compile(r"^larbinpy-\d{14}-\d{5}\.warc\.gz$")
ZIPPED = b"<html><body>" + b"compressible " * 200 + b"</body></html>"


def warcio(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the warcio command line tool."""
    return subprocess.run([str(BIN / "warcio"), *args], capture_output=True, text=True,
                          timeout=30)


def check(files: list[Path]) -> None:
    """`warcio check` passes, with every digest verified, and `warcio index` reads them."""
    result = warcio("check", "-v", *map(str, files))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "digest failed" not in result.stdout
    index = warcio("index", *map(str, files))
    assert index.returncode == 0, index.stderr
    assert index.stdout.count("\n") >= len(files)


def records(files: list[Path]) -> list[dict]:
    """Every record of these files: type, headers, raw payload and decoded content."""
    out = []
    for path in files:
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f):
                item = {"type": rec.rec_type, "warc": dict(rec.rec_headers.headers),
                        "status": rec.http_headers.get_statuscode() if rec.http_headers else None,
                        "http": rec.http_headers, "file": path.name}
                item["raw"] = rec.raw_stream.read()
                out.append(item)
    return out


def web() -> list[Site]:
    """One host: HTML, a gzip-encoded page, a PDF, a 404 link and a redirect."""
    return [Site("w.test", "127.0.0.2", {
        "/": html("/a.html", "/zipped.html", "/doc.pdf", "/missing.html", "/moved"),
        "/a.html": html("/"),
        "/zipped.html": WebPage(gzip.compress(ZIPPED), headers={"Content-Encoding": "gzip"}),
        "/doc.pdf": WebPage(b"%PDF-1.4 not really", content_type="application/pdf"),
        "/moved": redirect("/a.html"),
        "/robots.txt": WebPage("User-agent: *\nDisallow:\n", content_type="text/plain"),
    })]


def warc_files(tmp: Path) -> list[Path]:
    """Finished WARC files in saveDir, oldest first."""
    return sorted((tmp / "save").glob("*.warc.gz"))


async def test_every_fetched_page_is_in_the_warc_with_its_exact_bytes(make_web):
    tw = await make_web(web())
    await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\noutput links\n"
                   "contentTypes text/html application/pdf end\nFrom crawler@example.org\n")
    files = warc_files(tw.tmp)
    assert files and all(NAME.match(f.name) for f in files)
    assert not list((tw.tmp / "save").glob("*.open"))  # renamed when closed
    check(files)
    recs = records(files)
    assert recs[0]["type"] == "warcinfo"
    assert b"operator: crawler@example.org" in recs[0]["raw"]
    assert b"config-digest: sha256:" in recs[0]["raw"]
    responses = {r["warc"]["WARC-Target-URI"]: r for r in recs if r["type"] == "response"}
    requests = {r["warc"]["WARC-Target-URI"]: r for r in recs if r["type"] == "request"}
    served = set(tw.pages_fetched())
    assert served <= set(responses), served - set(responses)  # every status, 404 and 301 too
    site = tw.web.sites["w.test"]
    for url in served:
        resp, req = responses[url], requests[url]
        path = url.split("/", 3)[3]
        page = site.pages.get("/" + path)
        if page is not None and page.status == 200:
            body = page.body.encode() if isinstance(page.body, str) else page.body
            assert resp["raw"] == body, url  # as sent: gzip stays gzip
        assert resp["warc"]["WARC-IP-Address"] == "127.0.0.2"
        assert resp["warc"]["WARC-Payload-Digest"].startswith("sha1:")
        assert resp["warc"]["WARC-Block-Digest"].startswith("sha1:")
        assert req["warc"]["WARC-Concurrent-To"] == resp["warc"]["WARC-Record-ID"]
        assert req["http"].protocol == "GET"
    zipped = responses[tw.url("w.test", "/zipped.html")]
    assert zipped["http"].get_header("Content-Encoding") == "gzip"
    assert gzip.decompress(zipped["raw"]) == ZIPPED
    assert responses[tw.url("w.test", "/missing.html")]["status"] == "404"
    assert responses[tw.url("w.test", "/moved")]["status"] == "301"
    # the other output of the same crawl got the 2xx pages only
    lines = (tw.tmp / "save" / "links.jsonl").read_text().splitlines()
    assert {json.loads(line)["status"] for line in lines} == {200}


async def test_files_rotate_at_warc_max_size_each_with_its_warcinfo(make_web):
    tw = await make_web(web())
    await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\nwarcMaxSize 1\n")
    files = warc_files(tw.tmp)
    assert len(files) >= 5  # one exchange a file: 5 pages (the PDF, badType, is not read)
    check(files)
    serials = [int(f.name[-13:-8]) for f in files]
    assert serials == sorted(serials) and len(set(serials)) == len(files)
    for f in files:
        recs = records([f])
        assert recs[0]["type"] == "warcinfo"
        assert recs[0]["warc"]["WARC-Filename"] == f.name
        assert [r["type"] for r in recs[1:]] == ["response", "request"]


def hand_page(url: str, body: bytes, status: int = 200, ctype: str = "text/html") -> Page:
    """A page as the reader makes it, for direct calls."""
    return Page(
        job=Job(url, 3), url=url, status=status, headers={"Content-Type": ctype}, body=body,
        content_type=ctype, ip="127.0.0.9", fetched_at=time.time(), elapsed=0.01,
        raw_body=body, raw_headers=((b"Content-Type", ctype.encode()),), reason="OK",
        request_headers={"User-Agent": "larbinpy"},
    )


def outputs_for(tmp: Path, extra: str = "") -> Outputs:
    """Outputs built from a configuration (warc plus `extra`)."""
    cfg = parse_config(f"saveDir {tmp}/save\noutput warc\n{extra}")
    return Outputs(cfg, Stats())


def test_a_file_is_open_while_written_and_renamed_when_closed(tmp_path):
    out = WarcOutput(str(tmp_path), prefix="t")
    out.write(hand_page("http://x.test/", b"hello"))
    names = sorted(p.name for p in tmp_path.iterdir())
    # the WARC file and its index's lines, both unfinished
    assert len(names) == 2 and names[0].endswith(".cdxj.open")
    assert names[1].endswith(".warc.gz.open")
    out.close()
    final = sorted(p.name for p in tmp_path.iterdir())
    warc = names[1].removesuffix(".open")
    assert final == [warc.removesuffix(".warc.gz") + ".cdxj", warc]
    check([tmp_path / warc])


def test_a_closed_file_leaves_nothing_in_memory(tmp_path):
    """A daemon closes a WARC file every few seconds for months (`warcMaxSize` small, issue
    45's soak): the output keeps nothing of each closed file (it once kept its path)."""
    import larbinpy.outputs.warc as warc_module

    out = WarcOutput(str(tmp_path), prefix="t", max_size=1)  # a file for every page

    def rotate(n: int) -> None:
        for i in range(n):
            out.write(hand_page(f"http://x.test/{i % 50}", b"hello"))
        out.flush()  # as each checkpoint does
        out.sorter.wait()  # the indexes written (the worker's memory is its own business)
        for p in tmp_path.glob("t-*"):
            p.unlink()  # rotated away, as logrotate-like operators do
        gc.collect()  # (warcio's records hold cycles: garbage, not kept)

    tracemalloc.start(8)
    try:
        held = tracemalloc.Filter(True, warc_module.__file__, all_frames=True)
        rotate(100)  # traced from the start: first-use allocations and caches made
        before = tracemalloc.take_snapshot().filter_traces([held])
        rotate(200)
        after = tracemalloc.take_snapshot().filter_traces([held])
    finally:
        tracemalloc.stop()
    out.close()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 200 * 40, f"{grown} bytes kept over 200 closed files"


def test_duplicates_become_revisits_of_the_archived_payload(tmp_path):
    outs = outputs_for(tmp_path, "noDup\n")  # (without it, nothing is a duplicate)
    outs.write(hand_page("http://x.test/a", b"same body"))
    outs.record_duplicate(hand_page("http://x.test/b", b"same body"))
    outs.record_duplicate(hand_page("http://x.test/c", b"never archived"))
    outs.close()
    files = warc_files(tmp_path)
    check(files)
    by_uri = {(r["type"], r["warc"].get("WARC-Target-URI")): r for r in records(files)}
    revisit = by_uri[("revisit", "http://x.test/b")]
    assert revisit["warc"]["WARC-Refers-To-Target-URI"] == "http://x.test/a"
    assert revisit["warc"]["WARC-Refers-To"] == by_uri[("response", "http://x.test/a")][
        "warc"]["WARC-Record-ID"]
    assert revisit["raw"] == b""  # headers only
    # a payload this archive does not hold is archived in full, never a dangling revisit
    assert by_uri[("response", "http://x.test/c")]["raw"] == b"never archived"


async def test_a_revisit_read_in_the_same_turn_as_its_page_is_archived_after_it(tmp_path):
    from larbinpy.crawler import Crawler

    crawler = Crawler(parse_config(f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\n"
                                   "output warc\nnoDup\nhttpPort 0\ninputPort 0\n"),
                      scratch=True)
    outputs = crawler.outputs
    crawler.parser.pass_on(outputs.write, hand_page("http://x.test/gone", b"no", status=404))
    crawler.parser.take(hand_page("http://x.test/a", b"same body"))
    crawler.parser.pass_on(outputs.record_duplicate, hand_page("http://x.test/b", b"same body"))
    await asyncio.sleep(0)  # the end of the turn that read all three
    crawler._close()
    got = [(r["type"], r["warc"].get("WARC-Target-URI")) for r in records(warc_files(tmp_path))
           if r["type"] in ("response", "revisit")]
    assert got == [("response", "http://x.test/gone"), ("response", "http://x.test/a"),
                   ("revisit", "http://x.test/b")]  # in the order read


def test_robots_fetches_are_archived_whatever_the_filters(tmp_path):
    outs = outputs_for(tmp_path, "output save\nspecificSearch .pdf end\n")
    robots = hand_page("http://x.test/robots.txt", b"User-agent: *\n", ctype="text/plain")
    outs.record_robots(robots)
    outs.write(hand_page("http://x.test/page.html", b"<html></html>"))  # filtered out
    outs.close()
    uris = [r["warc"].get("WARC-Target-URI") for r in records(warc_files(tmp_path))
            if r["type"] == "response"]
    assert uris == ["http://x.test/robots.txt"]
    assert not list((tmp_path / "save").glob("d*"))  # save never sees robots.txt


def test_transfer_encoding_is_renamed_because_the_body_is_stored_dechunked():
    page = hand_page("http://x.test/", b"x")
    page.raw_headers = ((b"Transfer-Encoding", b"chunked"), (b"Content-Type", b"text/html"))
    block = response_block(page)
    assert block.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nTransfer-Encoding" not in block
    assert b"X-Larbinpy-Transfer-Encoding: chunked\r\n" in block


class FillingDisk:
    """A file object that takes `room` bytes, then fails with ENOSPC until `room` grows."""

    def __init__(self, real, room: int) -> None:
        self.real, self.room = real, room

    def write(self, data) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = self.real.write(bytes(data[: self.room]))
        self.room -= n
        return n

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_disk_full_mid_record_pauses_and_the_file_stays_valid(tmp_path):
    outs = outputs_for(tmp_path)
    warc = outs.outputs[0]
    outs.write(hand_page("http://x.test/1", b"one" * 100))
    disk = FillingDisk(warc.file.file, room=50)  # the next record is cut after 50 bytes
    warc.file.file = disk
    outs.write(hand_page("http://x.test/2", b"two" * 100))
    outs.write(hand_page("http://x.test/3", b"three" * 100))
    assert not outs.ready and outs.status()["paused"]
    assert "No space left" in outs.status()["paused_reason"]
    assert outs.status()["backlog"] == 2
    assert not outs.retry()  # still full
    disk.room = 10**9  # space returns
    assert outs.retry() and outs.ready and outs.status()["backlog"] == 0
    outs.close()
    files = warc_files(tmp_path)
    check(files)
    uris = [r["warc"]["WARC-Target-URI"] for r in records(files) if r["type"] == "response"]
    assert uris == ["http://x.test/1", "http://x.test/2", "http://x.test/3"]


async def test_robots_txt_and_nodup_revisits_are_in_the_crawl_warc(make_web):
    same = html("/", title="same")
    tw = await make_web([Site("r.test", "127.0.0.2", {
        "/": html("/copy1.html", "/copy2.html", "/other.html"),
        "/copy1.html": same, "/copy2.html": same, "/other.html": html("/"),
        "/robots.txt": WebPage("User-agent: *\nDisallow: /nothing\n", content_type="text/plain"),
    }), Site("norobots.test", "127.0.0.3", {"/": html()})])
    await tw.crawl(f"startUrl {tw.url('r.test')}\nstartUrl {tw.url('norobots.test')}\n"
                   "output warc\nnoDup\n")
    files = warc_files(tw.tmp)
    check(files)
    recs = records(files)
    by_type: dict[str, list[str]] = {}
    for r in recs[1:]:
        by_type.setdefault(r["type"], []).append(r["warc"]["WARC-Target-URI"])
    assert tw.url("r.test", "/robots.txt") in by_type["response"]
    assert tw.url("norobots.test", "/robots.txt") in by_type["response"]  # its 404 too
    assert len(by_type["revisit"]) == 1  # one of the two copies
    assert by_type["revisit"][0] in {tw.url("r.test", "/copy1.html"),
                                     tw.url("r.test", "/copy2.html")}
    assert len(by_type["request"]) == len(by_type["response"]) + 1
