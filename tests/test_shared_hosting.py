"""Shared hosting: many host names on one IP cost the opener the same per fetch as one.

Every host of these webs lives on one loopback IP, as on a big shared host or behind wildcard
DNS, and pages link new hosts of that IP. The per-IP wait must not touch every waiting site at
each fetch: the work of the opener (its `consider` calls) per fetch stays bounded however many
sites wait, while the IP's politeness (connectionsPerHost, waitDuration) holds as the server
saw it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from conftest import bench_json, html, until

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import Site
from larbinpy.frontier.politeness import Politeness
from larbinpy.records import SiteState

SHARED_IP = "127.0.0.9"
# `consider` calls per fetch: a site's fetch is considered a few times (its turn, its start, its
# end, its IP's wake-up, a new site's DNS answer); waking every waiting site costs hundreds
CONSIDER_PER_FETCH = 8


@pytest.fixture
def considered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A count of `Politeness.consider` calls, the opener's unit of work per site."""
    count = [0]
    original = Politeness.consider

    def counted(self: Politeness, site: object, **kwargs: object) -> None:
        count[0] += 1
        original(self, site, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Politeness, "consider", counted)
    yield count


def host(i: int) -> str:
    """Name of shared host number i."""
    return f"s{i}.shared.test"


def gaps(hits) -> list[float]:
    """Seconds between the end of each request and the start of the next one."""
    hits = sorted(hits, key=lambda h: h.start)
    return [b.start - a.end for a, b in zip(hits, hits[1:], strict=False)]


async def test_a_tree_of_hosts_on_one_ip_costs_a_bounded_work_per_fetch(make_web, considered):
    # 300 hosts on one IP; the root of host i links the roots of hosts 6i+1 ... 6i+6, so each
    # page brings new hosts of the same IP while hundreds of them wait for it
    n, fanout = 300, 6
    tw = await make_web([Site(host(i), SHARED_IP) for i in range(n)])
    for i in range(n):
        children = range(fanout * i + 1, min(fanout * i + fanout + 1, n))
        page = html(*[tw.url(host(c)) for c in children])
        page.delay = 0.01  # long enough for the server to see two fetches overlap
        tw.web.sites[host(i)].pages["/"] = page
    crawler = await tw.crawl(f"startUrl {tw.url(host(0))}\nconnectionsPerHost 2\n"
                             "pagesConnexions 10\noutput none\n")
    assert sorted(tw.pages_fetched()) == sorted(tw.url(host(i)) for i in range(n))
    assert crawler.stats.outcomes["success"] == n
    fetches = len(tw.web.hits)  # robots.txt included: they go through the same clocks
    assert fetches == 2 * n
    assert considered[0] <= CONSIDER_PER_FETCH * fetches, (considered[0], fetches)
    # the IP was used, never beyond its places
    assert tw.web.max_concurrency(SHARED_IP) == 2


async def test_hundreds_of_sites_waiting_on_one_ip_clock_cost_a_bounded_work_per_fetch(
        make_web, considered):
    # one index page links 200 hosts of its IP; waitDuration spaces every fetch on the IP, so
    # all of them wait on the IP's clock at once
    n, wait = 200, 0.5
    tw = await make_web([Site(host(i), SHARED_IP) for i in range(n + 1)])
    tw.web.sites[host(0)].pages["/"] = html(*[tw.url(host(i)) for i in range(1, n + 1)])
    cfg = parse_config(tw.config_text(f"startUrl {tw.url(host(0))}\nwaitDuration {wait}\n"
                                      "connectionsPerHost 1\noutput none\n"))
    crawler = Crawler(cfg, scratch=True)
    run = asyncio.ensure_future(crawler.run())
    try:
        await until(lambda: len(crawler.sites.by_key) == n + 1 and all(
            s.state is not SiteState.DNS for s in crawler.sites.by_key.values()),
            "every linked host resolved")
        before, hits_before = considered[0], len(tw.web.hits)
        await until(lambda: len(tw.web.hits) >= hits_before + 4, "four more fetches")
        calls, fetches = considered[0] - before, len(tw.web.hits) - hits_before
    finally:
        crawler.request_stop()
        await asyncio.wait_for(run, 30)
    assert calls <= CONSIDER_PER_FETCH * fetches, (calls, fetches)
    hits = sorted(tw.web.hits, key=lambda h: h.start)
    assert tw.web.max_concurrency(SHARED_IP) == 1
    # the server stamps `end` a little after the crawler saw the response end
    assert min(gaps(hits)) >= wait - 0.02, gaps(hits)
    # the waiting sites take turns, each its robots.txt then the page it was fetched for
    after_index = [(h.host, h.path) for h in hits[2:]]
    assert len(after_index) >= 4
    for i, (name, path) in enumerate(after_index):
        assert path == ("/robots.txt" if i % 2 == 0 else "/"), after_index
        assert name == after_index[i - i % 2][0], after_index
    pages = [name for name, path in after_index if path == "/"]
    assert len(set(pages)) == len(pages), after_index


def test_bench_shared_ip_reports_both_thirds_of_the_crawl() -> None:
    """--shared-ip 30: 30 pages of a web of 241 hosts on one IP, the pace of its first and
    last thirds (figures are not asserted, only sanity)."""
    result = bench_json("--shared-ip", "30", "--output", "none")
    assert result["hosts"] == 241 and result["crawl"]["pages"] >= 30
    assert result["warnings"] == []
    first, last = result["first_third"], result["last_third"]
    assert first["pages"] == last["pages"] == 10
    assert first["pages_per_s"] > 0 and last["pages_per_s"] > 0
    assert result["last_over_first"] == round(last["pages_per_s"] / first["pages_per_s"], 3)


def test_bench_shared_ip_with_a_wait_keeps_the_ip_clock() -> None:
    """--shared-ip with --wait: one IP, one place on it: never more than a page per wait."""
    wait = 0.1
    result = bench_json("--shared-ip", "9", "--wait", str(wait), "--per-host", "1",
                        "--output", "none")
    for third in (result["first_third"], result["last_third"]):
        assert 0 < third["pages_per_s"] <= 1 / wait
