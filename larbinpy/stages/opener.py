"""Stage 5, larbin's fetchOpen: decide which site fetches next, and when.

A fixed pool of `pagesConnexions` workers takes sites from a ready queue, and fetches each
one's robots.txt or next job. Which site is ready, which waits on its own timer or in its IP's
FIFO, and in which order a finished fetch lets the others go, is the politeness state machine's
(`frontier.politeness.Politeness`, unit-tested alone on a fake clock): the opener makes one,
feeding this ready queue, and calls it when a worker takes a site and when a fetch starts and
ends. Nothing polls, and no worker holds a slot while a site waits.

The fetches themselves are seams the opener is given (`PageFetch`, `RobotsFetch`): the
reader's and the robots stage's `fetch` in the embedded crawl; in a cluster, the same wrapped
by `cluster.Cluster` (the IP lease across nodes, the pending hash in Redis).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from larbinpy.clock import Clock
from larbinpy.config import Config
from larbinpy.frontier.politeness import GO, Politeness
from larbinpy.frontier.sites import Sites
from larbinpy.records import IpSlot, Job, Site
from larbinpy.stages.reader import Reader
from larbinpy.stages.robots import Robots
from larbinpy.stats import Stats

log = logging.getLogger("larbinpy.opener")
REFUSALS_PER_TURN = 1000  # refused jobs counted in one turn, so one site cannot stall the loop
SHORT_RETRY = 1.0  # seconds a site waits when its queued jobs could not be read (EMFILE...)


class PageFetch(Protocol):
    """Fetch one job of a site (`Reader.fetch`, or a wrapping of it).

    Contract: the opener has taken the job off the site's queue and counted a fetch in flight
    on the site and its IP; when the call returns it restarts both politeness clocks. The
    callee counts exactly one outcome (a 429/503 that sends the job back to its queue counts
    backedOff), or puts the job back at the head of its site's queue and counts nothing (an
    IP another cluster node holds). It may be cancelled when the crawl stops; the job is then
    saved by the checkpoint.
    """

    def __call__(self, site: Site, job: Job, /) -> Awaitable[None]: ...


class RobotsFetch(Protocol):
    """Fetch a site's robots.txt and apply it, or plan its retry (`Robots.fetch`, or a wrapping
    of it).

    Contract: as `PageFetch`, for the site's robots.txt. When it returns, the rules are known
    (`Robots.needs_fetch` is False until they expire), or the site is dead or has no jobs
    left, or the site's or its IP's clock was moved to when to try again (else the opener
    would fetch it again at once).
    """

    def __call__(self, site: Site, /) -> Awaitable[None]: ...


T = TypeVar("T")


class ReadyQueue(Generic[T]):
    """The FIFO between the opener's decisions and its workers: `put` never waits, `get`
    waits while it is empty (asyncio.Queue's contract without its task accounting, which
    nothing here joins: two calls a fetch instead of nine)."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._getters: deque[asyncio.Future[T]] = deque()

    def put(self, item: T) -> None:
        """Hand `item` to the longest-waiting worker, or queue it."""
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():  # (a worker cancelled while it waited has gone)
                getter.set_result(item)
                return
        self._items.append(item)

    async def get(self, loop: asyncio.AbstractEventLoop) -> T:
        """The next item, when there is one."""
        if self._items:
            return self._items.popleft()
        getter: asyncio.Future[T] = loop.create_future()
        self._getters.append(getter)
        try:
            return await getter
        except asyncio.CancelledError:
            if getter.done() and not getter.cancelled():  # handed over, then cancelled
                self._items.appendleft(getter.result())
            raise

    def __len__(self) -> int:
        return len(self._items)


class Opener:
    """The fetch workers over the ready queue that the politeness state machine fills."""

    def __init__(
        self, cfg: Config, sites: Sites, robots: Robots, reader: Reader,
        on_fetch_done: Callable[[], None], *, fetch_page: PageFetch, fetch_robots: RobotsFetch,
        stats: Stats, clock: Clock,
    ) -> None:
        self.cfg, self.sites, self.robots, self.reader = cfg, sites, robots, reader
        self.stats = stats  # the crawl's: resource_waits
        self.clock = clock  # the crawl's one clock, the state machine's too
        self.on_fetch_done = on_fetch_done
        self.fetch_page, self.fetch_robots = fetch_page, fetch_robots
        # each entry holds one of its IP's places (`IpSlot.in_ready`) until a worker takes it
        self.ready: ReadyQueue[tuple[Site, IpSlot]] = ReadyQueue()
        self.politeness = Politeness(sites, self.clock, cfg.connections_per_host,
                                     robots.needs_fetch, self.ready.put)
        # something changed for a site (a job, DNS answered): the state machine's to decide
        self.consider = self.politeness.consider
        self.in_flight = 0
        self.active: dict[int, Job] = {}  # jobs being fetched, saved by a checkpoint
        self.stopping = False

    def start(self) -> list[asyncio.Task[None]]:
        """The `pagesConnexions` workers."""
        return [asyncio.ensure_future(self._worker()) for _ in range(self.cfg.pages_connexions)]

    async def _worker(self) -> None:
        """One connection slot: take a ready site, fetch its next job, repeat."""
        # the ready queue's futures are the loop's (time is the clock's)
        loop = asyncio.get_running_loop()
        ready, politeness, now = self.ready, self.politeness, self.clock.now
        while not self.stopping:
            site, ip = await ready.get(loop)
            # its place on the IP: taken by its fetch, or woken for another
            politeness.leave_ready(site, ip)
            if self.stopping:
                break
            try:
                await self._turn(site, ip, now())
            except Exception:  # a bug must cost one fetch, never a connection slot for good
                log.exception("bug in the opener for %s", site.key)
                politeness.wake_ip(ip)

    async def _turn(self, site: Site, ip: IpSlot, now: float) -> None:
        """A ready site's turn: robots.txt first if due, else its next job. `ip` is the slot
        whose place it held on the ready queue."""
        politeness = self.politeness
        if politeness.verdict(site, now) != GO:  # things changed while it waited in the queue
            politeness.lost_turn(site, ip)
        elif self.robots.needs_fetch(site, now):
            await self._run(site, None)
        elif (job := self._next_fetchable(site)) is not None:
            await self._run(site, job)
        else:  # every job it had was refused without a request: no politeness wait is owed
            politeness.release(site, ip)
            self.sites.rest(site)
            self.on_fetch_done()

    def _next_fetchable(self, site: Site) -> Job | None:
        """The site's next job that needs a request; refused ones (robots.txt, maxPagesPerSite)
        are counted on the way, at most REFUSALS_PER_TURN of them per turn."""
        for _ in range(REFUSALS_PER_TURN):
            if not self.sites.has_work(site):
                return None
            try:
                job = self.sites.take(site)
            except OSError as exc:  # its spill file cannot be opened or read now: not a bug
                self._short_of(site, exc)
                return None
            if not self.reader.refused(site, job):
                return job
        return None

    def _short_of(self, site: Site, exc: OSError) -> None:
        """Reading a site's queue was refused (EMFILE, ENOMEM...): it waits SHORT_RETRY seconds;
        its queue is untouched (SiteSpill's contract), so nothing is lost."""
        self.stats.resource_waits += 1
        self.sites.hold_back(site, self.clock.now() + SHORT_RETRY)
        log.warning("cannot read the queue of %s (%s): retrying in %.0f s", site.key, exc,
                    SHORT_RETRY)

    async def _run(self, site: Site, job: Job | None) -> None:
        """One fetch (robots.txt when job is None) between the politeness bookkeeping."""
        self.politeness.start_fetch(site)  # (which considers it for another connection)
        self.in_flight += 1
        if job is not None:
            self.active[id(job)] = job
        try:
            if job is None:
                await self.fetch_robots(site)
            else:
                await self.fetch_page(site, job)
            if job is not None:
                del self.active[id(job)]
        except Exception:
            log.exception("bug while fetching %s", job.url if job else site.key)
            self.active.pop(id(job), None)
        finally:
            self._release(site, robots=job is None)

    def _release(self, site: Site, robots: bool = False) -> None:
        """A fetch ended: the state machine restarts both clocks and lets the waiters go."""
        self.in_flight -= 1
        self.politeness.end_fetch(site, robots=robots)
        self.sites.rest(site)
        self.on_fetch_done()
