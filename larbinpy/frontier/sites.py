"""The table of sites and IP slots that the sequencer, DNS and opener stages share.

It holds the records, each site's queue and the counters that "is the crawl done?" reads;
each stage decides what happens to a site, and asks the table to do it: with the politeness
state machine (`politeness.py`: the ready queue, the IP FIFOs, the timers, the fetch counts
and the clocks a fetch restarts) the table is the only writer of a `Site` or `IpSlot`
(tests/test_layout.py checks it), each change one method that keeps its invariant (a clock
pushed here only moves later, a dead site's queue is dropped...). Jobs enter a site's queue
here (`enqueue`) and leave it here (`take`, `drop`), so `queued` is always exact. Time is the
`Clock`'s it is given (the crawl's one `LoopClock`): the loop's for clocks in memory, the
wall's for rows on disk.

Memory is bounded whatever the crawl's size: the sites with work share `MEMORY_JOBS` jobs
in memory, each a window of at most `SITE_WINDOW` and at least `MIN_WINDOW` (`window`); the
rest of a site's queue waits on disk (`diskqueue.SiteSpill`) and is read back as its window
drains. A job in memory costs about 200 bytes (the `Job`, its URL), so the windows are the
largest part of the crawler's memory; a window larger than a site's next few fetches buys
nothing but ordering by priority within it. Sites with nothing to do are forgotten beyond
`MAX_IDLE_SITES` (oldest first); with `SiteRecords` (`sitedb.py`, the crawler's) what a
forgotten site must not lose (its politeness clock, back-off and page count) is on disk, and a
later URL of it brings it back with them, looked up by its key; its IP's clock stays in memory
until it has passed. The number of sites with work is bounded by the sequencer
(`maxSitesInMemory`).

Order: the window serves the highest priority first, FIFO within a priority
(`records.SiteQueue`). The spill is one FIFO per site: while a site has spilled jobs, new ones
queue on disk behind them whatever their priority (so jobs of one priority never overtake each
other), and priority orders them again only once they are back in the window.

Each job's final outcome is added to its site's `SiteTally` (`tally`, an `Endings` subscriber),
and the sites with the most pages fetched and the most failures are kept on two small boards
(`leaders.Leaders`): the per-site view (`siteview.py`, `/sites`) reads them.

In a cluster, a job may belong to a site another node owns: `enqueue` asks the `Forward` seam
it was given first (the embedded crawl's `never_forward`, or `cluster.Cluster.forward`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from larbinpy.clock import Clock, LoopClock
from larbinpy.frontier.diskqueue import SiteSpill
from larbinpy.frontier.endings import Ended, Endings
from larbinpy.frontier.leaders import TOP_SHOWN, Leaders
from larbinpy.frontier.sitedb import SiteRecord, SiteRecords
from larbinpy.links.urls import host_of, path_of, site_key
from larbinpy.records import IpSlot, Job, Site, SiteState, SiteTally
from larbinpy.stats import FAILURE_KINDS, Outcome, Stats, counted

if TYPE_CHECKING:  # (loaded with `recrawl on` only)
    from larbinpy.frontier.recrawl import SiteRecrawl

WAITING_SHOWN = 10  # robots.txt retries named on the status page

SITE_WINDOW = 128  # jobs of one site kept in memory, at most
MIN_WINDOW = 8  # ... and at least, however many sites share MEMORY_JOBS
MEMORY_JOBS = 50_000  # jobs of all sites kept in memory (beyond it only MIN_WINDOW a site)
MAX_IDLE_SITES = 10_000  # idle site records kept in memory (the rest: sitedb, robotsdb)
DROP_BATCH = 10_000  # spilled jobs read back at a time when a site's queue is dropped


def pages_fetched(site: Site) -> int:
    """The site's outcomes with an HTTP answer (the per-site view's "busiest")."""
    return site.tally.answered if site.tally is not None else 0


def failures(site: Site) -> int:
    """The site's outcomes in FAILURE_KINDS (the per-site view's "most failing")."""
    return site.tally.failed if site.tally is not None else 0


class Forward(Protocol):
    """Where a job goes instead of its site's queue, when this crawl does not own the site.

    Contract: called by `Sites.enqueue` with the job's site key before the site is looked up;
    True means the callee took the job (it is then not queued, counted or started here), False
    that the site is this crawl's and the job is queued as usual. It must not call back into
    the site table.
    """

    def __call__(self, key: str, job: Job, /) -> bool: ...


def never_forward(key: str, job: Job) -> bool:
    """The embedded crawl's `Forward`: every site is this crawl's."""
    return False


class Sites:
    """Every site and IP slot of the crawl."""

    def __init__(self, stats: Stats, default_delay: float, spill: SiteSpill,
                 forward: Forward = never_forward, endings: Endings | None = None,
                 records: SiteRecords | None = None, page_limit: int = 0,
                 clock: Clock | None = None) -> None:
        self.stats = stats
        self.clock = clock or LoopClock()  # the loop's clock: politeness clocks, DNS expiry
        self.records = records  # what a forgotten site must not lose, on disk (None: nowhere)
        self.page_limit = page_limit  # maxPagesPerSite: a site's page count matters when > 0
        self.endings = endings  # told the final outcome of each job dropped here
        self.default_delay = default_delay  # waitDuration; robots.txt may raise it per site
        self.spill = spill
        self.by_key: dict[str, Site] = {}
        self.ips: dict[str, IpSlot] = {}
        # unused_ips and idle are OrderedDicts: both are emptied from their front, where a
        # dict finds its first entry by walking the holes its deletions left.
        # unused_ips: slots no site uses whose clock has not passed yet
        self.unused_ips: OrderedDict[str, IpSlot] = OrderedDict()
        self.queued = 0  # jobs in all site queues, in memory and spilled
        self.in_memory = 0  # jobs in the in-memory windows
        self.idle: OrderedDict[str, None] = OrderedDict()  # sites with nothing to do, oldest first
        # recrawl: each site's state while the site is in the table (recrawldb keeps it too)
        self.recrawl_states: dict[str, SiteRecrawl] = {}
        self.forward = forward
        # the per-site view's lists: the sites with the most pages fetched, the most failures
        self.busiest = Leaders(TOP_SHOWN, pages_fetched)
        self.failing = Leaders(TOP_SHOWN, failures)
        # the stages downstream (DNS, the opener) need this table first: see `connect`
        self.on_new_site: Callable[[Site], None] = lambda site: None
        self.on_job: Callable[[Site], None] = lambda site: None

    def connect(self, on_new_site: Callable[[Site], None],
                on_job: Callable[[Site], None]) -> None:
        """Bind the stages downstream, once they exist: a new site goes to DNS (`on_new_site`),
        a job for a known site to the opener (`on_job`)."""
        self.on_new_site, self.on_job = on_new_site, on_job

    def enqueue(self, job: Job, now: float) -> None:
        """Put a job on its site's queue, creating the site (and asking DNS) when new; unless
        the `Forward` seam takes it (a site another cluster node owns)."""
        key = site_key(job.url)
        if self.forward(key, job):
            return
        site = self.by_key.get(key)
        if site is None:
            site = self._create(key)
            self._store(site, job)
            self.on_new_site(site)
            return
        if site.state is SiteState.DEAD:
            if now < site.dead_until:
                self.stats.count(site.dead_reason)
                if self.endings is not None:
                    self.endings.end(job, site.dead_reason, note=site.dead_note)
                return
            self.idle.pop(key, None)  # busy again: the sequencer's budget counts it
            self._store(site, job)
            self.on_new_site(site)  # negative cache expired: try DNS again
            return
        self.idle.pop(key, None)
        self._store(site, job)
        self.on_job(site)

    def adopt(self, key: str) -> None:
        """A site whose jobs wait in its spill file after a restart: start it again."""
        if key not in self.by_key:
            site = self._create(key)
            self.queued += self.spill.count(key)
            self.on_new_site(site)

    def _create(self, key: str) -> Site:
        """A new site record, with what its record on disk remembers of it."""
        site = self.by_key[key] = Site(key, host_of(key + "/"), delay=self.default_delay)
        saved = self.records.get(key) if self.records is not None else None
        if saved is not None:
            wall = self.clock.wall()
            to_loop = wall - self.clock.now()
            site.ready_at = max(0.0, saved.ready_at - to_loop)
            site.backoffs, site.pages = saved.backoffs, saved.pages
            if saved.addrs and saved.dns_expires > wall:  # its TTL has not passed
                site.dns = (saved.dns_expires - to_loop, list(saved.addrs))
        return site

    def record(self, site: Site, now: float, changed: bool = False) -> None:
        """The site's clock, back-off or page count changed: its row on disk follows, when it
        says more than a new site's (a clock still to pass, a back-off, a counted page) or
        `changed` from a row that did (a back-off over)."""
        if self.records is not None and (changed or site.ready_at > now or site.backoffs
                                         or self.page_limit):
            self.records.put(site.key, self._row(site, site.ready_at))

    def _row(self, site: Site, ready_at: float) -> SiteRecord:
        """The site's row on disk, its clock at `ready_at` (the loop's clock), with its DNS
        answer while that holds."""
        to_wall = self.clock.wall() - self.clock.now()
        dns = site.dns
        if dns is None:
            return SiteRecord(ready_at + to_wall, site.backoffs, site.pages)
        return SiteRecord(ready_at + to_wall, site.backoffs, site.pages, tuple(dns[1]),
                          dns[0] + to_wall)

    def _store(self, site: Site, job: Job) -> None:
        """In the site's memory window if there is room and nothing older is spilled."""
        if (len(site.queue) < self.window() and self.in_memory < MEMORY_JOBS
                and not self.spill.count(site.key)):
            site.queue.append(job)
            self.in_memory += 1
        else:
            self.spill.push(site.key, [job])
        self.queued += 1

    def requeue(self, site: Site, job: Job) -> None:
        """Put back a job taken but not fetched, at the head of its site's queue."""
        site.queue.appendleft(job)
        self.queued += 1
        self.in_memory += 1

    def tally(self, e: Ended) -> None:
        """A job's final outcome (an `Endings` subscriber): added to its site's tally, the
        per-site view's (a site forgotten since keeps none)."""
        url = e.job.url
        site = self.by_key.get(site_key(url))
        if site is None:
            return
        tally = site.tally
        if tally is None:
            tally = site.tally = SiteTally()
        tally.add(time.time(), e.kind, e.status, path_of(url))
        if e.status is not None:
            self.busiest.offer(site, tally.answered)
        if tally.failed and e.kind in FAILURE_KINDS:
            self.failing.offer(site, tally.failed)

    def has_work(self, site: Site) -> bool:
        """Does the site have jobs waiting (in memory or spilled)?"""
        return bool(site.queue) or bool(self.spill.count(site.key))

    def waiting_jobs(self, site: Site) -> int:
        """The site's jobs waiting, in memory and spilled."""
        return len(site.queue) + self.spill.count(site.key)

    def find(self, key: str) -> Site | None:
        """The site of this key, if the table holds it."""
        return self.by_key.get(key)

    def recrawl_state(self, site: Site) -> SiteRecrawl | None:
        """The recrawl's state of a site (None until `set_recrawl_state`); forgotten with it."""
        return self.recrawl_states.get(site.key)

    def set_recrawl_state(self, site: Site, state: SiteRecrawl) -> None:
        """Keep the recrawl's state of a site (its budget multiplier, validator trust)."""
        self.recrawl_states[site.key] = state

    def space_revisit(self, site: Site, now: float, spacing: float) -> float | None:
        """The site's revisit clock: None when a revisit may be fed now (the clock then moves
        `spacing` on), else the loop time from which one may. Like the politeness clock it
        only moves later."""
        if site.revisit_at > now:
            return site.revisit_at
        site.revisit_at = now + spacing
        return None

    def arm_revisit(self, site: Site, at: float, due: Callable[[Site], object]) -> None:
        """The site's one revisit timer, for `at` (one a site: an armed one is kept)."""
        if site.revisit_timer is None:
            site.revisit_timer = self.clock.call_at(at, due, site)

    def revisit_timer_fired(self, site: Site) -> None:
        """The site's revisit timer fired: it has none armed."""
        site.revisit_timer = None

    def window(self) -> int:
        """Jobs a site may hold in memory now: its share of MEMORY_JOBS among the sites that
        are not idle, within MIN_WINDOW..SITE_WINDOW."""
        busy = max(1, len(self.by_key) - len(self.idle))
        return max(MIN_WINDOW, min(SITE_WINDOW, MEMORY_JOBS // busy))

    def take(self, site: Site) -> Job:
        """The next job of a site's queue (refilling the window from disk as it drains)."""
        if len(site.queue) < self.window() // 2:
            self._refill(site)
        self.queued -= 1
        self.in_memory -= 1
        return site.queue.popleft()

    def _refill(self, site: Site) -> None:
        """Move spilled jobs back into the site's window."""
        jobs = self.spill.pop_many(site.key, self.window() - len(site.queue))
        site.queue.extend(jobs)
        self.in_memory += len(jobs)

    def drop(self, site: Site, kind: Outcome, note: str | None = None) -> None:
        """Drop every queued job of a site, counted under `kind` (`note`: why, for the crawl
        log)."""
        n = len(site.queue)
        self._logged(site.queue, kind, note)
        site.queue.clear()
        self.in_memory -= n
        while batch := self.spill.pop_many(site.key, DROP_BATCH):
            n += len(batch)
            self._logged(batch, kind, note)
        self.queued -= n
        self.stats.count(kind, n)

    def _logged(self, jobs: Iterable[Job], kind: Outcome, note: str | None) -> None:
        """The final outcomes of dropped jobs."""
        if self.endings is not None:
            for job in jobs:
                self.endings.end(job, kind, note=note)

    def rest(self, site: Site) -> None:
        """A site has nothing to do right now: it may be forgotten later."""
        if not site.in_flight and not self.has_work(site):
            self.idle.pop(site.key, None)
            self.idle[site.key] = None

    def evict(self, now: float) -> int:
        """Forget the oldest idle sites beyond MAX_IDLE_SITES; how many were forgotten. With
        records on disk a site's clock goes with its row, and an IP's clock stays in
        `unused_ips` until it has passed; without, a site waits for both clocks."""
        self._forget_unused_ips(now)
        forgotten = 0
        while len(self.idle) > MAX_IDLE_SITES:
            key = next(iter(self.idle))
            del self.idle[key]
            site = self.by_key.get(key)
            if site is None or site.in_flight or self.has_work(site):
                continue  # busy again: it will rest again later
            if site.timer or site.revisit_timer or (self.records is None and (
                    site.ready_at > now or (site.ip is not None and site.ip.ready_at > now))):
                self.idle[key] = None  # its politeness clock still matters: later
                break
            del self.by_key[key]
            self.recrawl_states.pop(key, None)
            self._detach(site, now)
            forgotten += 1
        return forgotten

    def _forget_unused_ips(self, now: float) -> None:
        """Drop the unused IP slots whose clock has passed (oldest first: they were left in
        the order their clocks were set, which is about the order they pass)."""
        while self.unused_ips:
            addr, slot = next(iter(self.unused_ips.items()))
            if slot.ready_at > now and slot.users <= 0:
                return
            del self.unused_ips[addr]
            if slot.users <= 0 and not slot.in_flight and not slot.waiting:
                self.ips.pop(addr, None)

    def attach(self, site: Site, addr: str) -> None:
        """Give a site the politeness slot of its address (shared by every site on it)."""
        slot = self.ips.get(addr)
        if slot is None:
            slot = self.ips[addr] = IpSlot(addr)
        if site.ip is not slot:
            self._detach(site)
            slot.users += 1
            site.ip = slot

    def _detach(self, site: Site, now: float | None = None) -> None:
        """A site leaves its slot; a slot nobody uses any more is forgotten, or with records
        on disk kept in `unused_ips` while its clock (`now`: the loop's) has not passed."""
        slot, site.ip = site.ip, None
        if slot is not None:
            slot.users -= 1
            if slot.users <= 0 and not slot.in_flight and not slot.waiting:
                if self.records is not None and now is not None and slot.ready_at > now:
                    self.unused_ips[slot.addr] = slot
                else:
                    self.ips.pop(slot.addr, None)

    # --- a site's state: the stages decide, the table writes (one owner, its invariants) ---

    def resolving(self, site: Site) -> None:
        """The site waits for DNS (new, or its negative cache expired)."""
        site.state = SiteState.DNS

    def resolved(self, site: Site, addr: str, robots_first: bool,
                 answer: tuple[float, list[str]] | None = None) -> None:
        """DNS answered: the site has its address's politeness slot (`attach`) and waits for
        robots.txt (`robots_first`) or is ready; `answer` (expiry on the loop's clock,
        addresses) goes into its row on disk with the rest (None: nothing to keep)."""
        site.dns = answer
        self.attach(site, addr)
        site.state = SiteState.ROBOTS if robots_first else SiteState.READY

    def kill(self, site: Site, kind: Outcome, until: float, note: str | None = None) -> None:
        """The site is DEAD until `until` (loop clock): its queue is dropped as `kind`, and
        URLs arriving meanwhile are counted so at once (`enqueue`); `note`: why, for the crawl
        log."""
        site.state = SiteState.DEAD
        site.dead_reason = kind
        site.dead_note = note
        site.dead_until = until
        self.drop(site, kind, note)
        self.rest(site)  # nothing left to do: its record may be forgotten in time

    def robots_known(self, site: Site, rules: bytes | None, expires: float,
                     delay: float) -> None:
        """robots.txt's rules (its body; None: allow all) hold until `expires`: the site is
        READY, its robots.txt failures are forgotten, and `delay` spaces its fetches from now
        on."""
        site.robots = rules
        site.robots_expires = expires
        site.robots_failures = 0
        site.delay = delay
        site.state = SiteState.READY

    def robots_failing(self, site: Site, failures: int) -> None:
        """robots.txt failed `failures` times in a row (5xx, 429, unreachable): the site's jobs
        wait for its retry."""
        site.robots_failures = failures

    def robots_given_up(self, site: Site, until: float, note: str) -> None:
        """robots.txt failed for good: complete disallow until `until` (a DEAD site whose URLs
        are forbiddenRobots), its failures forgotten."""
        site.robots_failures = 0
        self.kill(site, Outcome.forbiddenRobots, until, note)

    def hold_back(self, site: Site, until: float) -> None:
        """The site fetches nothing before `until`; its clock only ever moves later."""
        if until > site.ready_at:
            site.ready_at = until

    def hold_back_ip(self, site: Site, until: float) -> None:
        """The site's IP fetches nothing before `until` (another node holds it); its clock only
        ever moves later."""
        ip = site.ip
        assert ip is not None
        if until > ip.ready_at:
            ip.ready_at = until

    def back_off(self, site: Site, until: float) -> None:
        """A 429/503: one more in a row (the exponent of the next back-off) and the site
        fetches nothing before `until`."""
        site.backoffs += 1
        self.hold_back(site, until)

    def answered(self, site: Site) -> None:
        """Any other answer: the site answers normally again, the next back-off starts over."""
        if site.backoffs:
            site.backoffs = 0
            self.record(site, 0.0, changed=True)  # its row said otherwise

    def count_page(self, site: Site) -> None:
        """A page fetch of the site starts (what `maxPagesPerSite` counts): on disk at once,
        so a kill during the fetch cannot give the site a page more after the restart."""
        site.pages += 1
        if site.in_flight:
            self.record_fetching(site)

    def record_fetching(self, site: Site) -> None:
        """On disk, the clock of a site fetching as if the fetch ended now: a restart after a
        kill waits for it, even if the kill took the fetch (and its `Politeness.end_fetch`) with
        it."""
        if self.records is not None and (site.delay > 0 or self.page_limit):
            self.records.put(site.key, self._row(site, max(site.ready_at,
                                                           self.clock.now() + site.delay)))

    def jobs(self) -> list[Job]:
        """The jobs in the in-memory windows, for a checkpoint (spill files have cursors):
        each priority's in its order, the priorities of a site in none (a restart puts each
        job back on its priority's FIFO). One loop, no generator a site: every checkpoint
        walks the `maxSitesInMemory` sites (docs/benchmarks.md, "Broad crawls")."""
        jobs: list[Job] = []
        extend = jobs.extend
        for site in self.by_key.values():
            if site.queue:
                for fifo in site.queue.fifos():
                    extend(fifo)
        return jobs

    def census(self) -> Census:
        """The table as the status page shows it, in one walk of it."""
        states, parked, retries = {s.value: 0 for s in SiteState}, 0, []
        for site in self.by_key.values():
            state = site.state
            if state is SiteState.READY and (site.timer is not None or site.waiting_ip):
                parked += 1
            else:
                states[state.value] += 1
            if state is SiteState.ROBOTS and site.robots_failures and self.has_work(site):
                retries.append((site.ready_at, site.key))
        retries.sort()
        return Census(states, parked, retries, self.clock.wall() - self.clock.now())

    def busy(self) -> int:
        """Sites with work (or a fetch running): the records less the idle ones (what the
        sequencer bounds by `maxSitesInMemory`)."""
        return len(self.by_key) - len(self.idle)

    def parked(self) -> int:
        """Ready sites waiting on a politeness timer or on their IP's turn."""
        return self.census().parked


@dataclass(frozen=True, slots=True)
class Census:
    """The site table's figures for the status page. Each site is in exactly one figure of
    `states` and `parked`: a ready site waiting on a politeness timer or on its IP's turn is
    parked, not ready, and a site waiting for robots.txt is under that state, timer or not."""

    states: dict[str, int]
    parked: int
    retries: list[tuple[float, str]]  # robots.txt retries: (loop time, site), soonest first
    to_wall: float = 0.0  # what turns the loop's clock into the wall clock, when taken

    def waiting_for(self) -> tuple[str, ...]:
        """What the crawl waits for, in words (status page, when not idle): the robots.txt
        retries, the soonest first and at most WAITING_SHOWN, then how many sites are parked."""
        wall = self.to_wall
        shown = [f"robots.txt retry of {key} at "
                 f"{time.strftime('%H:%M:%S', time.gmtime(wall + at))} UTC"
                 for at, key in self.retries[:WAITING_SHOWN]]
        if len(self.retries) > WAITING_SHOWN:
            shown.append(f"{len(self.retries) - WAITING_SHOWN} more robots.txt retries")  # > 1
        if self.parked > 0:  # the status page's "parked" figure
            shown.append(f"{counted(self.parked, 'site')} parked on a politeness timer or their "
                         "IP's turn")
        return tuple(shown)
