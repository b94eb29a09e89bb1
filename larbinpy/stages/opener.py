"""Stage 5, larbin's fetchOpen: decide which site fetches next, and when.

A fixed pool of `pagesConnexions` workers takes sites from a ready queue. A site is ready
when its DNS is known, it has work (robots.txt first, then its queued jobs), it has fewer
than `connectionsPerHost` fetches running, its IP has a free place (the IP's fetches running
plus its sites on the ready queue are fewer than `connectionsPerHost`), and both its own clock
and its IP's clock allow (`waitDuration`, or a larger robots.txt Crawl-delay, since the end of
the last fetch). A site whose own clock is the later one waits on its own timer
(`loop.call_at`); a site its IP holds back (no free place, or its clock not yet due) waits in
the IP's FIFO, and the IP wakes only as many of them as it has places, from one timer of its
own: a fetch costs the same whether one site or tens of thousands share its IP. Nothing polls,
and no worker holds a slot while a site waits. The opener makes these decisions; every count,
clock, timer and FIFO it changes is changed by the site table (`Sites`), their one owner.

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

from larbinpy.config import Config
from larbinpy.frontier.sites import Sites
from larbinpy.records import IpSlot, Job, Site, SiteState
from larbinpy.stages.reader import Reader
from larbinpy.stages.robots import Robots

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
    """Ready queue, politeness clocks and the fetch workers."""

    def __init__(
        self, cfg: Config, sites: Sites, robots: Robots, reader: Reader,
        on_fetch_done: Callable[[], None], *, fetch_page: PageFetch, fetch_robots: RobotsFetch,
    ) -> None:
        self.cfg, self.sites, self.robots, self.reader = cfg, sites, robots, reader
        self.on_fetch_done = on_fetch_done
        self.fetch_page, self.fetch_robots = fetch_page, fetch_robots
        self.per_host = cfg.connections_per_host
        # each entry holds one of its IP's places (`IpSlot.in_ready`) until a worker takes it
        self.ready: ReadyQueue[tuple[Site, IpSlot]] = ReadyQueue()
        self._running: asyncio.AbstractEventLoop | None = None  # the loop, once `_loop` asked
        self.in_flight = 0
        self.active: dict[int, Job] = {}  # jobs being fetched, saved by a checkpoint
        self.stopping = False

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, asked for once (each asking is a getpid() on Python 3.11)."""
        loop = self._running
        if loop is None:
            loop = self._running = asyncio.get_running_loop()
        return loop

    def start(self) -> list[asyncio.Task[None]]:
        """The `pagesConnexions` workers."""
        return [asyncio.ensure_future(self._worker()) for _ in range(self.cfg.pages_connexions)]

    def consider(self, site: Site, *, front: bool = False) -> None:
        """Something changed for this site: make it ready, park it, or leave it. A site in its
        IP's FIFO is left there: its IP wakes it (`front`: it goes back to the FIFO's head)."""
        if site.in_ready or site.waiting_ip or site.state not in (SiteState.READY,
                                                                  SiteState.ROBOTS):
            return
        loop = self._loop()
        verdict = self._verdict(site, loop.time())
        if verdict == "go":
            self.ready.put((site, self.sites.enter_ready(site)))
        elif verdict == "ip":
            self._wait_ip(site, front)
        elif isinstance(verdict, float):
            self._park(site, verdict, loop)

    def _verdict(self, site: Site, now: float) -> str | float | None:
        """"go", "ip" (its IP is busy or its IP's clock is the later one), a time to wait for
        on its own clock, or None (nothing to do now)."""
        if not self.sites.has_work(site):
            return None  # robots.txt is fetched for a site's pages, never for its own sake
        robots_first = self.robots.needs_fetch(site, now)
        if site.in_flight >= (1 if robots_first else self.per_host):
            return None  # the end of the running fetch considers the site again
        ip = site.ip
        assert ip is not None
        if site.ready_at > now and site.ready_at > ip.ready_at:
            return site.ready_at
        if ip.in_flight + ip.in_ready >= self.per_host or ip.ready_at > now:
            return "ip"
        return "go"

    def _wait_ip(self, site: Site, front: bool) -> None:
        """The site waits in its IP's FIFO, without a timer of its own."""
        ip = self.sites.wait_for_ip(site, front)
        self._wake_ip(ip)  # its clock may be all that holds the site: the IP's timer then

    def _wake_ip(self, ip: IpSlot) -> None:
        """Wake the sites waiting on an IP, as many as it has places for now, or arm the IP's
        one timer for when its clock is due.

        The order is important: this runs after every change that can free a place on the IP
        (a fetch ends, a site leaves the ready queue without fetching, a site joins the FIFO,
        the IP's timer fires), so that whenever the IP has a place and sites wait, either one
        is being woken or the IP's timer is armed for its clock; the FIFO never stalls. Each
        site popped goes to the ready queue (taking a place), or parks on its own later clock,
        or leaves the FIFO (no work, or its own fetches at the limit: their end considers it).
        """
        loop = self._loop()
        now = loop.time()
        while ip.waiting and ip.in_flight + ip.in_ready < self.per_host:
            if ip.ready_at > now:
                self.sites.arm_ip(ip, loop, self._ip_due)
                return
            self.consider(self.sites.next_waiting(ip))

    def _ip_due(self, ip: IpSlot) -> None:
        """An IP's timer fired: its clock may be due."""
        self.sites.ip_timer_fired(ip)
        self._wake_ip(ip)

    def _park(self, site: Site, at: float, loop: asyncio.AbstractEventLoop) -> None:
        """Wake the site at `at`, its own clock (one timer per site)."""
        self.sites.park(site, at, loop, self._wake)

    def _wake(self, site: Site) -> None:
        """A parked site's timer fired."""
        self.sites.timer_fired(site)
        self.consider(site)

    async def _worker(self) -> None:
        """One connection slot: take a ready site, fetch its next job, repeat."""
        loop = self._loop()
        ready = self.ready
        while not self.stopping:
            site, ip = await ready.get(loop)
            # its place on the IP: taken by its fetch, or woken for another
            self.sites.leave_ready(site, ip)
            if self.stopping:
                break
            try:
                await self._turn(site, ip, loop.time())
            except Exception:  # a bug must cost one fetch, never a connection slot for good
                log.exception("bug in the opener for %s", site.key)
                self._wake_ip(ip)

    async def _turn(self, site: Site, ip: IpSlot, now: float) -> None:
        """A ready site's turn: robots.txt first if due, else its next job. `ip` is the slot
        whose place it held on the ready queue."""
        # the site waited in the queue: a fetch that ended meanwhile may have restarted its
        # IP's clock (it keeps its turn at the head of the IP's FIFO), or its own
        if self._verdict(site, now) != "go":
            self.consider(site, front=True)
            self._wake_ip(ip)
        elif self.robots.needs_fetch(site, now):
            await self._run(site, None)
        elif (job := self._next_fetchable(site)) is not None:
            await self._run(site, job)
        else:  # every job it had was refused without a request: no politeness wait is owed
            self._wake_ip(ip)
            self.consider(site)
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
        self.reader.stats.resource_waits += 1
        self.sites.hold_back(site, self._loop().time() + SHORT_RETRY)
        log.warning("cannot read the queue of %s (%s): retrying in %.0f s", site.key, exc,
                    SHORT_RETRY)

    async def _run(self, site: Site, job: Job | None) -> None:
        """One fetch (robots.txt when job is None) between the politeness bookkeeping."""
        self.sites.start_fetch(site)
        self.in_flight += 1
        if job is not None:
            self.active[id(job)] = job
        self.consider(site)  # another connection may start on it right away
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
            self._release(site, self._loop().time(), robots=job is None)

    def _release(self, site: Site, now: float, robots: bool = False) -> None:
        """A fetch ended: restart both clocks, then wake its IP's waiters and this site."""
        ip = self.sites.end_fetch(site, now)
        self.in_flight -= 1
        if robots:
            # robots.txt is fetched for the site's pages, not as its turn: its next page comes
            # first (else on a shared IP that keeps finding new hosts, their robots.txt would
            # all go before any of their pages, and pages would come in waves)
            self.consider(site, front=True)
            self._wake_ip(ip)
        else:
            # the sites that waited for the IP come first, this one behind them: one site
            # with many pages does not keep a shared IP to itself
            self._wake_ip(ip)
            self.consider(site)
        self.sites.rest(site)
        self.on_fetch_done()
