"""Stage 1, larbin's input: every URL that wants in — seeds, submissions, links, redirects.

Each URL is normalized, scoped, then tested against the seen-set; only new URLs become jobs
on the priority FIFOs. Links of a page come in as one batch, so de-duplication, scope and
the seen-set cost one pass per page, not one trip through a queue per link. Submitted URLs may
carry a tag (larbin's URL_TAGS), which a redirect passes on to its target. Sitemaps (listed
in robots.txt, or by a sitemap index) and the URLs they list come in here too, like links.

Where the new jobs go is the `Admission` seam the stage is given: `LocalAdmission` (the local
FIFO and seen-set) in the embedded crawl, `cluster.redis_seen.Admission` in a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from larbinpy.config import Config
from larbinpy.frontier.interface import Frontier
from larbinpy.frontier.seen import SeenSet
from larbinpy.links.scope import Scope
from larbinpy.links.urls import Normalizer, site_key
from larbinpy.records import Job, JobKind
from larbinpy.stats import Outcome, Stats

# A page's requisites may be stylesheets, whose url()s and @imports are requisites in turn:
# levels of that nesting followed (a chain of distinct generated sheets ends here; a loop of
# @imports ends at the seen-set).
REQUISITE_NESTING = 4

# Reasons given to whoever submitted a URL (input port, seeds), by outcome kind.
REASONS = {
    "invalid": "invalid URL (not http or https, or malformed)",
    Outcome.trap: "too long or a spider trap",
    Outcome.outOfScope: "out of scope",
    Outcome.urlDup: "duplicate (already seen)",
}


@dataclass
class Submission:
    """What the input stage made of a batch of submitted URLs."""

    accepted: int
    rejected: list[tuple[str, str]]  # (url as given, reason)


class Admission(Protocol):
    """Where the input stage's new jobs go: normalized, in scope, missing from the local
    seen-set.

    Contract: `admit` takes the jobs over (the caller keeps no reference). Each job is queued
    durably before its URL is marked seen (after a crash a URL may be queued twice, never
    marked seen and queued nowhere); a URL that turns out to be seen after all is counted
    urlDup, each new one in `Stats.urls_seen`, and the sequencer is woken once jobs reach the
    local FIFO. `force`: the caller skipped the seen test on purpose (a forced submission), so
    the jobs are admitted even if marked seen. It may admit later (a cluster batches round
    trips), but must then report the jobs as work in progress to "is the crawl done?".
    """

    def admit(self, jobs: list[Job], force: bool = False) -> None: ...


class LocalAdmission:
    """The embedded crawl's `Admission`: the local FIFO, then the local seen-set."""

    def __init__(self, frontier: Frontier, seen: SeenSet, stats: Stats,
                 on_queued: Callable[[], None]) -> None:
        self.frontier, self.seen, self.stats = frontier, seen, stats
        self.on_queued = on_queued  # wakes the sequencer

    def admit(self, jobs: list[Job], force: bool = False) -> None:
        """Enqueue durably, then mark seen, in that order (see why below)."""
        # On the FIFO files before marking seen: after a crash a URL may be queued and not in
        # the bitmap (a restart marks it: `recover`), never in the bitmap and nowhere else
        # (lost).
        # `force` needs nothing here: the only seen test was the caller's.
        self.frontier.push(jobs)
        self.frontier.flush()
        self.seen.add(j.url for j in jobs)
        self.stats.urls_seen += len(jobs)
        self.on_queued()

    def recover(self) -> None:
        """At a restart: a kill between `admit`'s push and its marking left URLs queued and
        unseen, and the page they came from, fetched again, would queue them a second time.
        They end a FIFO: mark seen its newest URLs back to the first one already seen."""
        for windows in self.frontier.newest_urls():
            for urls in windows:
                fresh = self.seen.missing(urls)
                if fresh:
                    self.seen.add(fresh)
                if len(fresh) < len(urls):
                    break


class Input:
    """Normalize, scope and de-duplicate URLs, then queue the new ones as jobs."""

    def __init__(
        self,
        cfg: Config,
        normalizer: Normalizer,
        seen: SeenSet,
        frontier: Frontier,
        stats: Stats,
        admission: Admission,
        on_queued: Callable[[], None],
        make_due: Callable[[str], bool] | None = None,
        discovered: Callable[[Job, list[Job]], None] = lambda page, jobs: None,
    ) -> None:
        self.cfg = cfg
        self.normalizer = normalizer
        self.scope = Scope(cfg)
        self.seen = seen
        self.frontier = frontier  # jobs restored from a checkpoint go straight back on it
        self.stats = stats
        self.admission = admission  # where new jobs go (the local FIFO, or a cluster's Redis)
        self.on_queued = on_queued  # wakes the sequencer after a restore
        # recrawl: a forced submission of a page the schedule knows makes it due now (True)
        # rather than queueing it a second time
        self.make_due = make_due
        # recrawl: the new URLs a revisited page's links gave (the discovery delay's start)
        self.discovered = discovered

    def submit(
        self, urls: Iterable[str | tuple[str, int]], priority: int = 0, depth: int | None = None,
        force: bool = False,
    ) -> Submission:
        """Seeds and submissions (a URL or a (URL, tag) pair): queue the new ones, say why each
        other one was refused."""
        depth = self.cfg.depth_in_site if depth is None else depth
        candidates: dict[str, tuple[str, int]] = {}  # normalized -> (as given, tag)
        rejected: list[tuple[str, str]] = []
        for item in urls:
            raw, tag = (item, 0) if isinstance(item, str) else item
            url = self.normalizer.normalize(raw.strip())
            if url is None:
                rejected.append((raw, REASONS["invalid"]))
            elif reason := self.scope.check(url):
                rejected.append((raw, REASONS[reason]))
            elif url not in candidates:
                candidates[url] = (raw, tag)
        fresh = list(candidates) if force else self.seen.missing(list(candidates))
        fresh_set = set(fresh)
        dup = REASONS[Outcome.urlDup]
        rejected += [(raw, dup) for u, (raw, _) in candidates.items() if u not in fresh_set]
        accepted = len(fresh)
        if force and self.make_due is not None:  # recrawl: a known page is due now instead
            fresh = [u for u in fresh if not self.make_due(u)]
        self._queue([Job(u, depth, priority, 0, candidates[u][1]) for u in fresh], force)
        return Submission(accepted, rejected)

    def add_links(self, parent: Job, page_url: str, links: list[str]) -> None:
        """A page's links (absolute, normalized, de-duplicated): queue the new in-scope ones."""
        if not links:
            return
        # The seen-set first: most links of a page were seen before (navigation repeats on
        # every page), and a hash lookup is cheaper than the scope rules.
        fresh = self.seen.missing(links)
        cfg, stats, check = self.cfg, self.stats, self.scope.check
        stats.count(Outcome.urlDup, len(links) - len(fresh))
        here = site_key(page_url)
        same_depth = parent.depth - 1
        other_depth = cfg.depth_in_site if cfg.depth_by_site else same_depth
        jobs: list[Job] = []
        for url in fresh:
            external = site_key(url) != here
            if external and cfg.no_external_links:
                stats.count(Outcome.outOfScope)
                continue
            depth = other_depth if external else same_depth
            if depth < 0:
                stats.count(Outcome.tooDeep)
                continue
            reason = check(url)
            if reason:
                stats.count(reason)
                continue
            jobs.append(Job(url, depth, parent.priority, via=page_url))
        self._queue(jobs)
        parent.found = len(jobs)  # what this fetch of the page discovered
        if jobs and parent.kind is JobKind.REVISIT:
            self.discovered(parent, jobs)

    def add_requisites(self, parent: Job, base: str, urls: list[str]) -> None:
        """What a page (or a stylesheet) at `base` needs to render (absolute, normalized,
        de-duplicated): the new ones queued as requisites, one nesting level below a
        stylesheet's. The scope rules are not applied (a page's images and stylesheets are
        often on another host); robots.txt and allowNetworks are, where every URL meets them."""
        if not urls:
            return
        nesting = (parent.depth - 1 if parent.kind is JobKind.REQUISITE
                   else REQUISITE_NESTING)
        if nesting < 0:
            self.stats.count(Outcome.tooDeep, len(urls))
            return
        fresh = self.seen.missing(urls)
        self._queue([Job(url, nesting, parent.priority, kind=JobKind.REQUISITE, via=base)
                     for url in fresh])
        if parent.kind is not JobKind.REVISIT:
            self.stats.count(Outcome.urlDup, len(urls) - len(fresh))
            return
        # recrawl: a revisited page that changed (it is parsed only then) has its requisites
        # checked again, the known ones by a conditional GET (`Revisits.prepare`)
        new = set(fresh)
        self._queue([Job(url, nesting, parent.priority, kind=JobKind.REQUISITE, via=base)
                     for url in urls if url not in new], force=True)

    def add_redirect(self, parent: Job, target: str) -> None:
        """A redirect's target: a new job one hop further, scoped and de-duplicated like a link."""
        if parent.hops + 1 > self.cfg.max_redirects:
            self.stats.count(Outcome.tooManyRedirects)
            return
        # (a requisite's target is one too: no scope rules, as for the requisite)
        reason = None if parent.kind is JobKind.REQUISITE else self.scope.check(target)
        if reason:
            self.stats.count(reason)
            return
        if not self.seen.missing([target]):
            self.stats.count(Outcome.urlDup)
            return
        # the tag and the kind (a redirected sitemap is still a sitemap, a requisite a
        # requisite) travel with it; the target of a revisit is a page of its own, never
        # fetched yet
        kind = JobKind.PAGE if parent.kind is JobKind.REVISIT else parent.kind
        self._queue([Job(target, parent.depth, parent.priority, parent.hops + 1,
                         parent.tag, kind, via=parent.url)])

    def add_sitemaps(self, base: str, urls: Iterable[str], nesting: int) -> None:
        """Sitemap files (robots.txt's `Sitemap:` lines, or an index's): sitemap jobs whose
        depth is how many more levels of sitemap index may follow."""
        if nesting < 0:
            self.stats.count(Outcome.tooDeep)
            return
        prio = self.cfg.sitemap_priority
        # recrawl: a sitemap is read again each time robots.txt (or its index) is, seen or not
        self._add_listed(base, urls,
                         lambda u: Job(u, nesting, prio, 0, 0, JobKind.SITEMAP, via=base),
                         again=self.cfg.recrawl)

    def add_sitemap_urls(self, base: str, urls: Iterable[str]) -> int:
        """Page URLs a sitemap lists: entry points with the full `depthInSite`; how many were
        new."""
        depth, prio = self.cfg.depth_in_site, self.cfg.sitemap_priority
        return self._add_listed(base, urls, lambda u: Job(u, depth, prio, via=base))

    def _add_listed(self, base: str, urls: Iterable[str], make: Callable[[str], Job],
                    again: bool = False) -> int:
        """URLs listed by robots.txt or a sitemap at `base`: resolved, scoped, de-duplicated
        (`again`: queued even when seen before); how many were queued."""
        resolved = dict.fromkeys(
            u for u in (self.normalizer.resolve(base, raw.strip()) for raw in urls) if u)
        if not resolved:
            return 0
        fresh = list(resolved) if again else self.seen.missing(list(resolved))
        self.stats.count(Outcome.urlDup, len(resolved) - len(fresh))
        here = site_key(base)
        jobs: list[Job] = []
        for url in fresh:
            reason = self.scope.check(url)
            if reason is None and self.cfg.no_external_links and site_key(url) != here:
                reason = Outcome.outOfScope
            if reason:
                self.stats.count(reason)
                continue
            jobs.append(make(url))
        self._queue(jobs, again)
        return len(jobs)

    def restore(self, jobs: list[Job]) -> None:
        """Jobs saved by a checkpoint: back on the FIFOs, already in the seen-set."""
        self.frontier.push(jobs)
        self.frontier.flush()
        self.on_queued()

    def _queue(self, jobs: list[Job], force: bool = False) -> None:
        """New jobs to the admission seam (queued durably, then marked seen)."""
        if jobs:
            self.admission.admit(jobs, force)
