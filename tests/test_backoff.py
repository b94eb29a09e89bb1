"""Back-off end to end: 429/503 pause the whole site (Retry-After in seconds or as a date,
capped by maxRetryAfter; else exponential), other sites keep their speed, retries are bounded
and counted; robots.txt Crawl-delay (capped by maxCrawlDelay) spaces a site's requests.

These run on real time, with waits made short where the time is not the point: the timing
logic itself (the doubling, the cap, a date on the wall clock, a site's delay) is unit-tested
on a fake clock in tests/test_politeness.py."""

from __future__ import annotations

import email.utils
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import html
from modernweb import start_scripted, stop_web
from test_crawl import gaps

from larbinpy.demo import Page, Site
from larbinpy.net import backoff
from larbinpy.net.backoff import retry_after
from larbinpy.stages import robots as robots_stage


def busy(status: int = 503, retry: str | None = None) -> Page:
    """A "too much" answer, with a Retry-After header when given."""
    return Page("busy", status=status, headers={"Retry-After": retry} if retry else {})


def two_sites() -> list[Site]:
    """slow.test (which will answer 503 once) and fast.test, on two IPs, linked both ways."""
    return [
        Site("slow.test", "127.0.0.2", {"/": html("/a", "/b", "/c"), "/b": html(), "/c": html(),
                                        "/a": html()}),
        Site("fast.test", "127.0.0.3", {"/": html(*[f"/f{i}" for i in range(8)]),
                                        **{f"/f{i}": Page("<p>x</p>", delay=0.05)
                                           for i in range(8)}}),
    ]


async def crawl_scripted(tmp_path: Path, sites, scripts, conf: str):
    """Crawl slow.test's / (and fast.test's / when it exists) with a scripted web."""
    tw = await start_scripted(sites, scripts, tmp_path)
    try:
        seeds = "".join(f"startUrl {tw.url(s.host)}\n" for s in sites)
        crawler = await tw.crawl(seeds + conf, timeout=30)
    finally:
        await stop_web(tw)
    return tw, crawler


def first(hits, path: str):
    """The first hit on a path."""
    return next(h for h in hits if h.path == path)


async def test_retry_after_seconds_pauses_only_that_site(tmp_path: Path):
    scripts = {("slow.test", "/a"): [busy(503, "1"), html()]}
    tw, crawler = await crawl_scripted(tmp_path, two_sites(), scripts, "waitDuration 0.05")
    slow = sorted(tw.web.hits_for("slow.test"), key=lambda h: h.start)
    refused = first(slow, "/a")
    after = [h for h in slow if h.start > refused.start]
    assert Counter(h.path for h in slow)["/a"] == 2  # refused, then retried and fetched
    # the whole site waited Retry-After, not only the refused URL
    assert min(h.start for h in after) - refused.end >= 1.0 - 0.02
    # meanwhile the other site kept crawling
    resumed = min(h.start for h in after)
    during = [h for h in tw.web.hits_for("fast.test") if refused.end < h.start < resumed]
    assert len(during) >= 4
    assert crawler.stats.outcomes["backedOff"] == 1
    assert crawler.stats.outcomes["success"] == 4 + 9


async def test_retry_after_date_is_honoured_and_capped(tmp_path: Path):
    date = email.utils.formatdate(time.time() + 3600, usegmt=True)
    scripts = {("slow.test", "/a"): [busy(429, date), html()]}
    sites = two_sites()[:1]
    tw, crawler = await crawl_scripted(tmp_path, sites, scripts, "maxRetryAfter 0.2")
    slow = sorted(tw.web.hits, key=lambda h: h.start)
    refused = first(slow, "/a")
    wait = min(h.start for h in slow if h.start > refused.start) - refused.end
    # an hour asked, maxRetryAfter granted: waited that, and retried within the crawl
    assert wait >= 0.2 - 0.02
    assert [h.path for h in slow].count("/a") == 2
    assert crawler.stats.outcomes["backedOff"] == 1


async def test_without_retry_after_back_off_is_exponential_and_retries_bounded(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(backoff, "BACKOFF_MIN", 0.1)  # the first pause (waitDuration is 0)
    scripts = {("slow.test", "/a"): [busy(429)]}  # always too many requests
    sites = [Site("slow.test", "127.0.0.2", {"/": html("/a"), "/a": html()})]
    tw, crawler = await crawl_scripted(tmp_path, sites, scripts, "maxRetries 2")
    tries = sorted((h for h in tw.web.hits if h.path == "/a"), key=lambda h: h.start)
    assert len(tries) == 3  # one fetch, two retries, then given up
    waits = [b.start - a.end for a, b in zip(tries, tries[1:], strict=False)]
    assert waits[0] >= 0.1 - 0.02 and waits[1] >= 0.2 - 0.02, waits  # 0.1 s, then twice that
    out = crawler.stats.outcomes
    assert out["backedOff"] == 2 and out["err40X"] == 1 and out["success"] == 1


async def test_robots_txt_503_retry_after_is_honoured(tmp_path: Path, monkeypatch):
    # the default retry delay made an hour: a retry within the crawl can only be Retry-After's
    monkeypatch.setattr(robots_stage, "RETRY_DELAY", 3600.0)
    scripts = {("slow.test", "/robots.txt"): [busy(503, "1"), Page("", content_type="text/plain")]}
    sites = [Site("slow.test", "127.0.0.2", {"/": html()})]
    tw, crawler = await crawl_scripted(tmp_path, sites, scripts, "")
    hits = sorted(tw.web.hits, key=lambda h: h.start)
    assert [h.path for h in hits] == ["/robots.txt", "/robots.txt", "/"]
    assert hits[1].start - hits[0].end >= 1.0 - 0.02
    assert crawler.stats.outcomes["success"] == 1


@pytest.mark.parametrize(("delay", "cap", "spacing"), [
    ("0.1", "60", 0.1),  # Crawl-delay larger than waitDuration wins
    ("30", "0.1", 0.1),  # ... within maxCrawlDelay
])
async def test_crawl_delay_spaces_requests_within_max_crawl_delay(
    make_web, delay: str, cap: str, spacing: float
):
    robots = Page(f"User-agent: *\nCrawl-delay: {delay}\n", content_type="text/plain")
    tw = await make_web([Site("cd.test", "127.0.0.2", {
        "/robots.txt": robots, "/": html("/1", "/2", "/3"),
        "/1": html(), "/2": html(), "/3": html()})])
    crawler = await tw.crawl(
        f"startUrl {tw.url('cd.test')}\nwaitDuration 0.01\nmaxCrawlDelay {cap}")
    g = gaps(tw.web.hits)
    assert len(tw.web.hits) == 5
    assert [site.delay for site in crawler.sites.by_key.values()] == [spacing]  # the site's delay
    assert min(g) >= spacing - 0.02, g  # ... kept between its requests


def test_retry_after_forms():
    assert retry_after("120", 3600) == 120
    assert retry_after("99999", 3600) == 3600
    assert retry_after(email.utils.formatdate(time.time() - 60, usegmt=True), 3600) == 0
    assert retry_after(email.utils.formatdate(time.time() + 3600, usegmt=True), 0.6) == 0.6
    assert 55 < retry_after(email.utils.formatdate(time.time() + 60, usegmt=True), 3600) <= 60
    assert retry_after("soon", 3600) is None and retry_after(None, 3600) is None
