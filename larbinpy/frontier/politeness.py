"""The politeness state machine of a site and of its IP: may it fetch now, which waiter the
IP wakes, in which order a finished fetch lets the others go.

A site is ready to fetch when it has work (robots.txt first, then its queued jobs), fewer
than `connectionsPerHost` fetches running (one while its robots.txt is due), its IP has a
free place (the IP's fetches running plus its sites on the ready queue are fewer than
`connectionsPerHost`), and both its own clock and its IP's clock allow (`waitDuration`, or a
larger robots.txt Crawl-delay, since the end of the last fetch). A site whose own clock is the
later one waits on its own timer; a site its IP holds back (no free place, or the IP's clock
not yet due) waits in the IP's FIFO, and the IP wakes only as many of them as it has places,
from one timer of its own: a fetch costs the same whether one site or tens of thousands share
its IP. Nothing polls.

`Politeness` owns these transitions: with the site table (`sites.py`: records, queues, the
clocks other stages push later) it is one of the two writers of a `Site` or an `IpSlot`
(tests/test_layout.py), and the only one of their ready, FIFO, timer and fetch counts. The
opener (`stages/opener.py`) keeps the workers and the running fetches, and calls it: a site
is `consider`ed when something changed for it, a worker takes it (`leave_ready`), a fetch
starts (`start_fetch`) and ends (`end_fetch`). Time is read and timers armed through the
`Clock` it is given, so its unit tests run on a `FakeClock` (tests/test_politeness.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from larbinpy.clock import Clock
from larbinpy.frontier.sites import Sites
from larbinpy.records import IpSlot, Site, SiteState

GO, IP = "go", "ip"  # verdicts besides a time to wait for and None (nothing to do)
Verdict = str | float | None

_ACTIVE = (SiteState.READY, SiteState.ROBOTS)  # the states in which a site fetches


class Politeness:
    """The ready/wait/park decisions and transitions of every site and IP of a crawl."""

    def __init__(self, sites: Sites, clock: Clock, per_host: int,
                 robots_due: Callable[[Site, float], bool],
                 ready: Callable[[tuple[Site, IpSlot]], None]) -> None:
        self.sites, self.clock, self.per_host = sites, clock, per_host
        self.robots_due = robots_due  # is robots.txt to fetch before the site's next page?
        self.ready = ready  # the opener's ready queue: each entry holds a place on its IP
        self._now = clock.now  # (bound once: it is read a few times a fetch)

    def consider(self, site: Site, *, front: bool = False) -> None:
        """Something changed for this site: make it ready, park it, or leave it.

        Invariant: a site is at most once on the ready queue (`in_ready`) and at most once in
        its IP's FIFO (`waiting_ip`), never both; a site in the FIFO is left there (its IP
        wakes it; `front`: when it joins, at the FIFO's head)."""
        if site.in_ready or site.waiting_ip or site.state not in _ACTIVE:
            return
        verdict = self.verdict(site, self._now())
        if verdict == GO:
            ip = site.ip
            assert ip is not None
            site.in_ready = True
            ip.in_ready += 1
            self.ready((site, ip))
        elif verdict == IP:
            self._wait_ip(site, front)
        elif isinstance(verdict, float):
            self._park(site, verdict)

    def verdict(self, site: Site, now: float) -> Verdict:
        """May the site fetch at `now`: GO, IP (its IP has no free place, or its IP's clock is
        the later one), the time its own clock allows (the later one), or None (no work, or
        its own fetches at the limit: the end of one considers it again). Reads only."""
        if not self.sites.has_work(site):
            return None  # robots.txt is fetched for a site's pages, never for its own sake
        robots_first = self.robots_due(site, now)
        if site.in_flight >= (1 if robots_first else self.per_host):
            return None
        ip = site.ip
        assert ip is not None
        # (>=: when both clocks say the same time, as for a site alone on its IP, the site
        # parks on its own timer and the IP needs neither a FIFO nor a timer of its own)
        if site.ready_at > now and site.ready_at >= ip.ready_at:
            return site.ready_at
        if ip.in_flight + ip.in_ready >= self.per_host or ip.ready_at > now:
            return IP
        return GO

    def _wait_ip(self, site: Site, front: bool) -> None:
        """The site waits in its IP's FIFO (at its head with `front`), without a timer of its
        own: the IP's wakes it. Its clock may be all that holds the site: `wake_ip` then arms
        the IP's timer."""
        ip = site.ip
        assert ip is not None
        if site.timer is not None:
            site.timer.cancel()
            site.timer = None
        site.waiting_ip = True
        if ip.waiting is None:
            ip.waiting = deque()
        if front:
            ip.waiting.appendleft(site)
        else:
            ip.waiting.append(site)
        self.wake_ip(ip)

    def wake_ip(self, ip: IpSlot) -> None:
        """Wake the sites waiting on an IP, first come first, as many as it has places for
        now; or, when its clock is the later one, arm its one timer for it.

        Invariant (the order is important): this runs after every change that can free a
        place on the IP (a fetch ends, a site leaves the ready queue without fetching, a site
        joins the FIFO, the IP's timer fires), so that whenever the IP has a place and sites
        wait, one is being woken or the IP's timer is armed: the FIFO never stalls. Each site
        popped goes to the ready queue (taking a place), parks on its own later clock, or
        leaves the FIFO (no work, or its own fetches at the limit: their end considers it).
        The IP has at most one timer; its clock only moves later, so an armed timer fires at
        or before it and re-arms."""
        now = self._now()
        waiting = ip.waiting
        while waiting and ip.in_flight + ip.in_ready < self.per_host:
            if ip.ready_at > now:
                if ip.timer is None:
                    ip.timer = self.clock.call_at(ip.ready_at, self._ip_due, ip)
                return
            site = waiting.popleft()
            site.waiting_ip = False
            self.consider(site)

    def _ip_due(self, ip: IpSlot) -> None:
        """The IP's timer fired: it has none armed, and its clock may be due."""
        ip.timer = None
        self.wake_ip(ip)

    def _park(self, site: Site, at: float) -> None:
        """Wake the site at `at`, its own clock. Invariant: one timer per site, the earlier
        one kept (a later wake-up re-parks if its clock moved on)."""
        timer = site.timer
        if timer is not None:
            if timer.when() <= at:
                return
            timer.cancel()
        site.timer = self.clock.call_at(at, self._wake, site)

    def _wake(self, site: Site) -> None:
        """A parked site's timer fired: it has none armed; it is considered again."""
        site.timer = None
        self.consider(site)

    def leave_ready(self, site: Site, ip: IpSlot) -> None:
        """A worker took the site off the ready queue: the place it held on `ip` is free
        (taken at once by its fetch, or given back by `lost_turn`/`release`)."""
        site.in_ready = False
        ip.in_ready -= 1

    def lost_turn(self, site: Site, ip: IpSlot) -> None:
        """The site's verdict is no longer GO when a worker took it (a fetch that ended
        while it waited restarted its IP's clock, or its own): it keeps its turn at the head
        of its IP's FIFO (or parks), and the place it held on `ip` goes to another."""
        self.consider(site, front=True)
        self.wake_ip(ip)

    def start_fetch(self, site: Site) -> None:
        """A fetch of the site starts: counted on it and its IP until `end_fetch` (its
        clock on disk as if it ended now: `Sites.record_fetching`); then the site is
        considered for another connection at once."""
        ip = site.ip
        assert ip is not None
        site.in_flight += 1
        ip.in_flight += 1
        self.sites.record_fetching(site)
        self.consider(site)

    def end_fetch(self, site: Site, *, robots: bool = False) -> None:
        """A fetch ended: uncounted; both clocks restart from now (the site's by its delay,
        the IP's by `waitDuration`; neither ever moves back); then `release`."""
        ip = site.ip
        assert ip is not None
        now = self._now()
        site.in_flight -= 1
        ip.in_flight -= 1
        if site.ready_at < now + site.delay:
            site.ready_at = now + site.delay
        if ip.ready_at < now + self.sites.default_delay:
            ip.ready_at = now + self.sites.default_delay
        self.sites.record(site, now)
        self.release(site, ip, robots=robots)

    def release(self, site: Site, ip: IpSlot, *, robots: bool = False) -> None:
        """The site's turn is over (a fetch ended, or its jobs were all refused without a
        request): wake the IP's waiters and this site, in an order that is fair.

        After robots.txt the site goes first, at its FIFO's head: robots.txt is fetched for
        the site's pages, not as its turn (else on a shared IP that keeps finding new hosts
        their robots.txt would all go before any of their pages, and pages would come in
        waves). After a page the IP's waiters go first and this site behind them: one site
        with many pages does not keep a shared IP to itself."""
        if robots:
            self.consider(site, front=True)
            self.wake_ip(ip)
        else:
            self.wake_ip(ip)
            self.consider(site)
