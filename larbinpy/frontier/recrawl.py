"""The recrawl's policy: from a page's history, a fetch's answer and its site's state, the
page's next visit and what the site's validators proved.

Pure: no clock, no files, no stage, no site table. The recrawl stage (`stages/revisits.py`)
gives it the page's `Visit` (its history in the schedule), the `Answer` the reader observed,
the site's `SiteRecrawl` (which it updates in place: what was learned) and the time, and
writes what it returns (`Learned`) to the schedule. `tests/test_recrawl_policy.py` holds it
alone, on made-up histories.

The model (Cho and Garcia-Molina): a page changes as a Poisson process of rate λ; revisited
every I seconds, its copy is fresh a share F = (1 - e^(-λI)) / (λI) of the time. The estimator
(`freshness.observe`) learns λ from the revisits; the optimiser (`SiteBudget`) gives each page
the interval where ∂F/∂f equals its site's multiplier μ, so that the site's revisits fit its
politeness capacity. A page is due (1 - PULL) of its interval after its fetch (the slack that
keeps a site busy), and a site serves its due pages most urgent first (`most_urgent`).

Servers lie, so each validator is trusted per site only until it proves false, and the
payload digest decides whenever a body comes:

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
  changes often cannot tell a lie from a change);
- a sitemap `<lastmod>` that made a page due, when the fetch finds the page unchanged: that
  site's lastmods are not trusted any more.
"""

from __future__ import annotations

import hashlib
import logging
import math
import struct
from collections.abc import Container
from dataclasses import dataclass, replace
from email.utils import parsedate_to_datetime

from larbinpy.frontier import freshness
from larbinpy.frontier.schedule import Visit
from larbinpy.links.urls import site_key
from larbinpy.records import Job, Revisit
from larbinpy.stats import FETCH_ERRORS, Outcome

log = logging.getLogger("larbinpy.recrawl")

PULL = 0.25  # a page may be fetched from (1 - PULL) of its interval on: its site's slack
AUDIT_FIRST = 4  # a site's first 304 audit comes after 4 of its 304s, the next after twice as
AUDIT_EVERY = 128  # many for each audit that found no lie, up to 128
AUDIT_RISK = 0.05  # ... of a page whose estimated chance of changing before the check is less
AUDIT_STRIKES = 2  # audits finding a hidden change before the site's validators are dropped
FAILURE_BACKOFF = 2.0  # a failed page is due again after twice the time since its last answer
FIRST_FAILURE = 4.0  # ... or this many recrawlMin when it never answered
FETCH_TIME_WEIGHT = 0.1  # weight of one fetch in a site's average fetch time
POP_EVERY = 0.5  # seconds between two looks for due visits (at most; recrawlMin / 8 if less)
NOT_MODIFIED = "server-not-modified"
IDENTICAL = "identical-payload-digest"
GOOD = frozenset({Outcome.success, Outcome.notModified, Outcome.unchanged})
# A page's schedule record keeps its change estimator's state, its discovery state, then the
# interval its site's budget counted it at: its due time alone does not say, since a visit put
# back behind its site's backlog, or made due early (a feed, a sitemap, an operator), keeps
# the interval it was given (and the demand counted) while its due time moves.
CHANGE_BYTES = freshness.STATE_BYTES
FOUND_END = CHANGE_BYTES + freshness.FOUND_BYTES
_INTERVAL = struct.Struct("<f")  # seconds (float32: 0.00001% of the interval)
RECORD_STATS_BYTES = FOUND_END + _INTERVAL.size
# a visit waiting for its site: (its record, its change rate, the new URLs a second it yields)
Waiting = tuple[Visit, float, float]
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
    fetch_s: float = 0.0  # seconds a fetch of it takes (moving average), for its capacity
    lm_strong_seen: bool = False  # it gave a strong Last-Modified once (not always "now")

    _PACK = struct.Struct("<B20s5BIIId")  # version, budget, flags, counts, fetch_s

    def audit_every(self) -> int:
        """304s of the site before the next audit: few while it has proved nothing, more
        with each audit that found no lie (a liar is caught within seconds of its first
        304s; an honest site pays one unconditional revisit in AUDIT_EVERY 304s)."""
        return min(AUDIT_EVERY, AUDIT_FIRST << min(self.clean_audits, 16))

    def merged(self, handed: SiteRecrawl) -> SiteRecrawl:
        """This node's state of a site, with the one its former owner `handed` over (a
        cluster's owner change): the one that learned something is kept (this one when both
        did), and a validator either caught lying stays untrusted."""
        learned = self.budget.pages or self.not_modified or self.clean_audits or self.false_304s
        state, other = (self, handed) if learned else (handed, self)
        state.etag_trusted &= other.etag_trusted
        state.lm_trusted &= other.lm_trusted
        state.validators_trusted &= other.validators_trusted
        state.lastmod_trusted &= other.lastmod_trusted
        state.lm_strong_seen |= other.lm_strong_seen
        state.false_304s = max(state.false_304s, other.false_304s)
        return state

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


@dataclass(slots=True)
class Answer:
    """What one fetch observed, from the reader to the policy (with the job's outcome)."""

    prior: Visit | None  # the page's history before this fetch (a revisit's)
    conditional: bool = False  # validators were sent
    audit: bool = False  # an unconditional check of a 304
    status: int = 0
    etag: str | None = None
    last_modified: str | None = None
    date: str | None = None  # the answer's Date header
    digest: bytes = b""  # SHA-1 of the payload, when a body was read
    elapsed: float = 0.0  # seconds the fetch took

    def heard(self, status: int, etag: str | None, last_modified: str | None,
              date: str | None) -> None:
        """The response's head: its status, validators and Date."""
        self.status, self.etag, self.last_modified, self.date = status, etag, last_modified, date

    def found(self, payload: bytes) -> bool:
        """A body came: its digest is kept; True when it is the copy already kept."""
        self.digest = payload_digest(payload)
        prior = self.prior
        return prior is not None and prior.digest == self.digest


def payload_digest(page_payload: bytes) -> bytes:
    """The payload digest the schedule keeps and WARC revisit records name: SHA-1, 20 bytes."""
    return hashlib.sha1(page_payload).digest()


def revisit_of(answer: Answer | None, url: str, kind: Outcome) -> Revisit | None:
    """The revisit record a page gets: a 304, or a body identical to the capture kept."""
    prior = answer.prior if answer is not None else None
    if prior is None:
        return None
    profile = NOT_MODIFIED if kind is Outcome.notModified else IDENTICAL
    return Revisit(profile, url, prior.captured_at, prior.digest)


@dataclass(frozen=True, slots=True)
class Learned:
    """What a fetch that found the page means: its next visit (`visit.due`), whether that
    visit is an audit of the 304 just answered, and the page's expected freshness at its new
    interval (for the crawl's estimate)."""

    visit: Visit
    audit: bool
    freshness: float


class Policy:
    """The recrawl's decisions (see the module docstring), for one crawl's bounds: pages are
    revisited within `lo`..`hi` seconds (recrawlMin, recrawlMax), and a site's revisits may
    use `share` (recrawlShare) of its `per_host` connections' politeness capacity."""

    def __init__(self, lo: float, hi: float, per_host: int, share: float) -> None:
        self.lo, self.hi, self.per_host, self.share = lo, hi, per_host, share

    # --- a site's capacity ---

    def capacity(self, state: SiteRecrawl, delay: float) -> float:
        """Revisits a second the site's politeness allows, times recrawlShare: a fetch takes
        its own time plus the site's delay (a budget beyond what the site can serve would
        leave every page late alike, the schedule no better than uniform)."""
        return self.per_host * self.share / max(delay + state.fetch_s, 1e-3)

    def budget_capacity(self, state: SiteRecrawl, delay: float) -> float:
        """The site's capacity in its budget's units: due times come (1 - PULL) of the
        optimiser's interval after a fetch, so the due demand is 1 / (1 - PULL) of the
        fetches the site can serve (the slack that keeps it busy)."""
        return self.capacity(state, delay) / (1.0 - PULL)

    def spacing(self, delay: float) -> float:
        """Seconds between two revisits of a site: its politeness delay over its share."""
        return delay / (self.per_host * self.share) if delay else 0.0

    def audit_horizon(self, delay: float) -> float:
        """About how long after a 304 its audit fetch comes: the site's politeness, a bucket
        of the schedule, one look for due visits."""
        return 2 * delay + self.lo / 16 + min(POP_EVERY, self.lo / 2)

    # --- a page's interval ---

    def rate(self, stats: bytes) -> float:
        """A page's change rate as its schedule uses it (too fast to follow: inf)."""
        change = stats[:CHANGE_BYTES]
        if freshness.too_fast(change):
            return math.inf
        return freshness.rate(change, prior=1.0 / self.lo)

    @staticmethod
    def found(stats: bytes) -> float:
        """New URLs a second the page's revisits yield (its discovery estimate)."""
        return freshness.found_rate(stats[CHANGE_BYTES:FOUND_END])

    def due_after(self, target: float) -> float:
        """Seconds after a fetch that a page meant for `target` may be fetched again: (1 -
        PULL) of it, not before recrawlMin; at recrawlMax (a page that never changes, or too
        fast to follow) all of it: a visit before gains nothing."""
        return target if target >= self.hi else max(self.lo, (1.0 - PULL) * target)

    def target_of(self, visit: Visit) -> float:
        """The interval a waiting visit was meant for (`due_after`'s inverse: a due interval
        above (1 - PULL) recrawlMax can only be recrawlMax's, to the schedule's millisecond)."""
        due = interval_of(visit) or 0.0
        return due if due > (1.0 - PULL) * self.hi + 0.01 else due / (1.0 - PULL)

    def most_urgent(self, fifo: list[Waiting], audits: Container[str], now: float) -> int:
        """Which waiting visit of a site goes next: an audit of a 304 first (the sooner, the
        more it proves), or a visit made due early (`made_early`: a date says the page
        changed), then the page a visit now helps most (`urgency`; a page popped early, in
        its interval's slack, has urgency below 1)."""
        best, best_value = 0, -math.inf
        for i, (visit, rate, found) in enumerate(fifo):
            if visit.url in audits or made_early(visit):
                return i
            value = self.urgency(visit, rate, found, now)
            if value > best_value:
                best, best_value = i, value
        return best

    def urgency(self, visit: Visit, rate: float, found: float, now: float) -> float:
        """How due a waiting visit is: what a visit now is worth (the freshness it buys plus,
        for a page that yields new URLs at `found` a second, the delay it saves them) over
        what it was worth at the interval it was given (`freshness.urgency` without
        discovery)."""
        target, since = self.target_of(visit), now - visit.fetched_at
        if found <= 0.0 or target <= 0.0:
            return freshness.urgency(rate, since, target)
        weight = freshness.DISCOVERY_WEIGHT * found / 2.0
        due = freshness.marginal(rate, target) + weight * target * target
        value = (freshness.marginal(rate, since) + weight * since * since) / due
        return freshness.overdue(value, since, target)

    def urgent_in(self, waiting: Waiting, level: float, now: float, horizon: float) -> float:
        """Seconds from `now` until a waiting visit's urgency reaches `level` (`horizon` if
        not within it): when a visit put back behind its site's backlog is worth looking at
        again. Urgency rises with time: bisection."""
        visit, rate, found = waiting
        if self.urgency(visit, rate, found, now + horizon) < level:
            return horizon
        a, b = 0.0, horizon
        for _ in range(12):
            m = (a + b) / 2
            if self.urgency(visit, rate, found, now + m) < level:
                a = m
            else:
                b = m
        return b

    # --- after a fetch ---

    def failed(self, job: Job, prior: Visit | None, status: int, now: float) -> Visit:
        """The history after a failure: due again on the failures' longer schedule."""
        since = now - prior.fetched_at if prior is not None and prior.fetched_at else 0.0
        interval = min(max(FAILURE_BACKOFF * since, FIRST_FAILURE * self.lo), self.hi)
        if prior is not None:
            stats = prior.stats
            if len(stats) >= CHANGE_BYTES:  # (a page that never answered has none to keep)
                stats = record_stats(stats[:CHANGE_BYTES], stats[CHANGE_BYTES:FOUND_END],
                                     interval)
            return replace(prior, due=now + interval, status=status, stats=stats)
        return Visit(url=job.url, due=now + interval, fetched_at=0.0, etag=None,
                     last_modified=None, digest=b"", captured_at=0.0, status=status,
                     depth=job.depth, priority=job.priority, tag=job.tag, stats=b"")

    def observed(self, job: Job, kind: Outcome, answer: Answer, state: SiteRecrawl,
                 now: float, delay: float, coming: int, claim: float | None = None
                 ) -> Learned:
        """The history after a fetch that found the page (changed, or as kept), at `now`
        (Unix time): `state` learns what the answer proves of its site's validators (a
        sitemap's `claim`, the lastmod that made the page due, too), `delay` is the site's
        politeness delay, `coming` its pages still queued (a first pass)."""
        prior = answer.prior
        state.fetch_s += (answer.elapsed - state.fetch_s) * FETCH_TIME_WEIGHT
        if prior is not None:
            self._audit(job, kind, answer, state, prior, now)
            if claim is not None:
                _check_claim(job.url, kind, prior, state, claim)
        change, lm_strong = self._evidence(kind, answer, state, now)
        found = self._discovery(job, kind, prior, now)
        # the point estimate (inf for a page that changed at every visit, freshness.too_fast)
        # orders the site's waiting visits and decides audits; the interval comes from the
        # whole posterior (`SiteBudget.target` with the stats) and what the page discovers
        rate = self.rate(change)
        state.budget.capacity = self.budget_capacity(state, delay)  # its delay may change
        target, interval = self._interval(prior, rate, change, found, state, coming)
        audit = self._audit_next(kind, rate, state, delay)
        if audit:
            # checked at once (its site's politeness still spaces it); its record then names
            # no interval, so the budget forgets the one just counted, and the check's fetch
            # schedules it again as a page new to the schedule
            state.budget.account(interval, None)
            interval = 0.0
        return Learned(self._visit(job, kind, answer, now, interval, lm_strong,
                                   record_stats(change, found, interval)),
                       audit, freshness.freshness(rate, target))

    @staticmethod
    def _discovery(job: Job, kind: Outcome, prior: Visit | None, now: float) -> bytes:
        """The page's discovery state after this visit: the URLs never seen before its links
        gave (`job.found`: a changed page's, parsed; a 304 or an unchanged body gives none)
        over the time since its previous fetch. A first fetch tells nothing of what revisits
        will find (its links are all new)."""
        state = prior.stats[CHANGE_BYTES:FOUND_END] if prior is not None else b""
        if prior is None or not prior.fetched_at:
            return state
        found = job.found if kind is Outcome.success else 0
        return freshness.observe_found(state, found, now - prior.fetched_at)

    def _evidence(self, kind: Outcome, answer: Answer, state: SiteRecrawl, now: float
                  ) -> tuple[bytes, str | None]:
        """The page's estimator state after this visit, and its Last-Modified if strong."""
        prior = answer.prior
        changed = prior is not None and kind is Outcome.success
        lm_time = http_time(answer.last_modified)
        strong_lm = answer.last_modified if _strong(lm_time, answer.date, now) else None
        since = prior.fetched_at if prior else 0.0
        evidence = prior.stats[:CHANGE_BYTES] if prior else b""
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
        return stats, strong_lm

    def _interval(self, prior: Visit | None, rate: float, stats: bytes, found: bytes,
                  state: SiteRecrawl, coming: int) -> tuple[float, float]:
        """(the optimiser's interval, the due interval) of a page, its site's budget counting
        it. The budget counts each page at the interval after which it may be fetched (its
        due time), (1 - PULL) of the interval the optimiser gives it, within recrawlMin..
        recrawlMax; a site whose pages are due at that rate has more due than it can serve,
        so it is never idle, and serves them most urgent first (`most_urgent`)."""
        old = interval_of(prior)
        if old is None:  # new to the schedule: nothing known of it yet, its site's mean
            # (its site's pages still to come, a first pass, count as well)
            interval = state.budget.first(self.lo, self.hi, coming)
            return interval / (1.0 - PULL), interval
        target = state.budget.target(rate, self.lo, self.hi, stats, freshness.found_rate(found))
        interval = self.due_after(target)
        state.budget.account(old, interval)
        return target, interval

    def _audit_next(self, kind: Outcome, rate: float, state: SiteRecrawl, delay: float
                    ) -> bool:
        """After a 304: is the page's next visit an unconditional check of it? Only once the
        site gave enough 304s, and only if the page is unlikely to change before the check
        (else the check proves nothing)."""
        if kind is not Outcome.notModified:
            return False
        state.not_modified += 1
        if (state.not_modified >= state.audit_every() and state.validators_trusted
                and change_risk(rate, self.audit_horizon(delay)) < AUDIT_RISK):
            state.not_modified = 0
            return True
        return False

    @staticmethod
    def _visit(job: Job, kind: Outcome, answer: Answer, now: float, interval: float,
               strong_lm: str | None, stats: bytes) -> Visit:
        """The page's record after this fetch, due `interval` from now."""
        prior = answer.prior
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
               prior: Visit, now: float) -> None:
        """What this answer proves about the site's validators (see the module docstring)."""
        if answer.audit and kind is Outcome.unchanged:
            state.clean_audits += 1
        elif answer.audit and kind is Outcome.success and prior.status == 304:
            self._audit_found_change(job, answer, state, prior, now)
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

    def _audit_found_change(self, job: Job, answer: Answer, state: SiteRecrawl, prior: Visit,
                            now: float) -> None:
        """An audit found the page changed since its 304: a lie, or a change that came."""
        lm_time = http_time(answer.last_modified)
        if (state.lm_trusted and _strong(lm_time, answer.date, now)
                and lm_time is not None and lm_time + 1.0 <= prior.fetched_at):
            # its Last-Modified says this version was made before the 304 was sent:
            # the 304 lied, whatever the page's rate
            state.false_304s = max(state.false_304s + 1, AUDIT_STRIKES)
        elif change_risk(freshness.rate(prior.stats[:CHANGE_BYTES], prior=1.0 / self.lo),
                         now - prior.fetched_at) < AUDIT_RISK:
            # changed since the 304, when a change that soon was unlikely: a strike
            state.false_304s += 1
        if state.false_304s >= AUDIT_STRIKES and state.validators_trusted:
            state.validators_trusted = False
            log.warning("recrawl: %s answered 304 for pages that had changed (%s last): "
                        "its validators are not sent any more", site_key(job.url), job.url)

    @staticmethod
    def conditional_headers(visit: Visit, state: SiteRecrawl, audit: bool) -> dict[str, str]:
        """The validators a revisit of `visit` sends: those its site has not been caught lying
        with (none for an audit)."""
        headers: dict[str, str] = {}
        if state.validators_trusted and not audit:
            if visit.etag and state.etag_trusted:
                headers["If-None-Match"] = visit.etag
            if visit.last_modified and state.lm_trusted:
                headers["If-Modified-Since"] = visit.last_modified
        return headers


def _check_claim(url: str, kind: Outcome, prior: Visit, state: SiteRecrawl,
                 claim: float) -> None:
    """A page a sitemap's lastmod made due was fetched: a false claim ends the trust."""
    if claim <= prior.fetched_at or kind is Outcome.success:
        return
    if state.lastmod_trusted:
        log.info("recrawl: %s lists %s as modified, but it was not: its sitemap lastmod "
                 "values are not trusted any more", site_key(url), url)
    state.lastmod_trusted = False


def change_risk(rate: float, seconds: float) -> float:
    """The chance that a page of this change rate changes within `seconds` (Poisson)."""
    return -math.expm1(-rate * max(seconds, 0.0))


def record_stats(change: bytes, found: bytes, interval: float) -> bytes:
    """A schedule record's `stats`: the change estimator's state, the discovery state (zeros
    for none: they read as nothing found) and the interval the page was scheduled at."""
    found = found if len(found) == freshness.FOUND_BYTES else bytes(freshness.FOUND_BYTES)
    return change.ljust(CHANGE_BYTES, b"\0")[:CHANGE_BYTES] + found + _INTERVAL.pack(interval)


def interval_of(visit: Visit | None) -> float | None:
    """The interval a page was last scheduled at (None: new to the schedule, or an audit's
    record, which names none), for its site's budget: the demand it counted (the time after
    which it may be fetched again). A record from before the interval was kept says it by
    its due time."""
    if visit is None or not visit.fetched_at:
        return None
    if len(visit.stats) == RECORD_STATS_BYTES:
        (kept,) = _INTERVAL.unpack_from(visit.stats, FOUND_END)
        return float(kept) if kept > 0.0 else None
    return visit.due - visit.fetched_at if visit.due > visit.fetched_at else None


def made_early(visit: Visit) -> bool:
    """Was the visit made due before its interval ran out (a feed's or a sitemap's date, an
    operator's `--force`)? Its due time is then earlier than its interval says."""
    kept = interval_of(visit)
    return kept is not None and visit.due < visit.fetched_at + kept - 0.01


def http_time(value: str | None) -> float | None:
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
    answered = http_time(date) or now
    return answered - lm_time >= 1.0
