"""Recrawl: every page fetched is scheduled again, and due revisits are fed back to their sites.

With `recrawl on` this stage closes the pipeline's loop. It is told every page's final
outcome (`ended`, an `Endings` subscriber, before the crawl log): it updates the page's
history in the schedule (`frontier/schedule.py`: validators, payload digest, the change-rate
estimator's state) and gives the page its next due time: (1 - PULL) of
`freshness.posterior_interval` for the page's estimator state and its site's multiplier,
within recrawlMin..recrawlMax (failures on a longer schedule of their own; a page new to the
schedule, its site's mean interval). Its task pops the visits that came due and feeds them to
their sites' queues as `REVISIT` jobs, behind the never-fetched URLs: a site gets a revisit
only when it has no other job queued, at most `connectionsPerHost` at a time, spaced to
`recrawlShare` of its politeness capacity, the most urgent of its due visits first
(`freshness.urgency`). Due a little before their interval ends, a site's pages keep it busy
when they come in bursts. Popped visits wait in memory only up to `PENDING_MAX`
(`PER_SITE_MAX` a site; a busier site's are put back a little later), so memory is bounded
whatever the schedule holds.

The reader asks `prepare` before a revisit (the conditional GET's headers) and hands what it
observed (`Answer`) with the job's final outcome. Servers lie, so each validator is trusted
per site only until it proves false (`SiteRecrawl`), and the payload digest decides whenever
a body comes:

- an ETag (or a Last-Modified) that changed while the body did not: not sent to that site
  again, and its Last-Modified no longer feeds the estimator;
- a Last-Modified less than a second before the answer's Date is weak (RFC 9110 8.8.2.2: the
  page may change again within that second): not kept as a validator;
- a 304 that hid a change: after AUDIT_FIRST 304s of a site (twice as many after each audit
  that found no lie, up to AUDIT_EVERY), the next 304 of a page unlikely to change within the
  check's delay (its estimated rate says so, AUDIT_RISK) is checked by fetching the page
  again at once without validators; a body whose Last-Modified is a second or more before the
  304 proves the lie; otherwise a digest that differs, when a change that soon was unlikely,
  is a strike; after AUDIT_STRIKES the site gets no validators from then on (a page that
  changes often cannot tell a lie from a change).

Each site's state (`SiteRecrawl`: its budget, which validators hold) is kept in the site's
record in memory and in `stateDir/schedule/sites.sqlite` (`SiteStates`) for a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import struct
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from larbinpy.config import Config
from larbinpy.frontier import freshness
from larbinpy.frontier.endings import Ended
from larbinpy.frontier.recrawl import Answer
from larbinpy.frontier.schedule import Schedule, Visit
from larbinpy.frontier.sites import Sites
from larbinpy.frontier.turndb import TurnTable, transaction
from larbinpy.links.urls import site_key
from larbinpy.records import Job, JobKind, Revisit, Site
from larbinpy.stats import FETCH_ERRORS, Outcome, Stats
from larbinpy.turn import Phase, TurnEnd

log = logging.getLogger("larbinpy.recrawl")

PULL = 0.25  # a page may be fetched from (1 - PULL) of its interval on: its site's slack
PENDING_MAX = 10_000  # visits popped and waiting for their site, at most
PER_SITE_MAX = 64  # ... of one site; more of its due visits are put back a little later
POP_EVERY = 0.5  # seconds between two looks for due visits (at most; recrawlMin / 8 if less)
AUDIT_FIRST = 4  # a site's first 304 audit comes after 4 of its 304s, the next after twice as
AUDIT_EVERY = 128  # many for each audit that found no lie, up to 128
AUDIT_RISK = 0.05  # ... of a page whose estimated chance of changing before the check is less
AUDIT_STRIKES = 2  # audits finding a hidden change before the site's validators are dropped
FAILURE_BACKOFF = 2.0  # a failed page is due again after twice the time since its last answer
FIRST_FAILURE = 4.0  # ... or this many recrawlMin when it never answered
FETCH_TIME_WEIGHT = 0.1  # weight of one fetch in a site's average fetch time
CLAIMS_KEPT = 100_000  # sitemap lastmods awaiting the fetch that checks them
FRESHNESS_SAMPLES = 10_000  # pages whose expected freshness makes the crawl's estimate
NOT_MODIFIED = "server-not-modified"
IDENTICAL = "identical-payload-digest"
GOOD = frozenset({Outcome.success, Outcome.notModified, Outcome.unchanged})
# failures come back on their own, longer schedule; a redirect too (its target is a page)
RETRIED = FETCH_ERRORS | {Outcome.err30X}


@dataclass(slots=True)
class SiteRecrawl:
    """A site's recrawl state: its budget multiplier and which of its validators hold."""

    budget: freshness.SiteBudget
    etag_trusted: bool = True
    lm_trusted: bool = True  # Last-Modified: sent, and fed to the estimator
    validators_trusted: bool = True  # False once a 304 hid a change
    lastmod_trusted: bool = True  # sitemap <lastmod>: False once one proved false
    not_modified: int = 0  # 304s answered since the last audit
    false_304s: int = 0  # audits that found a change a 304 hid
    clean_audits: int = 0  # audits that found the page as the 304 said
    next_at: float = 0.0  # loop time before which no revisit of it is fed (recrawlShare)
    fetch_s: float = 0.0  # seconds a fetch of it takes (moving average), for its capacity
    lm_strong_seen: bool = False  # it gave a strong Last-Modified once (not always "now")

    _PACK = struct.Struct("<B20s5BIIId")  # version, budget, flags, counts, fetch_s

    def audit_every(self) -> int:
        """304s of the site before the next audit: few while it has proved nothing, more
        with each audit that found no lie (a liar is caught within seconds of its first
        304s; an honest site pays one unconditional revisit in AUDIT_EVERY 304s)."""
        return min(AUDIT_EVERY, AUDIT_FIRST << min(self.clean_audits, 16))

    def to_bytes(self) -> bytes:
        """What a restart must keep: the budget and what the site's validators proved."""
        return self._PACK.pack(1, self.budget.to_bytes(), self.etag_trusted, self.lm_trusted,
                               self.validators_trusted, self.lastmod_trusted,
                               self.lm_strong_seen, self.not_modified, self.false_304s,
                               self.clean_audits, self.fetch_s)

    @classmethod
    def from_bytes(cls, data: bytes, capacity: float) -> SiteRecrawl | None:
        """The state `to_bytes` wrote (None if it is not one)."""
        if len(data) != cls._PACK.size or data[0] != 1:
            return None
        (_, budget, etag, lm, valid, lastmod, strong, not_modified, false_304s, clean,
         fetch_s) = cls._PACK.unpack(data)
        return cls(freshness.SiteBudget.from_bytes(budget, capacity), bool(etag), bool(lm),
                   bool(valid), bool(lastmod), not_modified, false_304s, clean,
                   fetch_s=fetch_s, lm_strong_seen=bool(strong))


class SiteStates(TurnTable[SiteRecrawl]):
    """The sites' recrawl states on disk (`stateDir/schedule/sites.sqlite`, one row a site,
    written at the end of the loop turn that changed them, like the site records): a
    restart keeps each site's multiplier and the validators it proved false."""

    SCHEMA = "CREATE TABLE IF NOT EXISTS recrawl (site TEXT PRIMARY KEY, state BLOB NOT NULL)"

    def __init__(self, path: Path, turn: TurnEnd | None = None) -> None:
        super().__init__(path, self.SCHEMA, turn)

    def get(self, key: str, capacity: float) -> SiteRecrawl | None:
        """The site's state as last put (None: never, or unreadable)."""
        state = self._batch.pending.get(key)
        if state is not None:
            return state
        row = self._db.execute("SELECT state FROM recrawl WHERE site = ?", (key,)).fetchone()
        return None if row is None else SiteRecrawl.from_bytes(bytes(row[0]), capacity)

    def put(self, key: str, state: SiteRecrawl) -> None:
        """The site's state changed: written at the end of this loop turn."""
        self._batch.put(key, state)

    def _write(self, states: dict[str, SiteRecrawl]) -> None:
        """A turn's states in one transaction."""
        with transaction(self._db):
            self._db.executemany("INSERT OR REPLACE INTO recrawl VALUES (?, ?)",
                                 [(k, v.to_bytes()) for k, v in states.items()])


@dataclass(slots=True)
class RevisitFigures:
    """What the status page, status.json (`recrawl`) and /metrics show of the recrawl."""

    scheduled: int
    due_now: int
    overdue: int
    max_lateness_s: float
    revisits: dict[str, int] = field(default_factory=dict)
    not_modified_share: float = 0.0
    freshness: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """status.json's `recrawl` object."""
        return {"scheduled": self.scheduled, "due_now": self.due_now, "overdue": self.overdue,
                "max_lateness_s": round(self.max_lateness_s, 3), "revisits": self.revisits,
                "not_modified_share": round(self.not_modified_share, 4),
                "freshness": None if self.freshness is None else round(self.freshness, 4)}


def payload_digest(page_payload: bytes) -> bytes:
    """The payload digest the schedule keeps and WARC revisit records name: SHA-1, 20 bytes."""
    return hashlib.sha1(page_payload).digest()


# The node's `hand_over`: True when another node owns the site of a due revisit (`job`), and
# the page's history (`visit`) went there with it (and its site's state, `site_learned`);
# False: the site is this node's.
HandOver = Callable[[str, Job, Visit], bool]


class Revisits:
    """The recrawl's scheduler and feeder (see the module's docstring)."""

    def __init__(self, cfg: Config, stats: Stats, schedule: Schedule, sites: Sites,
                 on_fed: Callable[[], None], hand_over: HandOver,
                 states: SiteStates | None = None, turn: TurnEnd | None = None) -> None:
        self.cfg, self.stats, self.schedule, self.sites = cfg, stats, schedule, sites
        self.on_fed = on_fed  # a revisit job was queued: "is the crawl done?" may change
        self.hand_over = hand_over
        self.lo, self.hi = cfg.recrawl_min, cfg.recrawl_max
        self.per_host = cfg.connections_per_host
        # popped, by site, until the site takes them: (visit, its estimated change rate)
        self.waiting: dict[str, list[tuple[Visit, float]]] = {}
        self.states = states  # the sites' states on disk (a store the crawler registers)
        if turn is not None:  # the turn's due times, on disk before the done-record says done
            turn.on(Phase.SCHEDULE, schedule.flush)
        self.pending = 0  # visits in `waiting`
        self.queued: dict[str, int] = {}  # revisit jobs in a site's queue or in flight
        self.audits: set[str] = set()  # URLs whose next fetch checks a 304 (no validators)
        self.revisits: dict[str, int] = {}  # revisits' outcomes, by kind
        # sitemap <lastmod>s that made a page due, until its fetch proves them true or false
        self.claims: OrderedDict[str, float] = OrderedDict()
        self._fresh: deque[float] = deque(maxlen=FRESHNESS_SAMPLES)
        self._fresh_sum = 0.0
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.wake = asyncio.Event()

    # --- feeding due visits to their sites ---

    async def run(self) -> None:
        """Forever: pop what came due (bounded), feed the sites that can take it."""
        every = min(POP_EVERY, self.lo / 8)
        while True:
            try:
                self.pop(time.time())
            except OSError:  # the schedule's files refused (disk full, EMFILE): try again soon
                log.exception("recrawl: cannot read the schedule; retrying")
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), every)

    def pop(self, now: float) -> int:
        """Pop due visits while fewer than PENDING_MAX / 2 wait; feed their sites."""
        if self.pending > PENDING_MAX // 2:
            return 0
        visits = self.schedule.pop_due(now, PENDING_MAX - self.pending)
        keys: dict[str, None] = {}
        for visit in visits:
            key = site_key(visit.url)
            fifo = self.waiting.setdefault(key, [])
            if len(fifo) >= PER_SITE_MAX and visit.url not in self.audits:
                # its site cannot take them soon: back, a bit later
                self.schedule.put(replace(visit, due=now + max(self._spacing(key) * len(fifo),
                                                                POP_EVERY)))
                continue
            fifo.append((visit, self._rate(visit.stats)))
            self.pending += 1
            keys[key] = None
        for key in keys:
            self.feed(key)
        return len(visits)

    def feed(self, key: str) -> None:
        """Give a site its next waiting revisit if it can take one now: no other job queued
        (never-fetched URLs first), fewer than connectionsPerHost revisits of it queued or in
        flight, and its recrawlShare spacing passed."""
        fifo = self.waiting.get(key)
        loop = asyncio.get_running_loop()
        while fifo and self.queued.get(key, 0) < self.per_host:
            site = self.sites.by_key.get(key)
            if site is not None:
                if self.sites.has_work(site):
                    return  # fed again when one of its fetches ends
                state = self.site_state(site)
                now = loop.time()
                if state.next_at > now:
                    self._feed_at(key, state.next_at, loop)
                    return
                state.next_at = now + self._spacing(key)
            visit = fifo.pop(self._most_urgent(fifo, time.time()))[0]
            self.pending -= 1
            if not fifo:
                del self.waiting[key]
            job = Job(visit.url, visit.depth, visit.priority, tag=visit.tag,
                      kind=JobKind.REVISIT)
            if self.hand_over(key, job, visit):
                # a cluster: its site is another node's now; the page went there with its
                # history (`adopt`), and leaves this node's schedule
                self.schedule.drop(visit.url)
                continue
            self.queued[key] = self.queued.get(key, 0) + 1
            self.sites.enqueue(job, loop.time())
            self.on_fed()

    def _most_urgent(self, fifo: list[tuple[Visit, float]], now: float) -> int:
        """Which waiting visit of a site goes next: an audit of a 304 first (the sooner, the
        more it proves), then the page a visit now helps most (`freshness.urgency` at its
        rate; a page popped early, in its interval's slack, has urgency below 1)."""
        best, best_value = 0, -math.inf
        for i, (visit, rate) in enumerate(fifo):
            if visit.url in self.audits:
                return i
            value = freshness.urgency(rate, now - visit.fetched_at, self._target_of(visit))
            if value > best_value:
                best, best_value = i, value
        return best

    def _due_after(self, target: float) -> float:
        """Seconds after a fetch that a page meant for `target` may be fetched again: (1 -
        PULL) of it, not before recrawlMin; at recrawlMax (a page that never changes, or too
        fast to follow) all of it: a visit before gains nothing."""
        return target if target >= self.hi else max(self.lo, (1.0 - PULL) * target)

    def _target_of(self, visit: Visit) -> float:
        """The interval a waiting visit was meant for (`_due_after`'s inverse: a due interval
        above (1 - PULL) recrawlMax can only be recrawlMax's, to the schedule's millisecond)."""
        due = _interval_of(visit) or 0.0
        return due if due > (1.0 - PULL) * self.hi + 0.01 else due / (1.0 - PULL)

    def _rate(self, stats: bytes) -> float:
        """A page's change rate as its schedule uses it (too fast to follow: inf)."""
        if freshness.too_fast(stats):
            return math.inf
        return freshness.rate(stats, prior=1.0 / self.lo)

    def _feed_at(self, key: str, at: float, loop: asyncio.AbstractEventLoop) -> None:
        """Feed a site again when its recrawlShare spacing has passed (one timer a site)."""
        if key not in self._timers:
            self._timers[key] = loop.call_at(at, self._timer_fired, key)

    def _timer_fired(self, key: str) -> None:
        """A site's spacing passed."""
        del self._timers[key]
        self.feed(key)

    def _spacing(self, key: str) -> float:
        """Seconds between two revisits of a site: its politeness delay over its share."""
        site = self.sites.by_key.get(key)
        delay = site.delay if site is not None else self.cfg.wait_duration
        return delay / (self.per_host * self.cfg.recrawl_share) if delay else 0.0

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
        self.wake.set()

    def _adopt_state(self, key: str, handed: SiteRecrawl) -> None:
        """A site's state from its former owner: taken (its multiplier, its counts) if this
        node learned nothing of the site yet, else this node's kept; either way a validator
        either node caught lying stays untrusted."""
        mine = self._known_state(key)
        if mine is None:
            state = handed
        else:
            learned = (mine.budget.pages or mine.not_modified or mine.clean_audits
                       or mine.false_304s)
            state, other = (mine, handed) if learned else (handed, mine)
            state.etag_trusted &= other.etag_trusted
            state.lm_trusted &= other.lm_trusted
            state.validators_trusted &= other.validators_trusted
            state.lastmod_trusted &= other.lastmod_trusted
            state.lm_strong_seen |= other.lm_strong_seen
            state.false_304s = max(state.false_304s, other.false_304s)
        site = self.sites.by_key.get(key)
        if site is not None:
            self.sites.set_recrawl_state(site, state)
            state.budget.capacity = self._budget_capacity(site)
        if self.states is not None:
            self.states.put(key, state)

    def site_learned(self, key: str) -> bytes:
        """What a site learned (`SiteRecrawl.to_bytes`), to travel with its revisits to a new
        owner (b"": nothing yet)."""
        state = self._known_state(key)
        return b"" if state is None else state.to_bytes()

    def _known_state(self, key: str) -> SiteRecrawl | None:
        """The site's recrawl state as this node has it, in memory or on disk, without making
        one (None: it has none)."""
        site = self.sites.by_key.get(key)
        if site is not None:
            state = self.sites.recrawl_state(site)
            if isinstance(state, SiteRecrawl):
                return state
        return self.states.get(key, 0.0) if self.states is not None else None

    def surrender(self, job: Job) -> Visit | None:
        """A queued job leaves for its site's new owner (a cluster's rebalance): a revisit's
        history goes with it, out of this node's schedule (None: not a revisit, or stale)."""
        if job.kind is not JobKind.REVISIT:
            return None
        visit = self.schedule.get(job.url)
        if visit is not None:
            self.schedule.drop(job.url)
        self.release(job)
        return visit

    def site_state(self, site: Site) -> SiteRecrawl:
        """The site's recrawl state: in memory, or as a restart found it on disk, or new."""
        state = self.sites.recrawl_state(site)
        if not isinstance(state, SiteRecrawl):
            kept = self.states.get(site.key, 0.0) if self.states is not None else None
            state = kept or SiteRecrawl(freshness.SiteBudget(0.0))
            self.sites.set_recrawl_state(site, state)  # first: its capacity reads fetch_s
            state.budget.capacity = self._budget_capacity(site)
        return state

    def release(self, job: Job) -> None:
        """A revisit job ended (fetched, dropped or stale): its site may take the next one."""
        key = site_key(job.url)
        left = self.queued.get(key, 0) - 1
        if left > 0:
            self.queued[key] = left
        else:
            self.queued.pop(key, None)
        self.feed(key)

    def after_fetch(self, site: Site) -> None:
        """Any fetch of a site ended: with its queue empty, a revisit may go next."""
        if site.key in self.waiting:
            self.feed(site.key)

    # --- the reader's side ---

    def prepare(self, site: Site, job: Job) -> tuple[Answer | None, dict[str, str]]:
        """Before a revisit: its history and the conditional GET's headers; (None, {}) when
        the job is stale (the page was fetched and scheduled again since it was popped, e.g.
        a checkpoint's job replayed after a kill): then it must not be fetched."""
        visit = self.schedule.get(job.url)
        if visit is None:  # handed over by another cluster node: a first visit here
            return Answer(None), {}
        if visit.due > time.time():
            self.release(job)
            return None, {}
        answer = Answer(visit, audit=job.url in self.audits)
        headers: dict[str, str] = {}
        state = self.site_state(site)
        if state.validators_trusted and not answer.audit:
            if visit.etag and state.etag_trusted:
                headers["If-None-Match"] = visit.etag
            if visit.last_modified and state.lm_trusted:
                headers["If-Modified-Since"] = visit.last_modified
        self.audits.discard(job.url)
        answer.conditional = bool(headers)
        return answer, headers

    @staticmethod
    def first_answer() -> Answer:
        """What a first fetch of a page will observe (no history)."""
        return Answer(None)

    def answered(self, answer: Answer, resp: Any) -> None:
        """The response's head: its status and validators."""
        answer.status = resp.status
        headers = resp.headers
        answer.etag = headers.get("ETag")
        answer.last_modified = headers.get("Last-Modified")
        answer.date = headers.get("Date")

    def unchanged(self, answer: Answer | None, payload: bytes) -> bool:
        """A body came: record its digest; True when it is the copy already kept."""
        answer = answer or Answer(None)
        answer.digest = payload_digest(payload)
        prior = answer.prior
        return prior is not None and prior.digest == answer.digest

    # --- scheduling (an `Endings` subscriber) ---

    def ended(self, e: Ended) -> None:
        """A job's final outcome: a page (not a sitemap) is scheduled again, and `e.due` says
        when (the crawl log's `next`)."""
        if e.job.kind is not JobKind.SITEMAP:
            e.due = self.schedule_page(e.job, e.kind, e.answer)

    def schedule_page(self, job: Job, kind: Outcome, answer: Answer | None) -> float | None:
        """A page's final outcome: put it in the schedule with its next due time."""
        if job.kind is JobKind.REVISIT:
            self.revisits[kind.value] = self.revisits.get(kind.value, 0) + 1
            self.release(job)
        site = self.sites.by_key.get(site_key(job.url))
        if site is not None:
            self.after_fetch(site)
        now = time.time()
        if answer is None:  # ended without a request (a dead site...)
            if job.kind is not JobKind.REVISIT:
                return None  # never fetched: nothing to revisit
            if kind not in RETRIED:  # robots.txt forbids it now...: out of the rotation
                self._leave(job, site, self.schedule.get(job.url))
                return None
            answer = Answer(self.schedule.get(job.url))
        if kind in GOOD and site is not None:
            visit = self._observed(job, kind, answer, site, now)
        elif kind in RETRIED:
            visit = self._failed(job, answer.prior, answer.status, now)
            if site is not None:  # its site's budget counts what the page now costs
                self.site_state(site).budget.account(_interval_of(answer.prior),
                                                     visit.due - now)
        else:  # a rule keeps it from being fetched (robots.txt...), or not a page we keep
            if job.kind is JobKind.REVISIT:
                self._leave(job, site, answer.prior)
                self._keep_state(site)
            return None
        self.schedule.put(visit)
        self._keep_state(site)
        return visit.due

    def _keep_state(self, site: Site | None) -> None:
        """The site's recrawl state may have changed: on disk at the end of the loop turn."""
        if site is not None and self.states is not None:
            self.states.put(site.key, self.site_state(site))

    def _observed(self, job: Job, kind: Outcome, answer: Answer, site: Site,
                  now: float) -> Visit:
        """The history after a fetch that found the page (changed, or as kept)."""
        prior = answer.prior
        state = self.site_state(site)
        state.fetch_s += (answer.elapsed - state.fetch_s) * FETCH_TIME_WEIGHT
        if prior is not None:
            self._audit(job, kind, answer, state, prior)
            if self.claims:
                self._check_claim(job.url, kind, prior, state)
        changed = prior is not None and kind is Outcome.success
        lm_time = _http_time(answer.last_modified)
        strong_lm = answer.last_modified if _strong(lm_time, answer.date, now) else None
        since = prior.fetched_at if prior else 0.0
        evidence = prior.stats if prior else b""
        if prior is not None and prior.status == 304 and not state.validators_trusted:
            # its evidence counted 304s of a site since caught lying: forgotten, and this
            # visit tells what came since the last capture the crawler saw for itself
            evidence, since = b"", prior.captured_at
        if strong_lm is not None and state.lm_trusted:
            state.lm_strong_seen = True
        elif (changed and lm_time is not None and state.lm_trusted and state.lm_strong_seen
              and since < lm_time < now):
            # A weak Last-Modified (the page changed within the last second) still bounds
            # the change: it came at lm_time or later. Counting the visit as "changed in
            # the whole interval" would bias the rate low, because the changes seen through
            # a strong Last-Modified are the ones that came a second or more before the
            # fetch: a fast page would look slow. So: "changed within now - lm_time".
            since = lm_time
        stats = freshness.observe(evidence, now, since, changed, lm_time,
                                  state.lm_trusted and strong_lm is not None,
                                  prior=1.0 / self.lo)
        # the point estimate (inf for a page that changed at every visit, freshness.too_fast)
        # orders the site's waiting visits and decides audits; the interval comes from the
        # whole posterior (`SiteBudget.target` with the stats)
        rate = self._rate(stats)
        state.budget.capacity = self._budget_capacity(site)  # its delay may have changed
        # The budget counts each page at the interval after which it may be fetched (its
        # due time), (1 - PULL) of the interval the optimiser gives it, within recrawlMin..
        # recrawlMax; a site whose pages are due at that rate has more due than it can
        # serve, so it is never idle, and serves them most urgent first (`_most_urgent`).
        old = _interval_of(prior)
        if old is None:  # new to the schedule: nothing known of it yet, the site's mean
            # its site's pages still to come (a first pass) count as well
            coming = self.sites.waiting_jobs(site)
            interval = state.budget.first(self.lo, self.hi, coming)
            target = interval / (1.0 - PULL)
        else:
            target = state.budget.target(rate, self.lo, self.hi, stats)
            interval = self._due_after(target)
            state.budget.account(old, interval)
        self._note_freshness(freshness.freshness(rate, target))
        if kind is Outcome.notModified:
            state.not_modified += 1
            # an audit proves something only if the page is unlikely to change before it
            if (state.not_modified >= state.audit_every() and state.validators_trusted
                    and _change_risk(rate, self._audit_horizon(site)) < AUDIT_RISK):
                state.not_modified = 0
                self.audits.add(job.url)
                # checked at once (its site's politeness still spaces it); its record then
                # names no interval, so the budget forgets the one just counted, and the
                # check's fetch schedules it again as a page new to the schedule
                state.budget.account(interval, None)
                interval = 0.0
        if kind is Outcome.success:  # a new capture
            digest, captured_at = answer.digest, now
        else:  # the copy kept: a revisit always has a prior
            assert prior is not None
            digest, captured_at = prior.digest, prior.captured_at
        body = kind is not Outcome.notModified
        return Visit(
            url=job.url, due=now + interval, fetched_at=now,
            etag=answer.etag if body or answer.etag else (prior.etag if prior else None),
            last_modified=strong_lm if body else (prior.last_modified if prior else None),
            digest=digest, captured_at=captured_at, status=answer.status, depth=job.depth,
            priority=job.priority, tag=job.tag, stats=stats)

    def _audit(self, job: Job, kind: Outcome, answer: Answer, state: SiteRecrawl,
               prior: Visit) -> None:
        """What this answer proves about the site's validators (see the module docstring)."""
        if answer.audit and kind is Outcome.unchanged:
            state.clean_audits += 1
        elif answer.audit and kind is Outcome.success and prior.status == 304:
            lm_time = _http_time(answer.last_modified)
            if (state.lm_trusted and _strong(lm_time, answer.date, time.time())
                    and lm_time is not None and lm_time + 1.0 <= prior.fetched_at):
                # its Last-Modified says this version was made before the 304 was sent:
                # the 304 lied, whatever the page's rate
                state.false_304s = max(state.false_304s + 1, AUDIT_STRIKES)
            elif _change_risk(freshness.rate(prior.stats, prior=1.0 / self.lo),
                              time.time() - prior.fetched_at) < AUDIT_RISK:
                # changed since the 304, when a change that soon was unlikely: a strike
                state.false_304s += 1
            if state.false_304s >= AUDIT_STRIKES and state.validators_trusted:
                state.validators_trusted = False
                log.warning("recrawl: %s answered 304 for pages that had changed (%s last): "
                            "its validators are not sent any more", site_key(job.url), job.url)
        if kind is Outcome.unchanged and answer.conditional:
            if answer.etag != prior.etag and prior.etag and state.etag_trusted:
                state.etag_trusted = False
                log.info("recrawl: %s changes its ETag on an unchanged page: not sent to it "
                         "any more", site_key(job.url))
            if (answer.last_modified != prior.last_modified and prior.last_modified
                    and state.lm_trusted):
                state.lm_trusted = False
                log.info("recrawl: %s changes its Last-Modified on an unchanged page: not "
                         "trusted any more", site_key(job.url))

    def _leave(self, job: Job, site: Site | None, prior: Visit | None) -> None:
        """A page leaves the rotation (a rule forbids it now, or it is no page we keep)."""
        self.schedule.drop(job.url)
        if site is not None and prior is not None:
            self.site_state(site).budget.account(_interval_of(prior), None)

    def _failed(self, job: Job, prior: Visit | None, status: int, now: float) -> Visit:
        """The history after a failure: due again on the failures' longer schedule."""
        since = now - prior.fetched_at if prior is not None and prior.fetched_at else 0.0
        interval = min(max(FAILURE_BACKOFF * since, FIRST_FAILURE * self.lo), self.hi)
        if prior is not None:
            return replace(prior, due=now + interval, status=status)
        return Visit(url=job.url, due=now + interval, fetched_at=0.0, etag=None,
                     last_modified=None, digest=b"", captured_at=0.0, status=status,
                     depth=job.depth, priority=job.priority, tag=job.tag, stats=b"")

    def _audit_horizon(self, site: Site) -> float:
        """About how long after a 304 its audit fetch comes: the site's politeness, a bucket
        of the schedule, one look for due visits."""
        return 2 * site.delay + self.lo / 16 + min(POP_EVERY, self.lo / 2)

    def _capacity(self, site: Site) -> float:
        """Revisits a second the site's politeness allows, times recrawlShare: a fetch takes
        its own time plus the site's delay (a budget beyond what the site can serve would
        leave every page late alike, the schedule no better than uniform)."""
        state = self.sites.recrawl_state(site)
        took = state.fetch_s if isinstance(state, SiteRecrawl) else 0.0
        return self.per_host * self.cfg.recrawl_share / max(site.delay + took, 1e-3)

    def _budget_capacity(self, site: Site) -> float:
        """The site's capacity in its budget's units: due times come (1 - PULL) of the
        optimiser's interval after a fetch, so the due demand is 1 / (1 - PULL) of the
        fetches the site can serve (the slack that keeps it busy)."""
        return self._capacity(site) / (1.0 - PULL)

    def _note_freshness(self, value: float) -> None:
        """One page's expected freshness at its new interval, for the crawl's estimate."""
        if len(self._fresh) == self._fresh.maxlen:
            self._fresh_sum -= self._fresh[0]
        self._fresh.append(value)
        self._fresh_sum += value

    # --- sitemaps ---

    def lastmod(self, url: str, when: float) -> None:
        """A sitemap lists `url` as modified at `when`: due now if that is after its last fetch
        and its site's lastmods have not proved false (the fetch then checks this claim)."""
        site = self.sites.by_key.get(site_key(url))
        if site is not None and not self.site_state(site).lastmod_trusted:
            return
        if len(self.claims) >= CLAIMS_KEPT:
            self.claims.popitem(last=False)
        visit = self.schedule.get(url)
        # a lastmod names a second: it must be past the fetch's second to say anything
        if visit is not None and visit.fetched_at and when >= math.floor(visit.fetched_at) + 1:
            self.claims[url] = when
            self.force(url)

    def _check_claim(self, url: str, kind: Outcome, prior: Visit, state: SiteRecrawl) -> None:
        """A page a sitemap's lastmod made due was fetched: a false claim ends the trust."""
        claim = self.claims.pop(url, None)
        if claim is None or claim <= prior.fetched_at or kind is Outcome.success:
            return
        if state.lastmod_trusted:
            log.info("recrawl: %s lists %s as modified, but it was not: its sitemap lastmod "
                     "values are not trusted any more", site_key(url), url)
        state.lastmod_trusted = False

    # --- operators ---

    def force(self, url: str) -> bool:
        """Make a known page due now (`larbinpy submit --force`); False if it is unknown."""
        known = self.schedule.force(url, time.time())
        if known:
            self.wake.set()
        return known

    def figures(self) -> RevisitFigures:
        """The recrawl's figures now."""
        f = self.schedule.figures(time.time())
        answered = sum(self.revisits.get(k.value, 0) for k in GOOD)
        return RevisitFigures(
            scheduled=f.scheduled, due_now=f.due_now, overdue=f.overdue,
            max_lateness_s=f.max_lateness_s, revisits=dict(self.revisits),
            not_modified_share=(self.revisits.get(Outcome.notModified.value, 0) / answered
                                if answered else 0.0),
            freshness=self._fresh_sum / len(self._fresh) if self._fresh else None)

    def revisit_of(self, answer: Answer | None, url: str, kind: Outcome) -> Revisit | None:
        """The revisit record a page gets: a 304, or a body identical to the capture kept."""
        prior = answer.prior if answer is not None else None
        if prior is None:
            return None
        profile = NOT_MODIFIED if kind is Outcome.notModified else IDENTICAL
        return Revisit(profile, url, prior.captured_at, prior.digest)


def _change_risk(rate: float, seconds: float) -> float:
    """The chance that a page of this change rate changes within `seconds` (Poisson)."""
    return -math.expm1(-rate * max(seconds, 0.0))


def _interval_of(visit: Visit | None) -> float | None:
    """The interval a page was last scheduled at (None: new to the schedule), for its site's
    budget: the demand it counted (the time after which it may be fetched again)."""
    if visit is None or not visit.fetched_at or visit.due <= visit.fetched_at:
        return None
    return visit.due - visit.fetched_at


def _http_time(value: str | None) -> float | None:
    """An HTTP date as Unix time; None when absent or unreadable."""
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _strong(lm_time: float | None, date: str | None, now: float) -> bool:
    """Is a Last-Modified a strong validator: at least a second before the answer's Date (or
    our clock, without a Date)? A page may change again within the second it names."""
    if lm_time is None:
        return False
    answered = _http_time(date) or now
    return answered - lm_time >= 1.0
