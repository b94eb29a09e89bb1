"""After the reader, for sitemap jobs: the URLs a fetched sitemap lists go to the input stage.

The reader reads a 2xx sitemap job's body (at most `links/sitemaps.MAX_BYTES`, cut rather than
refused) and hands it here instead of to the parser; `links/sitemaps.parse` finds the URLs. An
index's URLs go back to input as sitemap jobs one nesting level down (the job's depth), a
urlset's as page jobs; URLs beyond the protocol's limits are counted outOfScope.
"""

from __future__ import annotations

from larbinpy.links.sitemaps import SitemapError, parse
from larbinpy.records import Job
from larbinpy.stages.input import Input
from larbinpy.stats import Outcome, Stats


def take_sitemap(job: Job, body: bytes, input_stage: Input, stats: Stats) -> Outcome:
    """A sitemap's URLs to input: the fetch's outcome (badEncoding if it does not inflate)."""
    try:
        found = parse(body)
    except SitemapError:
        return Outcome.badEncoding
    stats.count(Outcome.outOfScope, found.dropped)  # over the protocol's limits
    if found.is_index:
        input_stage.add_sitemaps(job.url, found.urls, job.depth - 1)
    else:
        input_stage.add_sitemap_urls(job.url, found.urls)
    return Outcome.success
