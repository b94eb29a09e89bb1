"""The parser stage: a loop turn's pages parsed at its end, never lost between two stages."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.records import Job, Page
from larbinpy.stages import parser as parser_module


def config(tmp: Path) -> str:
    """A crawl keeping its state (and saved pages) under tmp."""
    return (f"stateDir {tmp}/state\nsaveDir {tmp}/save\noutput save\n"
            "httpPort 0\ninputPort 0\ndepthInSite 5\n")


def page(url: str, *links: str) -> Page:
    """A fetched HTML page of depth budget 3 linking to `links`."""
    body = "".join(f'<a href="{u}">x</a>' for u in links).encode()
    return Page(job=Job(url, 3), url=url, status=200, headers={}, body=body,
                content_type="text/html", ip="127.0.0.2", fetched_at=time.time(), elapsed=0.01)


def queued(crawler: Crawler) -> list[str]:
    """Every URL on the frontier, popped."""
    urls = []
    while (job := crawler.frontier.pop()) is not None:
        urls.append(job.url)
    return urls


async def test_a_turns_pages_are_parsed_at_its_end_and_the_crawl_is_not_done_before(tmp_path):
    crawler = Crawler(parse_config(config(tmp_path)), scratch=True)
    try:
        crawler.parser.take(page("http://a.test/", "/one.html"))
        crawler.parser.take(page("http://a.test/two.html", "http://b.test/"))
        assert crawler.parser.pending == 2 and len(crawler.frontier) == 0
        assert not crawler.idle()  # read, links not queued yet: not done
        await asyncio.sleep(0)
        assert crawler.parser.pending == 0
        assert queued(crawler) == ["http://a.test/one.html", "http://b.test/"]
        index = (tmp_path / "save/d00000/index").read_text().split()
        assert index[1::2] == ["http://a.test/", "http://a.test/two.html"]
    finally:
        crawler._close()


async def test_a_checkpoint_keeps_the_links_of_pages_not_parsed_yet(tmp_path):
    first = Crawler(parse_config(config(tmp_path)))
    first.parser.take(page("http://a.test/", "/next.html"))
    first.checkpoint()  # same turn: the page was read, not parsed
    first._close()  # then the process dies
    again = Crawler(parse_config(config(tmp_path)))
    try:
        again._resume()
        assert queued(again) == ["http://a.test/next.html"]
    finally:
        again._close()


async def test_a_page_whose_links_cannot_be_extracted_is_logged_and_the_turn_goes_on(
        tmp_path, monkeypatch, caplog):
    real = parser_module.extract_links

    def broken_on_bad(body: bytes, url: str, *args: object, **kwargs: object):
        if url.endswith("bad.html"):
            raise RuntimeError("parser bug")
        return real(body, url, *args, **kwargs)

    monkeypatch.setattr(parser_module, "extract_links", broken_on_bad)
    crawler = Crawler(parse_config(config(tmp_path)), scratch=True)
    try:
        with caplog.at_level(logging.ERROR, logger="larbinpy.parser"):
            crawler.parser.take(page("http://a.test/bad.html", "/lost.html"))
            crawler.parser.take(page("http://a.test/good.html", "/kept.html"))
            await asyncio.sleep(0)
        assert "could not extract the links of http://a.test/bad.html" in caplog.text
        assert queued(crawler) == ["http://a.test/kept.html"]
    finally:
        crawler._close()


async def test_pages_held_for_the_end_of_the_turn_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(parser_module, "MAX_PAGES", 3)
    crawler = Crawler(parse_config(config(tmp_path)), scratch=True)
    try:
        for i in range(4):
            crawler.parser.take(page(f"http://a.test/{i}.html", f"/from{i}.html"))
        assert crawler.parser.pending == 1  # the third filled the batch: parsed at once
        assert len(crawler.frontier) == 3
    finally:
        crawler._close()


async def test_a_page_whose_links_cannot_be_queued_does_not_hold_back_the_turn(
        tmp_path, monkeypatch, caplog):
    crawler = Crawler(parse_config(config(tmp_path)), scratch=True)
    real = crawler.input.add_links

    def state_disk_full_once(parent: Job, page_url: str, links: list[str]) -> None:
        if page_url.endswith("first.html"):
            raise OSError(28, "No space left on device")
        real(parent, page_url, links)

    monkeypatch.setattr(crawler.input, "add_links", state_disk_full_once)
    try:
        with caplog.at_level(logging.ERROR, logger="larbinpy.parser"):
            for name in ("first", "second", "third"):
                crawler.parser.take(page(f"http://a.test/{name}.html", f"/{name}-next.html"))
            await asyncio.sleep(0)
        assert "could not pass on http://a.test/first.html" in caplog.text
        assert queued(crawler) == ["http://a.test/second-next.html",
                                   "http://a.test/third-next.html"]
        index = (tmp_path / "save/d00000/index").read_text().split()
        assert len(index) == 6  # every page saved, the first one too
    finally:
        crawler._close()
