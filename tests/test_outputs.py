"""Outputs together: fan-out, SPECIFICSEARCH filters, the userOutput hook, disk-full pauses."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import logging
import sys
import time
import types
import uuid
from pathlib import Path

import pytest
from conftest import CRAWL_TIMEOUT, WAIT_TIMEOUT, html, until

from larbinpy import outputs as outputs_module
from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import Page as WebPage
from larbinpy.demo import Site
from larbinpy.outputs import Outputs, make_output
from larbinpy.outputs.hook import HOOK_CONCURRENCY
from larbinpy.outputs.save import SaveOutput
from larbinpy.records import Job, Page
from larbinpy.stats import Stats


def page(url: str, body: bytes = b"<html></html>", status: int = 200,
         ctype: str = "text/html") -> Page:
    """A fetched page, as the reader makes it."""
    return Page(job=Job(url, 2), url=url, status=status, headers={"Content-Type": ctype},
                body=body, content_type=ctype, ip="127.0.0.2", fetched_at=time.time(),
                elapsed=0.01, links=["http://x.test/next"])


def outputs(tmp: Path, text: str) -> Outputs:
    """Outputs from a configuration text, saving under `tmp/save`."""
    return Outputs(parse_config(f"saveDir {tmp}/save\n{text}"), Stats())


def hook_module(tmp: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> str:
    """Write an importable module with `source`; return its name."""
    name = f"hook_{uuid.uuid4().hex}"
    (tmp / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp))
    return name


def saved(save: Path) -> dict[str, bytes]:
    """URL -> body of every page of `output save`, from the folders' indexes."""
    result = {}
    for index in sorted(save.glob("d*/index")):
        for line in index.read_text().splitlines():
            name, url = line.split(" ", 1)
            result[url] = (index.parent / name).read_bytes()
    return result


# --- end to end ---


def pdf_web() -> list[Site]:
    """HTML pages linking to PDFs, one of them served without the extension."""
    return [Site("p.test", "127.0.0.2", {
        "/": html("/a.html", "/one.pdf", "/get?id=2"),
        "/a.html": html("/", "/three.pdf"),
        "/one.pdf": WebPage(b"%PDF one", content_type="application/pdf"),
        "/three.pdf": WebPage(b"%PDF three", content_type="application/pdf"),
        "/get?id=2": WebPage(b"%PDF two", content_type="application/pdf"),
    })]


async def test_several_outputs_and_the_hook_see_every_page(make_web, monkeypatch):
    tw = await make_web(pdf_web())
    name = hook_module(tw.tmp, monkeypatch, "SEEN = []\ndef on_page(p):\n    SEEN.append(p)\n")
    crawler = await tw.crawl(
        f"startUrl {tw.url('p.test')}\noutput save\noutput links\noutput mirror\n"
        f"contentTypes text/html application/pdf end\nuserOutput {name}:on_page\n"
    )
    served = set(tw.pages_fetched())
    assert len(served) == 5
    assert set(saved(tw.tmp / "save")) == served
    lines = [json.loads(x) for x in (tw.tmp / "save/links.jsonl").read_text().splitlines()]
    assert {x["url"] for x in lines} == served
    root = tw.url("p.test")
    first = next(x for x in lines if x["url"] == root)
    assert set(first) >= {"url", "final_url", "status", "depth", "content_type", "bytes",
                          "fetch_time", "links"}
    assert tw.url("p.test", "/one.pdf") in first["links"]
    assert (tw.tmp / "save" / f"p.test:{tw.web.port}" / "get%3Fid=2").read_bytes() == b"%PDF two"
    seen = sys.modules[name].SEEN
    assert sorted(p.url for p in seen) == sorted(served)
    view = next(p for p in seen if p.url == root)
    assert view.status == 200 and view.depth >= 0 and view.links and view.body.startswith(b"<")
    assert view.headers["Content-Type"].startswith("text/html")
    assert crawler.outputs.status()["hook"]["calls"] == 5


async def test_specific_search_outputs_only_pdfs_while_crawling_the_html(make_web):
    tw = await make_web(pdf_web())
    await tw.crawl(f"startUrl {tw.url('p.test')}\noutput save\nspecificSearch .pdf end\n")
    assert tw.url("p.test", "/a.html") in tw.pages_fetched()  # HTML crawled...
    assert set(saved(tw.tmp / "save")) == {  # ...but only .pdf URLs output
        tw.url("p.test", "/one.pdf"), tw.url("p.test", "/three.pdf")}


async def test_content_types_output_only_pages_of_those_types(make_web):
    tw = await make_web(pdf_web())
    await tw.crawl(f"startUrl {tw.url('p.test')}\noutput save\n"
                   "contentTypes application/pdf end\n")
    assert saved(tw.tmp / "save") == {
        tw.url("p.test", "/one.pdf"): b"%PDF one", tw.url("p.test", "/three.pdf"): b"%PDF three",
        tw.url("p.test", "/get?id=2"): b"%PDF two"}


async def test_a_failing_hook_is_counted_and_never_stops_the_crawl(make_web, monkeypatch):
    tw = await make_web(pdf_web())
    source = (
        "import asyncio\n"
        "def bad(p):\n    raise RuntimeError('boom')\n"
        "async def bad_async(p):\n    await asyncio.sleep(0)\n    raise RuntimeError('boom')\n"
        "def tamper(p):\n    p.status = 500\n"
    )
    name = hook_module(tw.tmp, monkeypatch, source)
    for func in ("bad", "bad_async", "tamper"):
        crawler = await tw.crawl(f"startUrl {tw.url('p.test')}\nuserOutput {name}:{func}\n"
                                 f"output none\nstateDir {tw.tmp}/state-{func}\n")
        assert crawler.stats.outcomes["success"] == 2  # the two HTML pages
        hook = crawler.outputs.status()["hook"]
        assert hook["errors"] == hook["calls"] == 2, func
        assert crawler.stats.output_errors == 2


# --- the hook, directly ---


def test_the_hook_sees_a_read_only_page(tmp_path, monkeypatch):
    name = hook_module(tmp_path, monkeypatch, "SEEN = []\ndef f(p):\n    SEEN.append(p)\n")
    outs = outputs(tmp_path, f"output none\nuserOutput {name}:f\n")
    outs.write(page("http://x.test/"))
    view = sys.modules[name].SEEN[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.body = b"changed"
    with pytest.raises(TypeError):
        view.headers["X"] = "y"
    with pytest.raises(AttributeError):
        view.links.append("http://evil/")
    assert (view.url, view.final_url, view.depth) == ("http://x.test/", "http://x.test/", 2)


async def test_a_slow_async_hook_applies_back_pressure(tmp_path, monkeypatch):
    source = ("import asyncio\nGATE = asyncio.Event()\nDONE = []\n"
              "async def slow(p):\n    await GATE.wait()\n    DONE.append(p.url)\n")
    name = hook_module(tmp_path, monkeypatch, source)
    module = sys.modules.get(name) or __import__(name)
    module.GATE = asyncio.Event()  # on this test's loop
    outs = outputs(tmp_path, f"output none\nuserOutput {name}:slow\n")
    written = 0

    async def produce() -> None:
        """What the reader does: wait until fetching may go on, fetch (a turn), output."""
        nonlocal written
        for i in range(3 * HOOK_CONCURRENCY):
            await outs.wait_ready()
            await asyncio.sleep(0)
            outs.write(page(f"http://x.test/{i}"))
            written += 1

    producer = asyncio.ensure_future(produce())
    await until(lambda: outs.status()["hook"]["running"] == HOOK_CONCURRENCY, "hooks running")
    for _ in range(10):  # turns enough for the producer to write more, were it not held
        await asyncio.sleep(0)
    assert written == HOOK_CONCURRENCY  # the next fetch waits: memory stays bounded
    assert not outs.ready and outs.status()["hook"]["running"] == HOOK_CONCURRENCY
    module.GATE.set()
    await asyncio.wait_for(producer, WAIT_TIMEOUT)
    await outs.drain(WAIT_TIMEOUT)
    assert len(module.DONE) == 3 * HOOK_CONCURRENCY and outs.ready


# --- storage refusing writes ---


async def test_unwritable_save_dir_pauses_then_resumes_without_losing_pages(tmp_path, caplog):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where saveDir's parent should be")
    outs = Outputs(parse_config(f"saveDir {blocker}/save\noutput save\noutput links\n"), Stats())
    outs.retry_interval = 0.05
    retries = 0
    real_retry = outs.retry

    def counted_retry() -> bool:
        nonlocal retries
        retries += 1
        return real_retry()

    outs.retry = counted_retry  # the retry timer calls it: the test counts the attempts
    with caplog.at_level(logging.INFO, logger="larbinpy.outputs"):
        for i in range(5):
            outs.write(page(f"http://x.test/{i}", body=f"page {i}".encode()))
        status = outs.status()
        assert status["paused"] and status["backlog"] == 10 and not outs.ready
        assert "Not a directory" in status["paused_reason"]
        assert "fetching paused" in caplog.text
        waiter = asyncio.ensure_future(outs.wait_ready())
        await until(lambda: retries >= 2, "two retries of the refused writes")
        assert not waiter.done()  # still refused: fetching stays paused
        blocker.unlink()  # the operator fixes the disk
        await asyncio.wait_for(waiter, WAIT_TIMEOUT)
        assert "fetching resumed" in caplog.text
    outs.write(page("http://x.test/5", body=b"page 5"))
    outs.close()
    got = saved(blocker / "save")
    assert list(got) == [f"http://x.test/{i}" for i in range(6)]  # all of them, in order
    assert got["http://x.test/3"] == b"page 3"
    assert len((blocker / "save/links.jsonl").read_text().splitlines()) == 6
    assert outs.status()["lost"] == 0


def test_disk_full_pauses_and_pages_still_refused_at_close_are_reported(tmp_path, caplog):
    outs = outputs(tmp_path, "output links\n")
    full = OSError(errno.ENOSPC, "No space left on device")

    def refuse(data: bytes) -> None:
        raise full

    outs.write(page("http://x.test/0"))
    outs.outputs[0].file.append = refuse
    outs.write(page("http://x.test/1"))
    assert outs.status()["paused"] and "No space left" in outs.status()["paused_reason"]
    with caplog.at_level(logging.ERROR, logger="larbinpy.outputs"):
        outs.close()
    assert outs.status()["lost"] == 1
    assert "could not be written" in caplog.text  # never silently dropped


def test_only_archival_outputs_get_error_pages(tmp_path):
    outs = outputs(tmp_path, "output save\noutput links\n")
    outs.write(page("http://x.test/missing", status=404))
    outs.close()
    assert not (tmp_path / "save/links.jsonl").exists() and not saved(tmp_path / "save")


def test_an_output_is_a_module_with_make(monkeypatch, tmp_path):
    made = []
    module = types.ModuleType("larbinpy.outputs.fake")
    module.make = lambda cfg: made.append(cfg) or "the fake output"
    monkeypatch.setitem(sys.modules, "larbinpy.outputs.fake", module)
    cfg = parse_config(f"saveDir {tmp_path}\n")
    assert make_output("fake", cfg) == "the fake output" and made == [cfg]
    for bad in ("nothing", "hook", "files", "../x"):
        with pytest.raises(ValueError):
            make_output(bad, cfg)


async def test_a_full_disk_pauses_the_crawl_and_no_page_is_lost(make_web, monkeypatch):
    pages = {f"/p{i}.html": html(f"/p{i + 1}.html", f"/q{i}.html") for i in range(12)}
    pages.update({f"/q{i}.html": html() for i in range(12)})
    tw = await make_web([Site("f.test", "127.0.0.2", {"/": html("/p0.html"), **pages})])
    monkeypatch.setattr(outputs_module, "RETRY_INTERVAL", 0.05)
    real_write = SaveOutput.write
    window: list[float] = []
    crawler = Crawler(parse_config(tw.config_text(
        f"exitAtEnd\nstartUrl {tw.url('f.test')}\noutput save\n")), scratch=True)
    under_way: set[str] = set()  # fetches begun when the disk filled

    def write(self: SaveOutput, page: Page) -> None:
        if len(self.__dict__.setdefault("_calls", [])) == 5 and not window:
            window.append(time.monotonic())  # the disk fills at the sixth page...
            under_way.update(job.url for job in crawler.opener.active.values())
            asyncio.get_running_loop().call_later(0.5, lambda: window.append(time.monotonic()))
        self._calls.append(page.url)
        if len(window) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, page)  # ...and has room again 0.5 s later

    monkeypatch.setattr(SaveOutput, "write", write)
    assert await asyncio.wait_for(crawler.run(), CRAWL_TIMEOUT) == 0
    full, freed = window
    assert crawler.outputs.status()["pauses"] == 1
    assert set(saved(tw.tmp / "save")) == set(tw.pages_fetched())  # every page, none lost
    started_while_full = {tw.url(h.host, h.path) for h in tw.web.hits if full < h.start < freed}
    assert started_while_full <= under_way  # fetching paused (bar fetches already under way)


# --- durability at a checkpoint ---


def test_flush_makes_every_output_durable_and_forgets_what_it_synced(tmp_path):
    outs = outputs(tmp_path, "output save\noutput mirror\noutput warc\noutput links")
    tracked = [o.unsynced for o in outs.outputs if o.name in ("save", "mirror")]
    for count in (3, 40):  # a few files (one fsync each), then a batch (one syncfs)
        for i in range(count):
            outs.write(page(f"http://d{count}.test/p{i}", body=f"page {i}".encode()))
        assert all(tracked)  # save and mirror recorded the files they wrote
        outs.flush()
        assert not any(tracked) and not any(o.unsynced for o in outs.outputs
                                            if hasattr(o, "unsynced"))
    assert len(saved(tmp_path / "save")) == 43


async def test_a_checkpoint_is_not_written_past_pages_not_made_durable(tmp_path):
    cfg = parse_config(f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\noutput save\n"
                       "httpPort 0\ninputPort 0\n")
    crawler = Crawler(cfg, scratch=True)
    try:
        crawler.checkpoint()
        checkpoint = tmp_path / "state" / "checkpoint"
        before = checkpoint.read_bytes()
        crawler.outputs.write(page("http://c.test/p1"))
        folder = tmp_path / "save" / "d00000"
        for entry in folder.iterdir():  # the folder vanishes before its files were synced
            entry.unlink()
        folder.rmdir()
        with pytest.raises(OSError):
            await crawler.checkpoint_async()  # the fsync in the worker thread fails
        with pytest.raises(OSError):
            crawler.checkpoint()  # and so does the synchronous one: nothing was forgotten
        assert checkpoint.read_bytes() == before
        assert crawler.outputs.paused_reason is not None  # and the crawl waits for its storage
    finally:
        crawler._close()
