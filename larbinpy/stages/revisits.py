"""Recrawl (`recrawl on`): every page fetched is scheduled again, and comes back when due.

This stage closes the pipeline's loop, from three parts with one job each:

- the policy (`frontier/recrawl.py`, pure): from a page's history, a fetch's answer and its
  site's state, the page's next visit and what the site's validators proved;
- the schedule (`frontier/schedule.py`): every page's history and due time, on disk;
- the feeder (`stages/revisitfeed.py`): due visits popped and handed to their sites.

`Revisits` joins them behind the `Recrawl` seam (`stages/recrawl.py`). It is told every page's
final outcome (`ended`, an `Endings` subscriber, before the crawl log, whose line says the due
time it sets): it applies the policy and puts the page's new record in the schedule, a failed
page on the failures' longer schedule, a page a rule now refuses out of it. Before a revisit
the reader asks `prepare`: the page's history, and the validators its site has not been caught
lying with, for a conditional GET. Each site's state (`SiteRecrawl`: its budget multiplier,
which validators hold, its audit counts) is kept by the site table while the site is in
memory and in `stateDir/schedule/sites.sqlite` (`recrawldb.SiteStates`) for a restart or a
site the table forgot.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from larbinpy.clock import Clock
from larbinpy.config import Config
from larbinpy.frontier import freshness
from larbinpy.frontier.endings import Ended
from larbinpy.frontier.recrawl import (
    GOOD,
    POP_EVERY,
    RETRIED,
    Answer,
    Policy,
    SiteRecrawl,
    interval_of,
    revisit_of,
)
from larbinpy.frontier.recrawldb import SiteStates
from larbinpy.frontier.schedule import Schedule, Visit
from larbinpy.frontier.sites import Sites
from larbinpy.links.urls import site_key
from larbinpy.records import Job, JobKind, Revisit, Site
from larbinpy.stages.discovery import Discovery
from larbinpy.stages.recrawl import Prepared
from larbinpy.stages.revisitfeed import HandOver, RevisitFeed
from larbinpy.stats import Outcome
from larbinpy.turn import Phase, TurnEnd

CLAIMS_KEPT = 100_000  # sitemap lastmods awaiting the fetch that checks them
# A page requisite's history (validators, digest) is kept in the schedule with this due time
# (2100-01-01): never due on its own; it is fetched again when a page that needs it changes.
REQUISITE_DUE = 4102444800.0
# a requisite's outcomes that say what it is now (a new capture, or the copy kept)
REQUISITE_KEPT = frozenset({Outcome.requisite, Outcome.notModified, Outcome.unchanged})
FRESHNESS_SAMPLES = 10_000  # pages whose expected freshness makes the crawl's estimate


class Revisits:
    """The recrawl: the policy, the schedule and the feeder behind the `Recrawl` seam."""

    def __init__(self, cfg: Config, schedule: Schedule, states: SiteStates, sites: Sites,
                 clock: Clock, turn: TurnEnd, on_fed: Callable[[], None],
                 hand_over: HandOver) -> None:
        self.schedule, self.states, self.sites, self.clock = schedule, states, sites, clock
        self.policy = Policy(cfg.recrawl_min, cfg.recrawl_max, cfg.connections_per_host,
                             cfg.recrawl_share)
        self.recheck_after = cfg.recrawl_min  # a requisite is checked again at most this often
        self.audits: set[str] = set()  # URLs whose next fetch checks a 304 (no validators)
        self.feed = RevisitFeed(schedule, sites, self.policy, clock, self.audits, hand_over,
                                on_fed, cfg.connections_per_host,
                                min(POP_EVERY, cfg.recrawl_min / 8))
        self.revisits: dict[str, int] = {}  # revisits' outcomes, by kind
        # sitemap <lastmod>s that made a page due, until its fetch proves them true or false
        self.claims: OrderedDict[str, float] = OrderedDict()
        self._fresh: deque[float] = deque(maxlen=FRESHNESS_SAMPLES)
        self._fresh_sum = 0.0
        self.turn = turn
        self._ended: list[Ended] = []  # the turn's outcomes, scheduled at its end
        self.discovery = Discovery()
        # the turn's pages scheduled once parsed (what they discovered is known), their due
        # times on disk before the done-record names them done
        turn.on(Phase.SCHEDULE, self._schedule_turn)

    @property
    def pending(self) -> int:
        """Due visits popped and not yet handed to their site."""
        return self.feed.pending

    async def run(self) -> None:
        """The feeder's task."""
        await self.feed.run()

    def release(self, job: Job) -> None:
        """A revisit job ended or went back to its queue: its site may take the next one."""
        self.feed.release(job)

    def skipped(self, site_key: str) -> None:
        """A replayed job left the site's queue unfetched: with the queue empty, a waiting
        revisit goes (no fetch ends to feed it: after a kill -9, a site whose queue held only
        such jobs was fed no revisit again)."""
        self.feed.after_fetch(site_key)

    # --- the reader's side ---

    def prepare(self, site: Site, job: Job) -> Prepared | None:
        """Before a fetch: the `Answer` to fill and, for a revisit, the conditional GET's
        headers; None when the revisit is stale (the page was fetched and scheduled again
        since it was popped, e.g. a checkpoint's job replayed after a kill)."""
        if job.kind is JobKind.PAGE:
            return Answer(None), None
        if job.kind is JobKind.SITEMAP:  # read whole (its URLs), its history kept if any
            return Answer(self.schedule.get(job.url)), None
        if job.kind is JobKind.REQUISITE:
            return self._prepare_requisite(site, job)
        visit = self.schedule.get(job.url)
        if visit is None:  # handed over by another cluster node: a first visit here
            return Answer(None), None
        if visit.due > self.clock.wall():
            self.release(job)
            return None
        audit = job.url in self.audits
        self.audits.discard(job.url)
        headers = self.policy.conditional_headers(visit, self.site_state(site), audit)
        return Answer(visit, conditional=bool(headers), audit=audit), headers or None

    def _prepare_requisite(self, site: Site, job: Job) -> Prepared | None:
        """A requisite: a first fetch, or a check again (a page that needs it changed) with
        the validators of its last answer; None (not fetched) when it was checked less than
        recrawlMin ago (a site's stylesheet needed by the many pages that changed since)."""
        visit = self.schedule.get(job.url)
        if visit is None:
            return Answer(None), None
        if visit.fetched_at > self.clock.wall() - self.recheck_after:
            return None
        headers = self.policy.conditional_headers(visit, self.site_state(site), False)
        return Answer(visit, conditional=bool(headers)), headers or None

    def revisit_of(self, answer: Answer | None, url: str, kind: Outcome) -> Revisit | None:
        """The revisit record a page gets: a 304, or a body identical to the capture kept."""
        return revisit_of(answer, url, kind)

    # --- scheduling (an `Endings` subscriber) ---

    def ended(self, e: Ended) -> None:
        """A job's final outcome: the page (a sitemap too: it is revisited for the new pages
        it lists, on a schedule of its own) is scheduled again at the end of the turn, once
        its links are parsed, and `e.due` then says when (the crawl log's `next`)."""
        self._ended.append(e)
        self.turn.due()

    def _schedule_turn(self) -> None:
        """The `SCHEDULE` phase: the turn's pages scheduled again, the schedule flushed."""
        if self._ended:
            ended, self._ended = self._ended, []
            for e in ended:
                e.due = self.schedule_page(e.job, e.kind, e.answer)
        self.schedule.flush()

    def discovered(self, page: Job, jobs: list[Job]) -> None:
        """New URLs a revisited page's links gave: when each is first fetched makes the
        discovery delay."""
        self.discovery.found(page.url, [job.url for job in jobs], self.clock.wall())

    def schedule_page(self, job: Job, kind: Outcome, answer: Answer | None) -> float | None:
        """A page's final outcome: its next record in the schedule; when it is due (None:
        not at all)."""
        key = site_key(job.url)
        if job.kind is JobKind.REVISIT:
            self.revisits[kind.value] = self.revisits.get(kind.value, 0) + 1
            self.feed.release(job)
        elif self.discovery.waiting:
            self.discovery.fetched(job.url, self.clock.wall())
        self.feed.after_fetch(key)
        if job.kind is JobKind.REQUISITE:
            self._requisite_answered(job, kind, answer)
            return None  # never due on its own
        site = self.sites.find(key)
        if answer is None:  # ended without a request (a dead site...)
            if job.kind is not JobKind.REVISIT:
                return None  # never fetched: nothing to revisit
            answer = Answer(self.schedule.get(job.url))
            if kind not in RETRIED:  # robots.txt forbids it now...: out of the rotation
                self._leave(job, site, answer.prior)
                return None
        if kind in GOOD and site is not None:
            visit = self._observed(job, kind, answer, site)
        elif kind in RETRIED:
            visit = self._failed(job, answer, site)
        else:  # a rule keeps it from being fetched (robots.txt...), or not a page we keep
            if job.kind is JobKind.REVISIT:
                self._leave(job, site, answer.prior)
                self._keep_state(site)
            return None
        self.schedule.put(visit)
        self._keep_state(site)
        return visit.due

    def _requisite_answered(self, job: Job, kind: Outcome, answer: Answer | None) -> None:
        """A requisite's answer: its validators and payload digest kept (what its next check
        sends, and what a revisit record of it points at), due never (REQUISITE_DUE)."""
        if answer is None or kind not in REQUISITE_KEPT:
            return
        now, prior = self.clock.wall(), answer.prior
        if kind is Outcome.requisite or prior is None:  # a new capture
            visit = Visit(job.url, REQUISITE_DUE, now, answer.etag, answer.last_modified,
                          answer.digest, now, answer.status, job.depth, job.priority)
        else:  # the copy kept: a 304 (its validators stay) or the same body
            body = kind is Outcome.unchanged
            visit = replace(prior, fetched_at=now, status=answer.status,
                            etag=answer.etag if body or answer.etag else prior.etag,
                            last_modified=answer.last_modified if body else prior.last_modified)
        self.schedule.put(visit)

    def _observed(self, job: Job, kind: Outcome, answer: Answer, site: Site) -> Visit:
        """The policy's next visit of a page that answered, and what its site learned."""
        learned = self.policy.observed(
            job, kind, answer, self.site_state(site), self.clock.wall(), site.delay,
            self.sites.waiting_jobs(site),
            self.claims.pop(job.url, None) if self.claims else None)
        if learned.audit:
            self.audits.add(job.url)
        self._note_freshness(learned.freshness)
        return learned.visit

    def _failed(self, job: Job, answer: Answer, site: Site | None) -> Visit:
        """The policy's next visit of a page that failed; its site's budget counts what the
        page now costs."""
        now = self.clock.wall()
        visit = self.policy.failed(job, answer.prior, answer.status, now)
        if site is not None:
            self.site_state(site).budget.account(interval_of(answer.prior), visit.due - now)
        return visit

    def _leave(self, job: Job, site: Site | None, prior: Visit | None) -> None:
        """A page leaves the rotation (a rule forbids it now, or it is no page we keep)."""
        self.schedule.drop(job.url)
        if site is not None and prior is not None:
            self.site_state(site).budget.account(interval_of(prior), None)

    def _note_freshness(self, value: float) -> None:
        """One page's expected freshness at its new interval, for the crawl's estimate."""
        if len(self._fresh) == self._fresh.maxlen:
            self._fresh_sum -= self._fresh[0]
        self._fresh.append(value)
        self._fresh_sum += value

    # --- a site's state ---

    def site_state(self, site: Site) -> SiteRecrawl:
        """The site's recrawl state: in memory, or as a restart found it on disk, or new."""
        state = self.sites.recrawl_state(site)
        if state is None:
            state = self.states.get(site.key, 0.0) or SiteRecrawl(freshness.SiteBudget(0.0))
            self.sites.set_recrawl_state(site, state)
            state.budget.capacity = self.policy.budget_capacity(state, site.delay)
        return state

    def _keep_state(self, site: Site | None) -> None:
        """The site's recrawl state may have changed: on disk at the end of the loop turn."""
        if site is not None:
            self.states.put(site.key, self.site_state(site))

    def _known_state(self, key: str) -> SiteRecrawl | None:
        """The site's recrawl state as this node has it, in memory or on disk, without making
        one (None: it has none)."""
        site = self.sites.find(key)
        state = self.sites.recrawl_state(site) if site is not None else None
        return state if state is not None else self.states.get(key, 0.0)

    # --- sitemaps and operators ---

    @property
    def lastmod(self) -> Callable[[str, float], None]:
        """Sitemaps' lastmods go to `listed`."""
        return self.listed

    def listed(self, url: str, when: float) -> None:
        """A sitemap lists `url` as modified at `when`: due now if that is after its last fetch
        and its site's lastmods have not proved false (the fetch then checks this claim)."""
        site = self.sites.find(site_key(url))
        if site is not None and not self.site_state(site).lastmod_trusted:
            return
        if len(self.claims) >= CLAIMS_KEPT:
            self.claims.popitem(last=False)
        visit = self.schedule.get(url)
        # a lastmod names a second: it must be past the fetch's second to say anything
        if visit is not None and visit.fetched_at and when >= math.floor(visit.fetched_at) + 1:
            self.claims[url] = when
            self.force(url)

    def force(self, url: str) -> bool:
        """Make a known page due now (`larbinpy submit --force`); False if it is unknown."""
        known = self.schedule.force(url, self.clock.wall())
        if known:
            self.feed.wake.set()
        return known

    def discoverers(self, site: str) -> list[dict[str, Any]]:
        """The site's pages whose revisits found the most new URLs (`Discovery.site_top`)."""
        return self.discovery.site_top(site)

    def figures(self) -> dict[str, Any] | None:
        """status.json's `recrawl` object: the schedule's gauges, the revisits by outcome,
        the 304 share and the copy's estimated freshness."""
        f = self.schedule.figures(self.clock.wall())
        answered = sum(self.revisits.get(k.value, 0) for k in GOOD)
        not_modified = self.revisits.get(Outcome.notModified.value, 0)
        fresh = self._fresh_sum / len(self._fresh) if self._fresh else None
        return {"scheduled": f.scheduled, "due_now": f.due_now, "overdue": f.overdue,
                "max_lateness_s": round(f.max_lateness_s, 3), "revisits": dict(self.revisits),
                "not_modified_share": round(not_modified / answered if answered else 0.0, 4),
                "freshness": None if fresh is None else round(fresh, 4),
                "discovery": self.discovery.figures(self.clock.wall())}

    # --- a cluster's owner changes ---

    def adopt(self, visits: list[Visit], sites: dict[str, bytes]) -> None:
        """Pages another node handed over with their history (a cluster's owner change): in
        the schedule, due as they were, and written before the node acknowledges them; and
        what their sites learned there (`sites`: key -> `SiteRecrawl.to_bytes`)."""
        for visit in visits:
            self.schedule.put(visit)
        self.schedule.flush()
        for key, data in sites.items():
            handed = SiteRecrawl.from_bytes(data, 0.0)
            if handed is not None:
                self._adopt_state(key, handed)
        self.feed.wake.set()

    def _adopt_state(self, key: str, handed: SiteRecrawl) -> None:
        """A site's state from its former owner: taken (its multiplier, its counts) if this
        node learned nothing of the site yet, else this node's kept; either way a validator
        either node caught lying stays untrusted."""
        mine = self._known_state(key)
        state = handed if mine is None else mine.merged(handed)
        site = self.sites.find(key)
        if site is not None:
            self.sites.set_recrawl_state(site, state)
            state.budget.capacity = self.policy.budget_capacity(state, site.delay)
        self.states.put(key, state)

    def site_learned(self, key: str) -> bytes:
        """What a site learned (`SiteRecrawl.to_bytes`), to travel with its revisits to a new
        owner (b"": nothing yet)."""
        state = self._known_state(key)
        return b"" if state is None else state.to_bytes()

    def surrender(self, job: Job) -> Visit | None:
        """A queued job leaves for its site's new owner (a cluster's rebalance): a revisit's
        history goes with it, out of this node's schedule (None: not a revisit, or stale)."""
        if job.kind is not JobKind.REVISIT:
            return None
        visit = self.schedule.get(job.url)
        if visit is not None:
            self.schedule.drop(job.url)
        self.feed.release(job)
        return visit
