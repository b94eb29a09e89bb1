"""The table of sites and IP slots that the sequencer, DNS and opener stages share.

It only holds records and the counters that "is the crawl done?" reads; each stage decides
what happens to a site. Jobs enter a site's queue here (`enqueue`) and leave it here
(`take`, `drop`), so `queued` is always exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .records import IpSlot, Job, Site, SiteState
from .stats import Stats
from .urls import host_of, site_key


class Sites:
    """Every site and IP slot of the crawl."""

    def __init__(self, stats: Stats, default_delay: float) -> None:
        self.stats = stats
        self.default_delay = default_delay  # waitDuration; robots.txt may raise it per site
        self.by_key: dict[str, Site] = {}
        self.ips: dict[str, IpSlot] = {}
        self.queued = 0  # jobs in all site queues
        self.on_new_site: Callable[[Site], None] = lambda site: None
        self.on_job: Callable[[Site], None] = lambda site: None

    def enqueue(self, job: Job, now: float) -> None:
        """Put a job on its site's queue, creating the site (and asking DNS) when new."""
        key = site_key(job.url)
        site = self.by_key.get(key)
        if site is None:
            site = self.by_key[key] = Site(key, host_of(job.url), delay=self.default_delay)
            site.queue.append(job)
            self.queued += 1
            self.on_new_site(site)
            return
        if site.state is SiteState.DEAD:
            if now < site.dead_until:
                self.stats.count(site.dead_reason)
                return
            site.queue.append(job)
            self.queued += 1
            self.on_new_site(site)  # negative cache expired: try DNS again
            return
        site.queue.append(job)
        self.queued += 1
        self.on_job(site)

    def take(self, site: Site) -> Job:
        """The next job of a site's queue."""
        self.queued -= 1
        return site.queue.popleft()

    def drop(self, site: Site, kind: str) -> None:
        """Drop every queued job of a site, counted under `kind`."""
        n = len(site.queue)
        site.queue.clear()
        self.queued -= n
        self.stats.count(kind, n)

    def ip_slot(self, addr: str) -> IpSlot:
        """The politeness slot of an IP address."""
        slot = self.ips.get(addr)
        if slot is None:
            slot = self.ips[addr] = IpSlot(addr)
        return slot

    def jobs(self) -> Iterator[Job]:
        """Every queued job of every site, for a checkpoint."""
        for site in self.by_key.values():
            yield from site.queue

    def count_by_state(self) -> dict[str, int]:
        """How many sites are in each state (for the status page)."""
        counts = {s.value: 0 for s in SiteState}
        for site in self.by_key.values():
            counts[site.state.value] += 1
        return counts
