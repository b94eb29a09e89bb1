"""After the reader, for feeds (RSS, Atom) and sitemaps found as links: their URLs to input.

A feed is a page the crawl found as a link (a `<link rel="alternate">`); the reader tells it
by its content type (`is_feed_type`), or reads a generic XML body (`is_xml_type`) under the
sitemap limits and lets its root element say (`take_xml`). Either way the body was read like
a sitemap's, at most `links/sitemaps.MAX_BYTES` and cut rather than refused, so a feed holds
no more of `documentMemory` than a page may.

`take_feed` hands the feed's entries to input the way a page's links go (`Input.add_links`,
the feed as parent), not the way a sitemap's URLs go: a feed is found by following links, so
its entries are one hop further (depthInSite still bounds the crawl) and take the feed's
priority; and when the feed is revisited (`recrawl on`), the new entries it lists count as
what its revisit discovered, so a feed that announces new pages is revisited sooner.

A feed speaks only for its own host, as a sitemap does (`stages/sitemaps.own_host_urls`): an
entry of another host is counted outOfScope and never fetched, or any site could steer the
crawl onto another's pages.

With `recrawl on`, each dated entry (the newest LASTMOD_CHECKS) is told to `modified`, the
recrawl's lastmod signal: an entry newer than its page's last fetch makes the page due now,
while the site's dates have proved true (`stages/revisits.py`; a false one ends the trust).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from larbinpy.links.feeds import FeedError, parse, sniff
from larbinpy.links.sitemaps import MAX_NESTING
from larbinpy.records import Job
from larbinpy.stages.input import Input
from larbinpy.stages.sitemaps import LASTMOD_CHECKS, own_host_urls, take_sitemap
from larbinpy.stats import Outcome, Stats

# a feed by its content type; a generic XML type may be a feed or a sitemap (sniffed)
FEED_TYPES = frozenset({"application/rss+xml", "application/atom+xml"})
XML_TYPES = frozenset({"application/xml", "text/xml", "application/rdf+xml"})

Modified = Callable[[str, float], None]


def is_feed_type(ctype: str) -> bool:
    """Is this content type a feed's, whatever the body?"""
    return ctype in FEED_TYPES


def is_xml_type(ctype: str) -> bool:
    """Is this content type one a feed or a sitemap may come under (its body then says)?"""
    return ctype in XML_TYPES


def take_xml(job: Job, ctype: str, body: bytes, input_stage: Input, stats: Stats,
             modified: Modified | None = None) -> Outcome:
    """A page job's XML body (read under the sitemap limits): a feed's entries or a
    sitemap's URLs to input; badType when it is neither (an XML document nobody reads)."""
    kind = "feed" if is_feed_type(ctype) else sniff(body)
    if kind == "feed":
        return take_feed(job, body, input_stage, stats, modified)
    if kind == "sitemap" and input_stage.cfg.sitemaps:  # (`sitemaps off`: none is read)
        # a sitemap found as a link: its index may nest no deeper than robots.txt's would
        nested = replace(job, depth=min(job.depth, MAX_NESTING))
        outcome = take_sitemap(nested, body, input_stage, stats, modified)
        job.found = nested.found  # (what this fetch discovered, for the recrawl)
        return outcome
    return Outcome.badType


def take_feed(job: Job, body: bytes, input_stage: Input, stats: Stats,
              modified: Modified | None = None) -> Outcome:
    """A feed's entries of its own host to input as the feed's links: the fetch's outcome
    (badEncoding if it does not inflate). `modified` (recrawl): told the dated entries."""
    try:
        found = parse(body)
    except FeedError:
        return Outcome.badEncoding
    normalizer = input_stage.normalizer
    urls, foreign = own_host_urls(job.url, [u for u, _ in found.entries], normalizer)
    # over the limits, without a link, or of another host: never fetched
    stats.count(Outcome.outOfScope, found.dropped + foreign)
    input_stage.add_links(job, job.url, list(dict.fromkeys(urls)))
    if modified is not None:
        own = set(urls)
        dated = [(normalizer.resolve(job.url, u.strip()), t) for u, t in found.entries
                 if t is not None]
        dated.sort(key=lambda e: -e[1])  # the newest first
        for url, when in dated[:LASTMOD_CHECKS]:
            if url is not None and url in own:
                modified(url, when)
    return Outcome.success
