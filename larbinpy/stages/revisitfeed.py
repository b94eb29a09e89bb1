"""The recrawl's feeder: due visits popped from the schedule, handed to their sites.

Its task (`run`) pops the visits that came due (`Schedule.pop_due`, earliest first; every
recrawlMin / 8, at most POP_EVERY) while fewer than PENDING_MAX wait in memory (PER_SITE_MAX a
site; a busier site's are put back a little later), so memory is bounded whatever the
schedule holds. A site is fed one of its waiting visits (`feed`), the most urgent first
(`Policy.most_urgent`), as a `REVISIT` job behind its never-fetched URLs, only when it has no
other job queued, fewer than `connectionsPerHost` revisits queued or in flight, and its
revisit spacing (recrawlShare of its politeness capacity, a clock the site table keeps with
the site's other clocks) has passed; it is fed again when any fetch of the site ends, when
one of its revisits ends, or by the site's revisit timer.

In a cluster, a due page whose site another node owns now goes there through the node's
`hand_over` seam, with its history, and leaves this node's schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Container
from dataclasses import replace

from larbinpy.clock import Clock
from larbinpy.frontier.recrawl import POP_EVERY, Policy, Waiting, made_early
from larbinpy.frontier.schedule import Schedule, Visit
from larbinpy.frontier.sites import Sites
from larbinpy.links.urls import site_key
from larbinpy.records import Job, JobKind, Site

log = logging.getLogger("larbinpy.recrawl")

PENDING_MAX = 10_000  # visits popped and waiting for their site, at most
PER_SITE_MAX = 64  # ... of one site; more of its due visits are put back a little later

# The node's `hand_over`: True when another node owns the site of a due revisit (`job`), and
# the page's history (`visit`) went there with it (and its site's state); False: the site is
# this node's.
HandOver = Callable[[str, Job, Visit], bool]


class RevisitFeed:
    """Due visits, waiting by site until their site can take one (see the module)."""

    def __init__(self, schedule: Schedule, sites: Sites, policy: Policy, clock: Clock,
                 audits: Container[str], hand_over: HandOver, on_fed: Callable[[], None],
                 per_host: int, pop_every: float) -> None:
        self.schedule, self.sites, self.policy, self.clock = schedule, sites, policy, clock
        self.audits = audits  # URLs whose next fetch checks a 304: they go first
        self.hand_over = hand_over
        self.on_fed = on_fed  # a revisit job was queued: "is the crawl done?" may change
        self.per_host, self.every = per_host, pop_every
        # popped, by site, until the site takes them (with their rates: `recrawl.Waiting`)
        self.waiting: dict[str, list[Waiting]] = {}
        self.pending = 0  # visits in `waiting`
        self.queued: dict[str, int] = {}  # revisit jobs in a site's queue or in flight
        self.wake = asyncio.Event()

    async def run(self) -> None:
        """Forever: pop what came due (bounded), feed the sites that can take it."""
        while True:
            try:
                self.pop(self.clock.wall())
            except OSError:  # the schedule's files refused (disk full, EMFILE): try again soon
                log.exception("recrawl: cannot read the schedule; retrying")
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.every)

    def pop(self, now: float) -> int:
        """Pop due visits while fewer than PENDING_MAX / 2 wait; feed their sites."""
        if self.pending > PENDING_MAX // 2:
            return 0
        visits = self.schedule.pop_due(now, PENDING_MAX - self.pending)
        keys: dict[str, None] = {}
        for visit in visits:
            key = site_key(visit.url)
            fifo = self.waiting.setdefault(key, [])
            keys[key] = None
            popped = (visit, self.policy.rate(visit.stats), self.policy.found(visit.stats))
            if len(fifo) >= PER_SITE_MAX and not self._first(visit):
                # its site cannot take them all soon: the least urgent goes back (not the one
                # just popped: a front page due now must not wait behind the backlog of a
                # site whose revisits always ask a little more than it serves), until its
                # urgency reaches the least kept (a page popped in its slack, whose urgency
                # rises fast, is back within a look or two), at most until the backlog
                # could drain. Its record keeps its interval: only its due time moves.
                back, least = self._least_urgent(fifo, popped, now)
                drain = max(self._spacing(key) * len(fifo), POP_EVERY)
                later = max(POP_EVERY, self.policy.urgent_in(back, least, now, drain))
                self.schedule.put(replace(back[0], due=now + later))
                continue
            fifo.append(popped)
            self.pending += 1
        for key in keys:
            self.feed(key)
        return len(visits)

    def _least_urgent(self, fifo: list[Waiting], popped: Waiting, now: float
                      ) -> tuple[Waiting, float]:
        """The least urgent of a full site's waiting visits and the one just `popped`, which
        takes its place if more urgent (audits and visits made due early stay); with the
        urgency of the least urgent one kept."""
        urgency = self.policy.urgency
        values = [math.inf if self._first(v) else urgency(v, rate, found, now)
                  for v, rate, found in fifo]
        mine = urgency(popped[0], popped[1], popped[2], now)
        worst = min(range(len(fifo)), key=values.__getitem__)
        if values[worst] >= mine:
            return popped, values[worst]
        back, fifo[worst], values[worst] = fifo[worst], popped, mine
        return back, min(values)

    def _first(self, visit: Visit) -> bool:
        """Does the visit go before any other of its site's: an audit of a 304, or a visit
        made due early (`recrawl.made_early`)? Such a visit is never put back."""
        return visit.url in self.audits or made_early(visit)

    def feed(self, key: str) -> None:
        """Give a site its next waiting revisit if it can take one now: no other job queued
        (never-fetched URLs first), fewer than connectionsPerHost revisits of it queued or in
        flight, and its revisit spacing passed."""
        fifo = self.waiting.get(key)
        while fifo and self.queued.get(key, 0) < self.per_host:
            site = self.sites.find(key)
            if site is not None and not self._may_take(site):
                return  # fed again when one of its fetches ends, or by its revisit timer
            visit = fifo.pop(self.policy.most_urgent(fifo, self.audits, self.clock.wall()))[0]
            self.pending -= 1
            if not fifo:
                del self.waiting[key]
            self._hand(key, visit)

    def _may_take(self, site: Site) -> bool:
        """May the site take a revisit now? (If its spacing holds it back, its revisit timer
        is armed to feed it.)"""
        if self.sites.has_work(site):
            return False
        wait = self.sites.space_revisit(site, self.clock.now(), self.policy.spacing(site.delay))
        if wait is not None:
            self.sites.arm_revisit(site, wait, self._spaced)
            return False
        return True

    def _hand(self, key: str, visit: Visit) -> None:
        """A due visit as a `REVISIT` job to its site's queue, or to its site's owner."""
        job = Job(visit.url, visit.depth, visit.priority, tag=visit.tag, kind=JobKind.REVISIT)
        if self.hand_over(key, job, visit):
            # a cluster: its site is another node's now; the page went there with its
            # history (`adopt`), and leaves this node's schedule
            self.schedule.drop(visit.url)
            return
        self.queued[key] = self.queued.get(key, 0) + 1
        self.sites.enqueue(job, self.clock.now())
        self.on_fed()

    def _spaced(self, site: Site) -> None:
        """A site's revisit timer fired: its spacing has passed."""
        self.sites.revisit_timer_fired(site)
        self.feed(site.key)

    def _spacing(self, key: str) -> float:
        """Seconds between two revisits of a site (its politeness delay over its share)."""
        site = self.sites.find(key)
        return self.policy.spacing(site.delay if site is not None else self.sites.default_delay)

    def release(self, job: Job) -> None:
        """A revisit job ended (fetched, dropped or stale): its site may take the next one."""
        key = site_key(job.url)
        left = self.queued.get(key, 0) - 1
        if left > 0:
            self.queued[key] = left
        else:
            self.queued.pop(key, None)
        self.feed(key)

    def after_fetch(self, key: str) -> None:
        """Any fetch of a site ended: with its queue empty, a revisit may go next."""
        if key in self.waiting:
            self.feed(key)
