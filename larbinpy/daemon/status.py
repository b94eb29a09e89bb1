"""The crawl's figures in one dict: what the status page, status.json and /metrics show.

Not a pipeline stage: it only reads each stage's counters.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from larbinpy.crawler import Crawler


def snapshot(crawler: Crawler) -> dict[str, Any]:
    """Every figure of the status page, JSON-ready."""
    stats = crawler.stats
    pps10, bps10 = stats.rates(10.0)
    pps, bps = stats.overall_rates()
    sites = crawler.sites.count_by_state()
    parked = sum(1 for s in crawler.sites.by_key.values() if s.timer is not None or s.waiting_ip)
    return {
        "version": crawler.version,
        "uptime_s": round(time.monotonic() - stats.started, 1),
        "pages": stats.pages,
        "bytes": stats.bytes,
        "pages_per_s": {"last_10s": round(pps10, 2), "since_start": round(pps, 2)},
        "bytes_per_s": {"last_10s": round(bps10, 1), "since_start": round(bps, 1)},
        "urls_seen": stats.urls_seen,
        "queued_per_priority": {str(p): n for p, n in crawler.frontier.sizes().items()},
        "queued_in_sites": crawler.sites.queued,
        "sites": {
            "known": len(crawler.sites.by_key),
            "waiting_dns": sites["waiting DNS"],
            "waiting_robots": sites["waiting robots"],
            "ready": sites["ready"],
            "parked": parked,
            "dead": sites["dead"],
        },
        "connections_open": crawler.opener.in_flight,
        "dns_queries": stats.dns_queries,
        "robots_fetches": stats.robots_fetches,
        "robots_refusals": stats.outcomes["forbiddenRobots"],
        "links_dropped": stats.links_dropped,
        "output_errors": stats.output_errors,
        "outputs": crawler.outputs.status(),
        "outcomes": dict(stats.outcomes),
        "errors": stats.errors(),
        "history": [
            {"t": round(t - stats.started, 1), "pages": p, "bytes": b}
            for t, p, b in list(stats.samples)[-300:]
        ],
        "tls_verify": crawler.cfg.tls_verify,
        "proxy": "{}:{}".format(*crawler.cfg.proxy) if crawler.cfg.proxy else None,
        "idle": crawler.idle(),
        # scale-out: this node's id, every node's figures and the totals (cluster/__init__.py)
        "cluster": crawler.cluster.status() if crawler.cluster is not None else None,
        "stopping": crawler.stop_requested,
    }
