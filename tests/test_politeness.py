"""The politeness state machine alone (`frontier.politeness.Politeness`) on a `FakeClock`:
a site's delay, an IP's clock and places, its FIFO and one timer, the release orders, parked
sites' timers, and the back-off and DNS clocks, each in a millisecond of wall time.

`Crawl` plays the opener's part: its ready queue is a list, a "worker" takes the oldest entry
(`take`), starts its fetch (`start`) and ends it when the test says (`end`)."""

from __future__ import annotations

import email.utils
from pathlib import Path

import pytest

from larbinpy.clock import FakeClock
from larbinpy.config import parse_config
from larbinpy.frontier.diskqueue import SiteSpill
from larbinpy.frontier.politeness import GO, IP, Politeness
from larbinpy.frontier.sites import Sites
from larbinpy.net.backoff import BackOff
from larbinpy.net.policy import NetworkPolicy
from larbinpy.records import IpSlot, Job, Site
from larbinpy.stages.dns import RETRY_AFTER, Dns
from larbinpy.stats import Stats

ADDR = "10.0.0.1"


class Crawl:
    """A site table and its state machine on a fake clock, the opener played by the test."""

    def __init__(self, tmp_path: Path, wait: float = 1.0, per_host: int = 1) -> None:
        self.clock = FakeClock()
        self.sites = Sites(Stats(), wait, SiteSpill(tmp_path / "spill"), clock=self.clock)
        self.ready: list[tuple[Site, IpSlot]] = []
        self.robots_due: set[str] = set()  # sites whose robots.txt is to fetch first
        self.politeness = Politeness(self.sites, self.clock, per_host,
                                     lambda site, now: site.key in self.robots_due,
                                     self.ready.append)
        self.sites.connect(on_new_site=lambda site: None, on_job=self.politeness.consider)
        self.started: list[tuple[str, float]] = []  # (site, when) of each fetch started

    def site(self, name: str, jobs: int = 3, addr: str = ADDR, delay: float | None = None,
             robots: bool = False) -> Site:
        """A resolved site with `jobs` queued (its own `delay` when given), considered."""
        for i in range(jobs):
            self.sites.enqueue(Job(f"http://{name}/{i}", 1), self.clock.now())
        site = self.sites.by_key[f"http://{name}"]
        self.sites.resolved(site, addr, robots_first=robots)
        if robots:
            self.robots_due.add(site.key)
        if delay is not None:
            self.sites.robots_known(site, None, 1e12, delay)
        self.politeness.consider(site)
        return site

    def names(self) -> list[str]:
        """The sites on the ready queue, in order."""
        return [site.host for site, _ in self.ready]

    def take(self) -> Site:
        """A worker takes the oldest ready site and starts its fetch."""
        site, ip = self.ready.pop(0)
        self.politeness.leave_ready(site, ip)
        assert self.politeness.verdict(site, self.clock.now()) == GO
        if site.key not in self.robots_due:
            self.sites.take(site)
        self.politeness.start_fetch(site)
        self.started.append((site.host, round(self.clock.now() - 1000.0, 6)))
        return site

    def end(self, site: Site) -> None:
        """The site's fetch ends now (robots.txt's when it was due)."""
        robots = site.key in self.robots_due
        self.robots_due.discard(site.key)
        self.politeness.end_fetch(site, robots=robots)


@pytest.fixture
def crawl(tmp_path: Path) -> Crawl:
    """waitDuration 1 s, connectionsPerHost 1."""
    return Crawl(tmp_path)


def test_a_site_waits_its_delay_after_a_fetch_ends_on_its_own_timer(crawl: Crawl) -> None:
    site = crawl.site("a.test", delay=2.0)  # robots.txt's Crawl-delay 2 s > waitDuration 1 s
    crawl.take()
    crawl.clock.advance(0.3)
    crawl.end(site)  # its clock: 0.3 + 2; its IP's: 0.3 + 1
    assert not crawl.ready and crawl.clock.pending() == [1002.3]  # its own timer, one
    crawl.clock.advance(1.999)
    assert not crawl.ready
    crawl.clock.advance(0.001)
    assert crawl.names() == ["a.test"]


def test_two_sites_on_one_ip_alternate_spaced_by_the_ips_clock(crawl: Crawl) -> None:
    a, b = crawl.site("a.test"), crawl.site("b.test")
    assert crawl.names() == ["a.test"] and b.waiting_ip  # one place on the IP: b waits
    for _ in range(4):
        site = crawl.take()
        crawl.clock.advance(0.1)
        crawl.end(site)
        assert not crawl.ready  # waitDuration from the end of the fetch, on the IP
        crawl.clock.advance(1.0)
    assert crawl.started == [("a.test", 0.0), ("b.test", 1.1), ("a.test", 2.2),
                             ("b.test", 3.3)]
    assert a.ip is b.ip and a.ip is not None and a.ip.ready_at == pytest.approx(1004.4)


def test_connections_per_host_bounds_the_fetches_of_a_site_and_of_an_ip(tmp_path: Path) -> None:
    crawl = Crawl(tmp_path, wait=0.0, per_host=2)
    a = crawl.site("a.test", jobs=5)
    assert crawl.names() == ["a.test"]  # once on the ready queue however many jobs
    crawl.take()
    crawl.take()  # its fetch started: it went ready again at once, for the second place
    assert not crawl.ready and a.in_flight == 2
    b = crawl.site("b.test")
    assert not crawl.ready and b.waiting_ip  # the IP's two places are taken
    crawl.end(a)  # after a page the IP's waiters go first
    assert crawl.names() == ["b.test"] and a.waiting_ip


def test_the_ips_fifo_wakes_as_many_as_it_has_places_in_order_from_one_timer(
        tmp_path: Path) -> None:
    crawl = Crawl(tmp_path, wait=1.0, per_host=2)
    a, b, c, d = (crawl.site(f"{n}.test") for n in "abcd")
    assert crawl.names() == ["a.test", "b.test"] and c.waiting_ip and d.waiting_ip
    crawl.take(), crawl.take()
    crawl.clock.advance(0.1)
    crawl.end(a)
    crawl.end(b)  # two places free, but the IP's clock is the later one: one timer for it
    assert not crawl.ready and crawl.clock.pending() == [1001.1]
    assert a.ip is not None and [s.host for s in a.ip.waiting] == [
        "c.test", "d.test", "a.test", "b.test"]
    crawl.clock.advance(1.0)
    assert crawl.names() == ["c.test", "d.test"]  # two places: the two oldest waiters
    assert [s.host for s in a.ip.waiting] == ["a.test", "b.test"]
    assert a.ip.timer is None and crawl.clock.pending() == []  # nothing polls


def test_after_robots_txt_the_site_goes_first_after_a_page_the_ips_waiters(
        tmp_path: Path) -> None:
    crawl = Crawl(tmp_path, wait=0.0)
    s = crawl.site("s.test", robots=True)
    w = crawl.site("w.test")
    assert crawl.names() == ["s.test"] and w.waiting_ip
    crawl.take()  # its robots.txt
    crawl.end(s)
    assert crawl.names() == ["s.test"] and w.waiting_ip  # its first page before w's turn
    crawl.take()  # its page
    crawl.end(s)
    assert crawl.names() == ["w.test"] and s.waiting_ip  # now w, s behind it


def test_a_parked_site_has_one_timer_the_earlier_one_kept(crawl: Crawl) -> None:
    site = crawl.site("a.test", delay=5.0)
    crawl.take()
    crawl.end(site)
    assert crawl.clock.pending() == [1005.0]
    crawl.politeness.consider(site)  # considered again: no second timer
    crawl.sites.hold_back(site, 1010.0)  # its clock moved later (robots.txt's retry, a 429)
    crawl.politeness.consider(site)
    assert crawl.clock.pending() == [1005.0]  # the earlier timer kept...
    crawl.clock.advance(5.0)
    assert not crawl.ready and crawl.clock.pending() == [1010.0]  # ...which parks it again
    crawl.clock.advance(5.0)
    assert crawl.names() == ["a.test"]


def test_a_site_waiting_for_its_ip_has_no_timer_of_its_own(crawl: Crawl) -> None:
    a = crawl.site("a.test", delay=5.0)
    crawl.take()
    crawl.end(a)  # parked on its own clock at 5 s
    crawl.sites.hold_back_ip(a, 1010.0)  # its IP's clock the later one now (another node)
    crawl.clock.advance(5.0)  # its timer fires: it waits for its IP, its timer gone
    assert a.waiting_ip and a.timer is None and crawl.clock.pending() == [1010.0]
    assert crawl.politeness.verdict(a, crawl.clock.now()) == IP


def back_off(crawl: Crawl) -> tuple[Site, BackOff]:
    """A site fetching its first job, and the reader's back-off (maxRetries 5, cap 60 s)."""
    site = crawl.site("a.test", jobs=1)
    return site, BackOff(5, 60.0, crawl.sites, crawl.clock)


def test_a_429_with_retry_after_pushes_the_sites_clock_and_its_job_waits(crawl: Crawl) -> None:
    site, backoff = back_off(crawl)
    crawl.take()
    assert backoff.retry(site, Job("http://a.test/0", 1), "7")  # back on its queue
    crawl.end(site)
    assert site.ready_at == 1007.0 and crawl.clock.pending() == [1007.0]
    crawl.clock.advance(6.999)
    assert not crawl.ready
    crawl.clock.advance(0.001)
    assert crawl.names() == ["a.test"]


def test_a_retry_after_date_is_read_on_the_wall_clock_and_capped(crawl: Crawl) -> None:
    site, backoff = back_off(crawl)
    soon = email.utils.formatdate(crawl.clock.wall() + 30, usegmt=True)
    backoff.retry(site, Job("http://a.test/0", 1), soon)
    assert abs(site.ready_at - 1030.0) <= 1.0  # (an HTTP date has whole seconds)
    later = email.utils.formatdate(crawl.clock.wall() + 3600, usegmt=True)
    backoff.retry(site, Job("http://a.test/0", 1), later)
    assert site.ready_at == 1060.0  # maxRetryAfter


def test_without_retry_after_back_off_doubles_is_capped_and_starts_over(crawl: Crawl) -> None:
    site, backoff = back_off(crawl)  # delay 1 s (waitDuration)
    job = Job("http://a.test/0", 1)
    pauses = []
    for _ in range(8):
        before = crawl.clock.now()
        backoff.retry(site, job, None)
        pauses.append(site.ready_at - before)
        crawl.clock.advance(site.ready_at - before)
    assert pauses == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert job.retries == 5  # maxRetries: then it is given up
    backoff.answered(site)  # another answer: the next back-off starts over
    now = crawl.clock.now()
    backoff.retry(site, job, None)
    assert site.ready_at == now + 1.0


async def test_dns_answers_expire_and_unanswered_hosts_are_asked_again_on_the_clock(
        tmp_path: Path) -> None:
    crawl = Crawl(tmp_path)
    cfg = parse_config("allowNetworks 10.0.0.0/8 end\n")
    dns = Dns(cfg, Stats(), crawl.sites, NetworkPolicy(cfg.allow_networks), lambda site: None,
              crawl.clock)
    dns.cache["a.test"] = (crawl.clock.now() + 60.0, [ADDR])
    crawl.clock.advance(59.999)
    assert dns.lookup("a.test").result() == [ADDR]
    crawl.clock.advance(0.001)
    assert not dns.lookup("a.test").done() and dns.queue.get_nowait() == "a.test"
    dns.purge(crawl.clock.now())
    assert "a.test" not in dns.cache
    assert dns._ask_again("b.test")  # no server answered: asked again after a pause
    crawl.clock.advance(RETRY_AFTER[0] - 0.001)
    assert dns.queue.empty()
    crawl.clock.advance(0.001)
    assert dns.queue.get_nowait() == "b.test"


def test_a_site_that_lost_its_turn_in_the_ready_queue_keeps_it_at_the_fifos_head(
        tmp_path: Path) -> None:
    crawl = Crawl(tmp_path, wait=1.0, per_host=2)
    a, b, c = (crawl.site(f"{n}.test") for n in "abc")
    assert crawl.names() == ["a.test", "b.test"] and c.waiting_ip
    crawl.take()
    crawl.end(a)  # the IP's clock restarts while b waits on the ready queue
    site, ip = crawl.ready.pop(0)  # a worker takes b: not its time any more
    crawl.politeness.leave_ready(site, ip)
    assert crawl.politeness.verdict(site, crawl.clock.now()) == IP
    crawl.politeness.lost_turn(site, ip)
    assert [s.host for s in ip.waiting] == ["b.test", "c.test", "a.test"]
    assert crawl.clock.pending() == [1001.0]  # still the IP's one timer
    crawl.clock.advance(1.0)
    assert crawl.names() == ["b.test", "c.test"] and a.waiting_ip and b is site
