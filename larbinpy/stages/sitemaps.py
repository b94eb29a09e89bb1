"""After the reader, for sitemap jobs: the URLs a fetched sitemap lists go to the input stage.

The reader reads a 2xx sitemap job's body (at most `links/sitemaps.MAX_BYTES`, cut rather than
refused) and hands it here instead of to the parser; `links/sitemaps.parse` finds the URLs. An
index's URLs go back to input as sitemap jobs one nesting level down (the job's depth), a
urlset's as page jobs; URLs beyond the protocol's limits are counted outOfScope.

A sitemap speaks only for its own host (sitemaps.org): a URL of another host it lists is
refused and counted outOfScope, or any site could steer the crawl onto another's pages. (The
protocol's exception, a host whose robots.txt names the other host's sitemap, is not honoured:
a sitemap job does not record which robots.txt named it.)
"""

from __future__ import annotations

from collections.abc import Callable

from larbinpy.links.sitemaps import SitemapError, lastmods, parse
from larbinpy.links.urls import Normalizer, host_of
from larbinpy.records import Job
from larbinpy.stages.input import Input
from larbinpy.stats import Outcome, Stats

LASTMOD_CHECKS = 1000  # recrawl: a sitemap's newest lastmods looked up in the schedule


def take_sitemap(job: Job, body: bytes, input_stage: Input, stats: Stats,
                 modified: Callable[[str, float], None] | None = None) -> Outcome:
    """A sitemap's URLs to input: the fetch's outcome (badEncoding if it does not inflate).
    `modified` (recrawl): told each listed page of the sitemap's host with its `<lastmod>`."""
    try:
        found = parse(body)
    except SitemapError:
        return Outcome.badEncoding
    urls, foreign = own_host_urls(job.url, found.urls, input_stage.normalizer)
    # over the protocol's limits, or of another host
    stats.count(Outcome.outOfScope, found.dropped + foreign)
    if found.is_index:
        input_stage.add_sitemaps(job.url, urls, job.depth - 1)
    else:
        # (what this fetch discovered: the recrawl revisits a sitemap that lists new pages)
        job.found = input_stage.add_sitemap_urls(job.url, urls)
        if modified is not None:  # the newest first, LASTMOD_CHECKS at most
            listed = sorted(lastmods(body), key=lambda e: -e[1])[:LASTMOD_CHECKS]
            own, _ = own_host_urls(job.url, [u for u, _ in listed], input_stage.normalizer)
            times = {input_stage.normalizer.resolve(job.url, u.strip()): t for u, t in listed}
            for url in own:
                modified(url, times[url])
    return Outcome.success


def own_host_urls(sitemap_url: str, urls: list[str],
                  normalizer: Normalizer) -> tuple[list[str], int]:
    """The listed URLs of the sitemap's own host (resolved), and how many were of another.
    Those that do not resolve are left out, as input leaves out such links."""
    host = host_of(sitemap_url)
    own: list[str] = []
    foreign = 0
    for raw in urls:
        url = normalizer.resolve(sitemap_url, raw.strip())
        if url is None:
            continue
        if host_of(url) == host:
            own.append(url)
        else:
            foreign += 1
    return own, foreign
