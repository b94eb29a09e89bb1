"""The per-site view's readings of the site table: the busiest and the most failing sites, and
one site's detail, as plain JSON-ready dicts (the status page's `/sites`, `/sites.json`,
`/sites/HOST`; `daemon/sitespage.py` draws them).

Not a pipeline stage: it only reads the `Sites` table and each site's `SiteTally` (fed by
`Sites.tally`, an `Endings` subscriber). It covers the sites the table holds: those with work
and the last `MAX_IDLE_SITES` idle ones; a forgotten site's tally is forgotten with it (the
crawl log, and `larbinpy report` over it, has every URL).

The top sites come from two small boards the site table keeps up to date as outcomes come
(`frontier/leaders.py`), not from sorting the table; the sites backing off now take one
plain walk of it (a few ms at 100,000 sites). tests/test_sites_view.py checks the whole answer
stays under 100 ms with 100,000 sites.
"""

from __future__ import annotations

import heapq
from typing import Any

from larbinpy.frontier.leaders import TOP_SHOWN
from larbinpy.frontier.sites import Sites, failures, pages_fetched
from larbinpy.records import Site, SiteState, SiteTally
from larbinpy.stats import Outcome


def host_part(key: str) -> str:
    """What `/sites/HOST` names a site by: its key without the scheme (host[:port])."""
    return key.partition("://")[2]


def top_sites(sites: Sites, n: int = TOP_SHOWN) -> dict[str, Any]:
    """The `n` sites with the most pages fetched, and the `n` most failing: failures counted,
    plus 429/503s in a row (a site backing off may have no final outcome yet)."""
    def alive(site: Site) -> bool:
        return sites.by_key.get(site.key) is site

    busiest = sites.busiest.top(alive)
    if busiest is None:  # the board lost sites the table forgot: walk the table
        busiest = heapq.nlargest(n, sites.by_key.values(), key=pages_fetched)
        busiest = [s for s in busiest if pages_fetched(s)]
    failing = sites.failing.top(alive)
    if failing is None:
        failing = [s for s in sites.by_key.values() if failures(s)]
    # sites backing off now: one walk of the table, no attribute beyond the record's own
    failing += [s for s in sites.by_key.values() if s.backoffs and not failures(s)]
    clock = _Clock(sites)
    return {
        "sites_known": len(sites.by_key),
        "busiest": [reading(sites, site, clock) for site in busiest[:n]],
        "failing": [reading(sites, site, clock)
                    for site in heapq.nlargest(n, failing, key=_trouble)],
    }


def _trouble(site: Site) -> int:
    """How failing a site is: its failures, and its 429/503s in a row."""
    return failures(site) + site.backoffs


def site_detail(sites: Sites, host: str) -> list[dict[str, Any]]:
    """Every site of this host[:port] (http and https are two sites), with its last
    outcomes; empty when the table holds none."""
    clock = _Clock(sites)
    found = []
    for scheme in ("http", "https"):
        site = sites.find(f"{scheme}://{host.lower()}")
        if site is not None:
            found.append(detail(sites, site, clock))
    return found


class _Clock:
    """The loop's time now and what turns the loop's clock into the wall clock."""

    def __init__(self, sites: Sites) -> None:
        self.now = sites.clock.now()
        self.to_wall = sites.clock.wall() - self.now

    def wall(self, at: float) -> float | None:
        """A loop time as Unix time, or None when it has passed."""
        return round(at + self.to_wall, 3) if at > self.now else None


def reading(sites: Sites, site: Site, clock: _Clock) -> dict[str, Any]:
    """A site's row of the view."""
    tally = site.tally or SiteTally()
    recent = tally.recent()
    last = recent[0] if recent else None
    ip = site.ip
    next_at = max(site.ready_at, ip.ready_at if ip is not None else 0.0)
    dead = site.state is SiteState.DEAD
    return {
        "site": site.key,
        "host": host_part(site.key),
        "state": site.state.value,
        "pages": tally.answered,
        "queued": sites.waiting_jobs(site),
        "in_flight": site.in_flight,
        "last": None if last is None else {"t": last.t, "kind": last.kind.value,
                                           "status": last.status},
        "failures": tally.failed,
        "outcomes": {kind.value: n for kind, n in sorted(tally.kinds.items())},
        "backoff": {"in_a_row": site.backoffs,
                    "until": clock.wall(site.ready_at) if site.backoffs else None},
        "robots": robots_state(site, clock),
        "dead": {"reason": site.dead_reason.value, "note": site.dead_note,
                 "until": clock.wall(site.dead_until)} if dead else None,
        # None: it may fetch now (its own clock and its IP's have passed)
        "next_fetch": clock.wall(site.dead_until if dead else next_at),
    }


def detail(sites: Sites, site: Site, clock: _Clock) -> dict[str, Any]:
    """A site's row, with its address, delay, page count and last outcomes (newest first)."""
    tally = site.tally
    return {
        **reading(sites, site, clock),
        "ip": site.ip.addr if site.ip is not None else None,
        "delay_s": site.delay,
        "fetches_started": site.pages,  # what maxPagesPerSite counts, kept across restarts
        "recent": [] if tally is None else [
            {"t": r.t, "kind": r.kind.value, "status": r.status, "path": r.path}
            for r in tally.recent()],
    }


def robots_state(site: Site, clock: _Clock) -> dict[str, Any]:
    """Where the site's robots.txt stands: `state` one of "not asked" (robots off, or DNS
    first), "to fetch", "failing" (`failures` in a row, the retry waits), "disallow all"
    (given up after failures, `until`), "allow all" (none, or empty) or "rules" (`bytes`),
    with `until` when it is asked again."""
    if site.state is SiteState.DEAD and site.dead_reason is Outcome.forbiddenRobots:
        return {"state": "disallow all", "until": clock.wall(site.dead_until),
                "note": site.dead_note}
    if site.robots_failures:
        return {"state": "failing", "failures": site.robots_failures,
                "retry": clock.wall(site.ready_at)}
    if site.state is SiteState.ROBOTS:
        return {"state": "to fetch"}
    if not site.robots_expires:
        return {"state": "not asked"}
    until = clock.wall(site.robots_expires)
    if site.robots is None:
        return {"state": "allow all", "until": until}
    return {"state": "rules", "bytes": len(site.robots), "until": until}
