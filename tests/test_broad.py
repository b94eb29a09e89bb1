"""Broad crawls: many sites in bounded memory (the site table's budget, seeds by the million)."""

from __future__ import annotations

import asyncio
from collections import Counter

from conftest import html

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import Site

SITES = 40


def many_sites() -> list[Site]:
    """SITES hosts on four IPs, two pages each, every home page linking the next host's."""
    return [Site(f"s{i}.test", f"127.0.0.{2 + i % 4}", {"/": html("/p.html"), "/p.html": html("/")})
            for i in range(SITES)]


async def test_max_sites_in_memory_bounds_the_sites_with_work_and_the_crawl_still_ends(make_web):
    tw = await make_web(many_sites())
    for i, site in enumerate(tw.web.sites.values()):  # links to other hosts: new sites found
        site.pages["/"] = html("/p.html", tw.url(f"s{(i + 7) % SITES}.test"))
    seeds = "".join(f"startUrl {tw.url(f's{i}.test')}\n" for i in range(0, SITES, 2))
    cfg = parse_config(tw.config_text(f"exitAtEnd\nmaxSitesInMemory 3\n{seeds}"))
    busy: list[int] = []

    def started(site, job) -> None:  # noqa: ANN001 - the crawler's on_page_fetch
        sites = crawler.sites
        busy.append(len(sites.by_key) - len(sites.idle))

    crawler = Crawler(cfg, scratch=True, on_page_fetch=started)
    await asyncio.wait_for(crawler.run(), 60)
    fetched = Counter(tw.pages_fetched())
    assert set(fetched) == {tw.url(f"s{i}.test", p) for i in range(SITES) for p in ("/", "/p.html")}
    assert all(n == 1 for n in fetched.values()), fetched
    assert max(busy) <= 3 and len(busy) == 2 * SITES
