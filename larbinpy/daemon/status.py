"""The crawl's figures in one dict: what the status page, status.json and /metrics show.

Not a pipeline stage. The daemon's faces never read the crawler's stages: the crawler hands
them plain readings (`Gauges`, `Figures`) through the `StatusSource` protocol, so nothing in
`larbinpy.daemon` imports the crawler or the stages.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from larbinpy.frontier.endings import Ended
from larbinpy.stats import FAILURE_KINDS, Outcome, Stats

FAILURES_KEPT = 20


@dataclass(frozen=True, slots=True)
class Gauges:
    """The figures that cost nothing to read (the progress line reads them every second)."""

    stats: Stats  # outcome counters and throughput samples; read, never written
    queued_per_priority: dict[int, int]  # the frontier's FIFOs
    queued_in_sites: int  # jobs in the site queues, in memory and spilled
    sites_known: int
    in_flight: int  # fetches running (connections open)
    idle: bool  # nothing queued, parked or in flight anywhere (Crawler.idle)
    stopping: bool  # a stop was requested


@dataclass(frozen=True, slots=True)
class Figures:
    """Every figure of the status page: the gauges plus what takes a walk over the sites."""

    gauges: Gauges
    site_states: dict[str, int]  # sites by SiteState value ("waiting DNS", "ready", ...)
    sites_parked: int  # sites waiting on a politeness timer or their IP's turn
    outputs: dict[str, Any]  # the outputs' own status dict
    cluster: dict[str, Any] | None  # scale-out: every node's figures (cluster/__init__.py)
    version: str
    tls_verify: bool
    proxy: tuple[str, int] | None
    # when not idle, what the crawl waits for: robots.txt retries (site and time), sites
    # parked on politeness timers
    waiting_for: tuple[str, ...] = ()
    # the local seen-set: {"kind": "exact"|"bitmap", "bitmap_fill": fraction of the bits set,
    # "expected_loss": new URLs expected dropped so far by collisions}; None in a cluster
    seen_set: dict[str, Any] | None = None
    # the last FAILURES_KEPT failures, oldest first (RecentFailures.lines)
    failures: tuple[dict[str, Any], ...] = ()
    # recrawl on: {"scheduled", "due_now", "overdue", "max_lateness_s", "revisits" (by
    # outcome kind), "not_modified_share", "freshness", "discovery" (stages/discovery.py:
    # "found_by_revisits", "delays_last_hour", "delay_median_s", "delay_p90_s",
    # "top_pages")}; None without recrawl
    recrawl: dict[str, Any] | None = None


class RecentFailures:
    """A ring of the last failures the crawl log recorded (`CrawlLog.on_record` feeds it)."""

    def __init__(self, keep: int = FAILURES_KEPT) -> None:
        self._ring: deque[dict[str, Any]] = deque(maxlen=keep)

    def ended(self, e: Ended) -> None:
        """One final outcome (an `Endings` subscriber): kept when it is one of
        FAILURE_KINDS."""
        if e.kind in FAILURE_KINDS:
            self._ring.append({"t": round(time.time(), 3), "url": e.job.url,
                               "kind": e.kind.value, "status": e.status})

    def lines(self) -> tuple[dict[str, Any], ...]:
        """The failures kept, oldest first: wall-clock time `t`, `url`, `kind`, `status`."""
        return tuple(self._ring)


class StatusSource(Protocol):
    """What the daemon's faces read of a running crawl (`Crawler` provides it)."""

    def gauges(self) -> Gauges:
        """The cheap figures, now."""
        ...

    def figures(self) -> Figures:
        """Every figure, now."""
        ...

    def sites_view(self) -> dict[str, Any]:
        """The per-site view (`frontier/siteview.top_sites`): the busiest and the most failing
        sites."""
        ...

    def site_view(self, host: str) -> list[dict[str, Any]]:
        """The sites of one host[:port] with their last outcomes (`siteview.site_detail`);
        empty when the crawl holds none."""
        ...


def snapshot(source: StatusSource) -> dict[str, Any]:
    """Every figure of the status page, JSON-ready."""
    f = source.figures()
    g, stats = f.gauges, f.gauges.stats
    pps10, bps10 = stats.rates(10.0)
    pps, bps = stats.overall_rates()
    states = f.site_states
    return {
        "version": f.version,
        "uptime_s": round(time.monotonic() - stats.started, 1),
        "pages": stats.pages,
        "bytes": stats.bytes,
        "pages_per_s": {"last_10s": round(pps10, 2), "since_start": round(pps, 2)},
        "bytes_per_s": {"last_10s": round(bps10, 1), "since_start": round(bps, 1)},
        "urls_seen": stats.urls_seen,
        "queued_per_priority": {str(p): n for p, n in g.queued_per_priority.items()},
        "queued_in_sites": g.queued_in_sites,
        "sites": {
            "known": g.sites_known,
            "waiting_dns": states["waiting DNS"],
            "waiting_robots": states["waiting robots"],
            "ready": states["ready"],
            "parked": f.sites_parked,
            "dead": states["dead"],
        },
        "connections_open": g.in_flight,
        "dns_queries": stats.dns_queries,
        "robots_fetches": stats.robots_fetches,
        "robots_refusals": stats.outcomes[Outcome.forbiddenRobots],
        "links_dropped": stats.links_dropped,
        "requisites_cut": stats.requisites_cut,
        "output_errors": stats.output_errors,
        "resource_waits": stats.resource_waits,
        "outputs": f.outputs,
        "outcomes": dict(stats.outcomes),
        "errors": stats.errors(),
        "history": [
            {"t": round(t - stats.started, 1), "pages": p, "bytes": b}
            for t, p, b in list(stats.samples)[-300:]
        ],
        "tls_verify": f.tls_verify,
        "proxy": "{}:{}".format(*f.proxy) if f.proxy else None,
        "idle": g.idle,
        # scale-out: this node's id, every node's figures and the totals (cluster/__init__.py)
        "cluster": f.cluster,
        "stopping": g.stopping,
        # when not idle: robots.txt retries (site, time) and timers the crawl waits for
        "waiting_for": [] if g.idle else list(f.waiting_for),
        "seen_set": f.seen_set,
        # the last failures (FAILURE_KINDS), newest first: t (Unix time), url, kind, status
        "recent_failures": list(reversed(f.failures)),
        # recrawl on: the schedule (pages scheduled, due now, overdue and by how much),
        # revisits by outcome, the 304 share and the copy's estimated freshness
        "recrawl": f.recrawl,
    }
