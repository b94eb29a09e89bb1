"""Stage 5, larbin's fetchOpen: decide which site fetches next, and when.

A fixed pool of `pagesConnexions` workers takes sites from a ready queue. A site is ready
when its DNS is known, it has work (robots.txt first, then its queued jobs), it has fewer
than `connectionsPerHost` fetches running, and both its own clock and its IP's clock allow
(`waitDuration`, or a larger robots.txt Crawl-delay, since the end of the last fetch).
A site that must wait is parked on a timer (`loop.call_at`) or on its IP's waiting list;
nothing polls, and no worker holds a slot while a site waits.

The fetches themselves are seams the opener is given (`PageFetch`, `RobotsFetch`): the
reader's and the robots stage's `fetch` in the embedded crawl; in a cluster, the same wrapped
by `cluster.Cluster` (the IP lease across nodes, the pending hash in Redis).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from larbinpy.config import Config
from larbinpy.frontier.sites import Sites
from larbinpy.records import Job, Site, SiteState
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
        self.ip_gap = cfg.wait_duration
        self.ready: asyncio.Queue[Site] = asyncio.Queue()
        self.in_flight = 0
        self.active: dict[int, Job] = {}  # jobs being fetched, saved by a checkpoint
        self.stopping = False

    def start(self) -> list[asyncio.Task[None]]:
        """The `pagesConnexions` workers."""
        return [asyncio.ensure_future(self._worker()) for _ in range(self.cfg.pages_connexions)]

    def consider(self, site: Site) -> None:
        """Something changed for this site: make it ready, park it, or leave it."""
        if site.in_ready or site.state not in (SiteState.READY, SiteState.ROBOTS):
            return
        loop = asyncio.get_running_loop()
        verdict = self._verdict(site, loop.time())
        if verdict == "go":
            site.in_ready = True
            self.ready.put_nowait(site)
        elif verdict == "ip":
            if not site.waiting_ip:  # its IP's next release wakes it
                site.waiting_ip = True
                site.ip.waiting.append(site)  # type: ignore[union-attr]
        elif isinstance(verdict, float):
            self._park(site, verdict, loop)

    def _verdict(self, site: Site, now: float) -> str | float | None:
        """"go", "ip" (its IP is busy), a time to wait for, or None (nothing to do now)."""
        if not self.sites.has_work(site):
            return None  # robots.txt is fetched for a site's pages, never for its own sake
        robots_first = self.robots.needs_fetch(site, now)
        if site.in_flight >= (1 if robots_first else self.per_host):
            return None  # the end of the running fetch considers the site again
        ip = site.ip
        assert ip is not None
        if ip.in_flight >= self.per_host:
            return "ip"
        at = max(site.ready_at, ip.ready_at)
        return at if at > now else "go"

    def _park(self, site: Site, at: float, loop: asyncio.AbstractEventLoop) -> None:
        """Wake the site at `at` (one timer per site)."""
        if site.timer is not None:
            if site.timer.when() <= at:
                return
            site.timer.cancel()
        site.timer = loop.call_at(at, self._wake, site)

    def _wake(self, site: Site) -> None:
        """A parked site's timer fired."""
        site.timer = None
        self.consider(site)

    async def _worker(self) -> None:
        """One connection slot: take a ready site, fetch its next job, repeat."""
        loop = asyncio.get_running_loop()
        while not self.stopping:
            site = await self.ready.get()
            site.in_ready = False
            if self.stopping:
                break
            try:
                await self._turn(site, loop.time())
            except Exception:  # a bug must cost one fetch, never a connection slot for good
                log.exception("bug in the opener for %s", site.key)

    async def _turn(self, site: Site, now: float) -> None:
        """A ready site's turn: robots.txt first if due, else its next job."""
        # the site waited in the queue: another worker may have used its turn meanwhile
        if self._verdict(site, now) != "go":
            self.consider(site)
        elif self.robots.needs_fetch(site, now):
            await self._run(site, None)
        elif (job := self._next_fetchable(site)) is not None:
            await self._run(site, job)
        else:  # every job it had was refused without a request: no politeness wait is owed
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
        site.ready_at = max(site.ready_at, asyncio.get_running_loop().time() + SHORT_RETRY)
        log.warning("cannot read the queue of %s (%s): retrying in %.0f s", site.key, exc,
                    SHORT_RETRY)

    async def _run(self, site: Site, job: Job | None) -> None:
        """One fetch (robots.txt when job is None) between the politeness bookkeeping."""
        ip = site.ip
        assert ip is not None
        site.in_flight += 1
        ip.in_flight += 1
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
            self._release(site, asyncio.get_running_loop().time())

    def _release(self, site: Site, now: float) -> None:
        """A fetch ended: restart both clocks, then wake this site and its IP's waiters."""
        ip = site.ip
        assert ip is not None
        site.in_flight -= 1
        ip.in_flight -= 1
        self.in_flight -= 1
        site.ready_at = max(site.ready_at, now + site.delay)
        ip.ready_at = max(ip.ready_at, now + self.ip_gap)
        self.consider(site)
        self.sites.rest(site)
        while ip.waiting and ip.in_flight < self.per_host:
            other = ip.waiting.popleft()
            other.waiting_ip = False
            self.consider(other)
        self.on_fetch_done()
