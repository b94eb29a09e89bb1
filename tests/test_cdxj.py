"""The CDXJ index beside each closed WARC file: byte for byte what `cdxj-indexer` writes, and
pywb replays a crawl from it (no indexing of its own)."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from conftest import html
from replay import COLLECTION, Pywb, pywb_bin
from test_warc import FillingDisk, check, hand_page, warc_files

from larbinpy.demo import Page as WebPage
from larbinpy.demo import Site, redirect
from larbinpy.outputs.cdxj import index_name, read_lines, sort_lines
from larbinpy.outputs.warc import WarcOutput
from larbinpy.records import Revisit

BIN = Path(sys.executable).parent
LATIN1 = "<html><head><title>Caf\xe9 cr\xe8me</title></head><body>x</body></html>"


def reference_index(warc: Path) -> str:
    """What `cdxj-indexer --sort` writes for a WARC file."""
    result = subprocess.run([str(BIN / "cdxj-indexer"), "--sort", str(warc)],
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout


def assert_indexes_match(files: list[Path]) -> None:
    """Each WARC file has its index beside it, equal to cdxj-indexer's, and no side file is
    left."""
    assert files
    for warc in files:
        ours = index_name(warc).read_text()
        assert ours == reference_index(warc), warc.name
        assert ours.count("\n") >= 1
    assert not list(files[0].parent.glob("*.cdxj.*"))  # no side file nor sort run left


def archive_web() -> list[Site]:
    """Pages of every kind an index line differs by: statuses, media types with parameters,
    no Content-Type, gzip, a query string (SURT sorts its arguments), a duplicate body (noDup:
    a revisit), a Latin-1 page."""
    same = html("/", title="same")
    return [Site("w.test", "127.0.0.2", {
        "/": html("/a.html", "/b.html?z=1&a=2", "/zipped.html", "/doc.pdf", "/missing.html",
                  "/moved", "/copy1.html", "/copy2.html", "/latin.html", "/bare", "/spaced"),
        "/a.html": html("/", title="Page A"),
        "/b.html": html("/", title="Page B"),
        "/zipped.html": WebPage(gzip.compress(b"<title>Zipped</title>" + b"z" * 500),
                                headers={"Content-Encoding": "gzip"}),
        "/doc.pdf": WebPage(b"%PDF-1.4 not really", content_type="application/pdf"),
        "/moved": redirect("/a.html"),
        "/copy1.html": same, "/copy2.html": same,
        "/latin.html": WebPage(LATIN1.encode("latin-1"),
                               content_type="text/html; charset=ISO-8859-1"),
        "/bare": WebPage(b"<html>no type</html>", content_type=""),
        "/spaced": WebPage(b"<html>odd header</html>", content_type="text/html ;charset=utf-8"),
        "/robots.txt": WebPage("User-agent: *\nDisallow: /nothing\n", content_type="text/plain"),
    })]


async def test_each_closed_warc_file_has_the_index_cdxj_indexer_writes(make_web):
    tw = await make_web(archive_web())
    await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\nnoDup\nwarcMaxSize 3000\n"
                   "anyType\n")
    files = warc_files(tw.tmp)
    assert len(files) >= 3  # rotated: each file its own index
    check(files)
    assert_indexes_match(files)
    lines = "".join(index_name(f).read_text() for f in files)
    assert '"mime": "warc/revisit"' in lines  # one of the two copies
    assert '"status": "404"' in lines and '"status": "301"' in lines
    assert "test,w:" in lines and ")/b.html?a=2&z=1 " in lines  # SURT keys
    assert lines.count('"mime": "text/html"') >= 5


def test_revisits_of_a_recrawl_are_indexed_as_cdxj_indexer_does(tmp_path):
    """A 304 (a revisit without HTTP headers: no status) and an unchanged 200."""
    out = WarcOutput(str(tmp_path), prefix="t")
    body = b"<html><title>kept</title></html>"
    out.write(hand_page("http://x.test/p", body))
    digest = hashlib.sha1(body).digest()
    for profile, status in (("server-not-modified", 304), ("identical-payload-digest", 200)):
        page = hand_page("http://x.test/p", b"" if status == 304 else body, status=status)
        page.revisit = Revisit(profile, "http://x.test/p", time.time() - 60, digest)
        out.write(page)
    out.close()
    files = sorted(tmp_path.glob("*.warc.gz"))
    check(files)
    assert_indexes_match(files)
    revisits = [line for line in index_name(files[0]).read_text().splitlines()
                if "warc/revisit" in line]
    assert len(revisits) == 2
    assert sum('"status"' in line for line in revisits) == 1  # the 304's has none


def test_a_failed_write_of_the_index_is_made_good_by_reading_the_file(tmp_path):
    out = WarcOutput(str(tmp_path), prefix="t")
    out.write(hand_page("http://x.test/1", b"one"))
    assert out.index is not None
    out.index.file = FillingDisk(out.index.file, room=0)  # the disk refuses the index's lines
    out.write(hand_page("http://x.test/2", b"two"))
    out.write(hand_page("http://x.test/3", b"three"))
    out.close()
    files = sorted(tmp_path.glob("*.warc.gz"))
    check(files)
    assert_indexes_match(files)
    assert index_name(files[0]).read_text().count("\n") == 3


def test_a_warc_file_left_without_its_index_is_indexed_at_the_next_start(tmp_path):
    out = WarcOutput(str(tmp_path), prefix="t")
    out.write(hand_page("http://x.test/1", b"one"))
    out.close()
    [warc] = sorted(tmp_path.glob("*.warc.gz"))
    index_name(warc).unlink()  # as if killed between the file's close and its index
    again = WarcOutput(str(tmp_path), prefix="t")
    again.write(hand_page("http://x.test/2", b"two"))
    again.close()
    files = sorted(tmp_path.glob("*.warc.gz"))
    assert len(files) == 2
    assert_indexes_match(files)


def test_the_external_sort_spills_runs_and_merges_them(tmp_path):
    lines = [f"key{(i * 7919) % 5000:05d} {i % 3}\n" for i in range(20_000)]
    out = tmp_path / "sorted"
    with open(out, "w") as f:
        written = sort_lines(iter(lines), f, tmp_path / "scratch", chunk=10_000)
    assert out.read_text().splitlines(keepends=True) == sorted(set(lines))
    assert written == len(set(lines))
    assert [p.name for p in tmp_path.iterdir()] == ["sorted"]  # the runs are removed


def test_runs_beyond_the_merge_fan_are_merged_in_rounds(tmp_path):
    lines = [f"key{(i * 7919) % 5000:05d} {i % 3}\n" for i in range(20_000)]
    out = tmp_path / "sorted"
    with open(out, "w") as f:  # ~30 runs merged 4 at a time: rounds of rounds
        written = sort_lines(iter(lines), f, tmp_path / "scratch", chunk=10_000, fan=4)
    assert out.read_text().splitlines(keepends=True) == sorted(set(lines))
    assert written == len(set(lines))
    assert [p.name for p in tmp_path.iterdir()] == ["sorted"]


def test_sorting_a_side_file_holds_a_small_chunk_of_it_in_memory(tmp_path):
    """The index of a 16 MiB WARC file (~4 MB of lines, what `bench --soak` closes every few
    seconds) is sorted holding at most one arena's worth (1 MiB) of its lines: a daemon that
    held 4 MiB of lines at each sort saw its heap swing by 4 MB a sort and keep some of it."""
    side = tmp_path / "w.cdxj.open"
    with open(side, "w", encoding="utf-8") as f:
        for i in range(15_000):  # ~300-byte lines, in the order records are written
            n = (i * 7919) % 15_000
            f.write(f"test,changing,etag-{n % 4})/p{n}.html 2026120617{i % 60:02d}{i % 59:02d} "
                    f'{{"url": "http://etag-{n % 4}.changing.test:8080/p{n}.html", "mime": '
                    f'"text/html", "status": "200", "digest": "sha1:{n:032d}", "length": '
                    f'"{900 + n % 97}", "offset": "{i * 1000}", "filename": '
                    f'"larbinpy-20261206170000-00001.warc.gz"}}\n')
    assert side.stat().st_size > 4 << 20
    out = tmp_path / "w.cdxj"
    tracemalloc.start()
    try:
        with open(out, "w", encoding="utf-8") as f:
            written = sort_lines(read_lines(side), f, tmp_path / "w.sort")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written == 15_000
    text = out.read_text(encoding="utf-8").splitlines()
    assert text == sorted(side.read_text(encoding="utf-8").splitlines())
    assert peak <= 1 << 20, f"the sort held {peak / 1e6:.1f} MB"


class OwnIndexPywb(Pywb):
    """pywb serving WARC files with the indexes larbinpy wrote beside them: the files are
    copied into the collection, never indexed by pywb."""

    def _run(self, *args: str) -> None:
        if args[0] != "add":
            super()._run(*args)
            return
        coll = self.workdir / "collections" / COLLECTION
        warc = Path(args[2])
        shutil.copy(warc, coll / "archive" / warc.name)
        shutil.copy(index_name(warc), coll / "indexes" / index_name(warc).name)


@pytest.mark.skipif(pywb_bin() is None, reason="pywb is not installed: make .venv-pywb")
async def test_pywb_replays_the_crawl_from_larbinpys_own_index(make_web):
    tw = await make_web(archive_web())
    await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\nwarcMaxSize 3000\n")
    files = warc_files(tw.tmp)
    work = tw.tmp / "pywb"
    work.mkdir()
    site = tw.web.sites["w.test"]
    with OwnIndexPywb(files, work) as pywb:
        assert not list((work / "collections" / COLLECTION / "indexes").glob("index.cdxj"))
        for path in ("/", "/a.html", "/zipped.html", "/latin.html"):
            url = tw.url("w.test", path)
            [(capture, status, body)] = pywb.replay_all(url)
            want = site.pages[path].body
            want = want.encode() if isinstance(want, str) else want
            assert status == 200 and capture.status == "200", url
            assert body in (want, gzip.decompress(want) if path == "/zipped.html" else want)
        assert pywb.replay_all(tw.url("w.test", "/missing.html"))[0][0].status == "404"


async def test_sigterm_closes_the_last_file_with_its_index(make_web):
    from test_daemon import start_daemon, submit, wait_idle

    tw = await make_web(archive_web())
    proc, port = await start_daemon(tw, "output warc\n")
    try:
        await asyncio.to_thread(submit, port, tw.url("w.test"))
        await wait_idle(port, 8)
        assert list((tw.tmp / "save").glob("*.warc.gz.open"))  # the daemon's file is open
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    files = warc_files(tw.tmp)
    assert len(files) == 1
    check(files)
    assert_indexes_match(files)
