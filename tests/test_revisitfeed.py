"""The recrawl's feeder alone (`stages/revisitfeed.py`) on a `FakeClock`: due visits popped
from a real schedule, handed to their site one at a time, behind its new URLs, spaced by the
site's revisit clock; in milliseconds of wall time."""

from __future__ import annotations

from pathlib import Path

from larbinpy.clock import FakeClock
from larbinpy.frontier.diskqueue import SiteSpill
from larbinpy.frontier.recrawl import Policy
from larbinpy.frontier.schedule import Schedule, Visit
from larbinpy.frontier.sites import Sites
from larbinpy.records import Job, JobKind, Site
from larbinpy.stages.revisitfeed import RevisitFeed
from larbinpy.stats import Stats

SITE = "http://news.test"


class Feeding:
    """A site table, a schedule and the feeder on one fake clock (a delay of 1 s a site, one
    connection, recrawlShare 0.5: a revisit every 2 s at most)."""

    def __init__(self, tmp_path: Path, share: float = 0.5) -> None:
        self.clock = FakeClock()
        self.sites = Sites(Stats(), 1.0, SiteSpill(tmp_path / "spill"), clock=self.clock)
        self.sites.connect(on_new_site=lambda site: None, on_job=lambda site: None)
        self.schedule = Schedule(tmp_path / "schedule", granularity=0.01)
        self.policy = Policy(1.0, 100.0, per_host=1, share=share)
        self.audits: set[str] = set()
        self.feed = RevisitFeed(self.schedule, self.sites, self.policy, self.clock, self.audits,
                                lambda key, job, visit: False, lambda: None, per_host=1,
                                pop_every=0.1)

    def site(self) -> Site:
        """The site, known to the table (a page fetched once), resolved, its queue empty."""
        self.sites.enqueue(Job(SITE + "/", 1), self.clock.now())
        site = self.sites.by_key[SITE]
        self.sites.resolved(site, "10.0.0.9", robots_first=False)
        site.delay = 1.0
        self.sites.take(site)
        return site

    def due(self, *paths: str) -> None:
        """Pages of the site due now (fetched 10 s ago)."""
        now = self.clock.wall()
        for path in paths:
            self.schedule.put(Visit(SITE + path, due=now, fetched_at=now - 10.0, depth=1))
        self.schedule.flush()

    def queued(self, site: Site) -> list[str]:
        """The URLs in the site's queue, in order."""
        return [job.url for job in site.queue]


def test_a_sites_due_revisits_go_one_at_a_time_spaced_by_its_revisit_clock(
        tmp_path: Path) -> None:
    f = Feeding(tmp_path)
    site = f.site()
    f.due("/a", "/b", "/c")
    f.clock.advance(0.02)  # (the schedule's bucket has ended)
    assert f.feed.pop(f.clock.wall()) == 3
    assert len(f.queued(site)) == 1 and f.feed.pending == 2
    first = f.sites.take(site)
    assert first.kind is JobKind.REVISIT
    f.feed.release(first)  # fetched: its site may take the next one, but not before 2 s
    assert f.queued(site) == [] and f.clock.pending(), "a revisit timer for the spacing"
    f.clock.advance(1.9)
    assert f.queued(site) == []
    f.clock.advance(0.2)  # the timer fires at 2 s: the next one is fed
    assert len(f.queued(site)) == 1 and f.feed.pending == 1


def test_new_urls_of_a_site_go_before_its_due_revisits(tmp_path: Path) -> None:
    f = Feeding(tmp_path, share=1.0)
    site = f.site()
    f.sites.enqueue(Job(SITE + "/new", 1), f.clock.now())  # never fetched: queued first
    f.due("/old")
    f.clock.advance(0.02)
    f.feed.pop(f.clock.wall())
    assert f.queued(site) == [SITE + "/new"] and f.feed.pending == 1
    f.sites.take(site)
    f.feed.after_fetch(site.key)  # its fetch ended: the revisit may go now
    assert f.queued(site) == [SITE + "/old"]


def test_an_audit_goes_before_a_more_urgent_page(tmp_path: Path) -> None:
    f = Feeding(tmp_path, share=1.0)
    site = f.site()
    f.sites.enqueue(Job(SITE + "/new", 1), f.clock.now())  # holds the revisits back
    f.due("/urgent", "/audit")
    f.audits.add(SITE + "/audit")
    f.clock.advance(0.02)
    f.feed.pop(f.clock.wall())
    f.sites.take(site)
    f.feed.after_fetch(site.key)
    assert f.queued(site) == [SITE + "/audit"]


def test_a_full_site_puts_back_its_least_urgent_visit_not_the_one_just_due(
        tmp_path: Path) -> None:
    """A site whose revisits ask more than it serves has a backlog of waiting visits; a page
    due now that is far more urgent (long overdue) takes the place of the least urgent one,
    which goes back to the schedule, instead of waiting behind the backlog."""
    from larbinpy.stages.revisitfeed import PER_SITE_MAX

    f = Feeding(tmp_path)
    site = f.site()
    f.sites.enqueue(Job(SITE + "/new", 1), f.clock.now())  # holds the revisits back
    f.due(*[f"/p{i}" for i in range(PER_SITE_MAX)])  # fetched 10 s ago, due now
    f.clock.advance(0.02)
    f.feed.pop(f.clock.wall())
    assert len(f.feed.waiting[SITE]) == PER_SITE_MAX
    now = f.clock.wall()
    f.schedule.put(Visit(SITE + "/front", due=now - 90.0, fetched_at=now - 100.0, depth=1))
    f.schedule.flush()
    f.clock.advance(0.02)
    f.feed.pop(f.clock.wall())
    waiting = [visit.url for visit, _, _ in f.feed.waiting[SITE]]
    assert SITE + "/front" in waiting and len(waiting) == PER_SITE_MAX
    put_back = [u for u in (SITE + f"/p{i}" for i in range(PER_SITE_MAX)) if u not in waiting]
    assert len(put_back) == 1 and f.schedule.get(put_back[0]).due > f.clock.wall()
    assert site.queue  # (the new URL still first)


def test_a_front_page_popped_in_its_slack_behind_a_backlog_is_back_within_a_look(
        tmp_path: Path) -> None:
    """A page that yields new URLs (a front page), popped in its interval's slack when its
    site already has a full backlog, is the least urgent for now and goes back; but only until
    its urgency reaches the backlog's (a second or so), not until the backlog could drain (two
    minutes here), and with the interval it was given: then it goes before the backlog."""
    from larbinpy.frontier import freshness
    from larbinpy.frontier.recrawl import interval_of, record_stats
    from larbinpy.stages.revisitfeed import PER_SITE_MAX

    f = Feeding(tmp_path)
    f.site()
    f.sites.enqueue(Job(SITE + "/new", 1), f.clock.now())  # holds the revisits back
    f.due(*[f"/p{i}" for i in range(PER_SITE_MAX)])  # fetched 10 s ago, due now
    f.clock.advance(0.02)
    f.feed.pop(f.clock.wall())
    now = f.clock.wall()
    change = freshness.observe(b"", now - 1.0, 0.0, False)
    found = freshness.observe_found(b"", 10, 20.0)  # a new URL every 2 s of its revisits
    front = Visit(SITE + "/", due=now, fetched_at=now - 1.0, depth=1,
                  stats=record_stats(change, found, 1.0))
    f.schedule.put(front)
    f.schedule.flush()
    f.clock.advance(0.02)
    f.feed.pop(f.clock.wall())
    waiting = [visit.url for visit, _, _ in f.feed.waiting[SITE]]
    assert SITE + "/" not in waiting  # least urgent for now: put back
    back = f.schedule.get(SITE + "/")
    assert back is not None and interval_of(back) == 1.0
    assert back.due - f.clock.wall() < 1.0  # not the backlog's 2 minutes
    f.clock.advance(1.0)
    f.feed.pop(f.clock.wall())
    fifo = f.feed.waiting[SITE]
    best = fifo[f.policy.most_urgent(fifo, f.audits, f.clock.wall())][0]
    assert best.url == SITE + "/"
