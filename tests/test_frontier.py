"""The frontier at scale: bounded memory for a million queued URLs, order kept."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.frontier.sites import MEMORY_JOBS, SITE_WINDOW


def crawler_for(tmp_path: Path) -> Crawler:
    """A crawler whose stages are built but not running (no network needed)."""
    cfg = parse_config(f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\nhashSize 2^28\n"
                       "httpPort 0\ninputPort 0\noutput none\n")
    return Crawler(cfg, scratch=True)


def rss_mb() -> float:
    """This process's resident memory now, in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def url(i: int, sites: int) -> str:
    """The i-th URL, spread over `sites` hosts."""
    return f"http://site{i % sites}.example.org/page/{i}.html"


@pytest.mark.parametrize("total", [200_000, pytest.param(1_000_000, marks=pytest.mark.slow)])
async def test_a_million_queued_urls_fit_in_bounded_memory_and_keep_their_order(
    tmp_path: Path, total: int
):
    crawler = crawler_for(tmp_path)
    rng = random.Random(3)
    base = rss_mb()
    batch, accepted = 10_000, 0
    for start in range(0, total, batch):
        prio = rng.randrange(4)
        result = crawler.input.submit([url(i, 10_000) for i in range(start, start + batch)],
                                      priority=prio)
        accepted += result.accepted
    grown = rss_mb() - base
    # larbin's one-bit-per-hash set: a few false positives at 1M URLs in 2^28 bits
    assert total - accepted < total * 0.01
    assert len(crawler.frontier) == accepted
    # the queue is on disk: memory grew by the hash set's touched pages (2^28 bits = 32 MiB)
    # and small buffers, far less than a million URLs and Jobs (~250 MB)
    assert grown < 80, grown
    last_prio, last_index = 99, {p: -1 for p in range(4)}
    popped = 0
    while (job := crawler.frontier.pop()) is not None:
        index = int(job.url.rsplit("/", 1)[1].split(".")[0])
        assert job.priority <= last_prio  # highest priority first
        assert index > last_index[job.priority]  # FIFO within a priority
        last_prio, last_index[job.priority] = job.priority, index
        popped += 1
    assert popped == accepted
    crawler._close()


async def test_site_queues_keep_a_bounded_window_in_memory(tmp_path: Path):
    crawler = crawler_for(tmp_path)
    crawler.sites.on_new_site = lambda site: None  # no DNS: the queues only fill
    urls = [f"http://big.example.org/p{i}.html" for i in range(50_000)]
    urls += [f"http://small{i}.example.org/" for i in range(10)]
    crawler.input.submit(urls)
    while crawler.sequencer.turn(0.0):
        pass
    big = crawler.sites.by_key["http://big.example.org"]
    assert len(big.queue) == SITE_WINDOW  # the rest waits on disk
    assert crawler.sites.queued == 50_010
    assert crawler.sites.in_memory <= MEMORY_JOBS
    taken = [crawler.sites.take(big).url for _ in range(50_000)]
    assert taken == urls[:50_000]  # in order, across the memory window and the spill file
    assert crawler.sites.queued == 10
    crawler._close()


async def test_checkpoint_cursors_resume_exactly_what_was_not_taken(tmp_path: Path):
    crawler = crawler_for(tmp_path)
    crawler.sites.on_new_site = lambda site: None
    urls = [f"http://one.example.org/p{i}.html" for i in range(1000)]
    crawler.input.submit(urls)
    crawler.sequencer.turn(0.0)  # perCall (100) jobs into the site's window
    site = crawler.sites.by_key["http://one.example.org"]
    taken = [crawler.sites.take(site).url for _ in range(30)]
    crawler.checkpoint()
    crawler._close()
    again = Crawler(crawler.cfg, scratch=False)
    again.sites.on_new_site = lambda site: None
    again._resume()
    while again.sequencer.turn(0.0):
        pass
    rest = []
    site = again.sites.by_key["http://one.example.org"]
    while again.sites.has_work(site):
        rest.append(again.sites.take(site).url)
    assert sorted(rest) == sorted(urls[30:])  # nothing lost, nothing taken comes back
    assert not set(taken) & set(rest)
    again._close()


async def test_idle_sites_and_their_ip_slots_are_forgotten_beyond_the_bound(
    tmp_path: Path, monkeypatch
):
    import larbinpy.frontier.sites as sites_module

    monkeypatch.setattr(sites_module, "MAX_IDLE_SITES", 10)
    crawler = crawler_for(tmp_path)
    crawler.sites.on_new_site = lambda site: None
    crawler.input.submit([f"http://s{i}.example.org/" for i in range(50)])
    while crawler.sequencer.turn(0.0):
        pass
    for i, site in enumerate(list(crawler.sites.by_key.values())):
        crawler.sites.attach(site, f"10.0.0.{i}")
        crawler.sites.take(site)  # fetched: nothing left to do
        crawler.sites.rest(site)
    assert crawler.sites.evict(now=1.0) == 40
    assert len(crawler.sites.by_key) == 10 and len(crawler.sites.ips) == 10
    # a later URL of a forgotten site starts it afresh
    crawler.input.submit(["http://s0.example.org/again"])
    crawler.sequencer.turn(0.0)
    assert "http://s0.example.org" in crawler.sites.by_key
    crawler._close()


async def test_a_higher_priority_url_goes_ahead_of_its_sites_queue(make_web):
    from conftest import html, until

    from larbinpy.demo import Site

    pages = {"/": html(*(f"/p{i}.html" for i in range(100)))}
    pages.update({f"/p{i}.html": html() for i in range(100)})
    pages["/urgent.html"] = html()
    tw = await make_web([Site("prio.test", "127.0.0.2", pages)])
    cfg = parse_config(tw.config_text(f"startUrl {tw.url('prio.test')}\nrobots off\n"
                                      "waitDuration 0.2\nconnectionsPerHost 1\n"))
    crawler = Crawler(cfg, scratch=True)
    task = asyncio.ensure_future(crawler.run())
    try:
        key = tw.url("prio.test").rstrip("/")
        # the page's 100 links wait in the site's own queue, not in the frontier's FIFOs
        await until(lambda: key in crawler.sites.by_key
                    and len(crawler.sites.by_key[key].queue) >= 90, "the site's queue filling")
        before = len(tw.pages_fetched())
        crawler.input.submit([tw.url("prio.test", "/urgent.html")], priority=9)
        await until(lambda: tw.url("prio.test", "/urgent.html") in tw.pages_fetched(),
                    "the urgent URL fetched")
        after = tw.pages_fetched()
        # at most the fetch already under way (or due) went before it
        assert after.index(tw.url("prio.test", "/urgent.html")) <= before + 1, after[before:]
    finally:
        crawler.request_stop()
        await asyncio.wait_for(task, 30)


async def test_a_spilled_sites_jobs_come_back_each_once_fifo_within_a_priority(tmp_path: Path):
    from larbinpy.records import Job

    crawler = crawler_for(tmp_path)
    try:
        sites = crawler.sites
        jobs = [Job(f"http://s.test/{i}", 1, priority=9 if i % 50 == 7 else 0)
                for i in range(3 * SITE_WINDOW)]
        for job in jobs:
            sites.enqueue(job, 0.0)
        site = sites.by_key["http://s.test"]
        assert len(site.queue) == SITE_WINDOW  # the rest spilled
        first = sites.take(site)
        assert first.priority == 9  # the window serves priority first
        got = [first] + [sites.take(site) for _ in range(len(jobs) - 1)]
        assert sorted(j.url for j in got) == sorted(j.url for j in jobs)
        for prio in (0, 9):
            mine = [j.url for j in got if j.priority == prio]
            assert mine == [j.url for j in jobs if j.priority == prio]  # FIFO within
        assert sites.queued == 0 and not sites.has_work(site)
    finally:
        crawler._close()


async def test_windows_refilled_from_disk_stay_within_the_memory_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from larbinpy.frontier import sites as sites_module
    from larbinpy.records import Job

    budget = 5 * SITE_WINDOW  # a small stand-in for MEMORY_JOBS: 20 full windows need more
    monkeypatch.setattr(sites_module, "MEMORY_JOBS", budget)
    crawler = crawler_for(tmp_path)
    try:
        sites = crawler.sites
        names = [f"http://s{n}.test" for n in range(20)]
        per_site = 4 * SITE_WINDOW
        for i in range(per_site):
            for name in names:
                sites.enqueue(Job(f"{name}/{i}", 1), 0.0)
        got: dict[str, list[str]] = {name: [] for name in names}
        most = 0
        for _ in range(per_site):  # every site fetched in turn, as the opener would
            for name in names:
                got[name].append(sites.take(sites.by_key[name]).url)
                most = max(most, sites.in_memory)
        assert most <= budget  # refills from the spill share the budget too
        assert got == {name: [f"{name}/{i}" for i in range(per_site)] for name in names}
        assert sites.queued == 0
    finally:
        crawler._close()
