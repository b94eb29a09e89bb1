"""The crawl: builds the stages, wires them in pipeline order, runs them on one event loop.

Data flows one way: input -> frontier -> sequencer -> site queues -> DNS -> opener (a site's
robots.txt first, then its pages) -> reader -> parser -> outputs, with the parser's links
and the reader's redirects going back to input.
`idle()` is the one explicit "is the crawl done?" check over every stage's counters.

The stages are given their seams at construction, from one `node.Node` chosen here and nowhere
else (`_node_type`): where new URLs go (input's `Admission`), where jobs of sites owned
elsewhere go (the site table's `Forward`), how the opener fetches (`PageFetch`, `RobotsFetch`)
and where robots.txt verdicts go -- `node.Embedded`, or a cluster node's (`cluster/__init__.py`,
with `cluster` in larbin.conf). Every part gets what it needs when it is built, in pipeline
order; the few arrows that point back up the pipeline are bound methods of the crawler
(`changed`, `_resolved`, `_parse_pending`) or the two documented second steps, `Sites.connect`
and `Node.bind`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from larbinpy import __version__
from larbinpy.clock import LoopClock
from larbinpy.config import Config
from larbinpy.daemon.progress import Progress
from larbinpy.daemon.status import Figures, Gauges, RecentFailures
from larbinpy.frontier.crawllog import CrawlLog, DoneRecord
from larbinpy.frontier.diskqueue import DiskFrontier, SiteSpill
from larbinpy.frontier.durable import Stores
from larbinpy.frontier.endings import Endings
from larbinpy.frontier.robotsdb import FileVerdicts
from larbinpy.frontier.seen import BitmapSeenSet, open_seen_set
from larbinpy.frontier.sitedb import SiteRecords
from larbinpy.frontier.sites import Sites
from larbinpy.frontier.siteview import site_detail, top_sites
from larbinpy.frontier.state import StateDir, saved_meta
from larbinpy.links.urls import DEFAULT_STRIP_PARAMS, Normalizer
from larbinpy.net.docmemory import DocumentMemory
from larbinpy.net.fetcher import Fetcher
from larbinpy.net.policy import NetworkPolicy
from larbinpy.node import CrawlHooks, Embedded, Node
from larbinpy.outputs import Outputs
from larbinpy.records import Job, JobKind, Site, SiteState
from larbinpy.runtime import early_sigterm
from larbinpy.stages.bandwidth import BandwidthLimiter
from larbinpy.stages.dns import Dns
from larbinpy.stages.input import Input
from larbinpy.stages.opener import Opener, PageFetch
from larbinpy.stages.parser import Parser
from larbinpy.stages.reader import Reader, Routes
from larbinpy.stages.recrawl import NoRecrawl, Recrawl
from larbinpy.stages.robots import Robots
from larbinpy.stages.sequencer import Sequencer
from larbinpy.stats import Stats, counted
from larbinpy.turn import TurnEnd

if TYPE_CHECKING:
    from larbinpy.cluster import Cluster
    from larbinpy.daemon.ports import Ports

log = logging.getLogger("larbinpy")

# The normalizer refuses URLs over this length outright; between maxUrlLength and this, the
# scope refuses them as "trap", so an over-long link is counted rather than silently dropped.
URL_HARD_LIMIT = 64 * 1024
CONTENT_BITS = 1 << 28  # noDup's digest bitmap (32 MiB)
SEED_BATCH = 1000


class Crawler:
    """One crawl, from larbin.conf to exit."""

    version = __version__

    def __init__(self, cfg: Config, scratch: bool = False, progress: bool = False,
                 on_page_fetch: Callable[[Site, Job], None] | None = None) -> None:
        """Build each part in pipeline order, each given what it needs. `on_page_fetch`: told
        as each page fetch starts (robots.txt excluded), to measure."""
        self.cfg, self.scratch = cfg, scratch
        node_type = _node_type(cfg)  # first: a ConfigError must leave stateDir alone
        self.stats = Stats()
        # the end of every loop turn, its phases in their order (turn.py), and the stores a
        # checkpoint makes durable, in theirs (frontier/durable.py): both filled as parts are
        # built
        self.turn, self.stores = TurnEnd(), Stores()
        self.clock = LoopClock()  # the one clock every part reads time from
        self._open_state(local=node_type.local_state)  # outputs, FIFOs, spill, seen-sets
        strip = frozenset(cfg.strip_params) if cfg.strip_params is not None else None
        self.normalizer = Normalizer(
            strip_params=strip if strip is not None else DEFAULT_STRIP_PARAMS,
            max_length=max(cfg.max_url_length, URL_HARD_LIMIT),
        )
        # the seams, chosen once: the embedded defaults, or a cluster node's (node.py)
        self.node: Node = node_type(cfg, self.seen, self.frontier, self.stats)
        records = self.stores.add("sites", SiteRecords(self.state.sites_path(), self.turn))
        self.sites = Sites(self.stats, cfg.wait_duration, self.spill, self.node.forward,
                           endings=self.endings, records=records,
                           page_limit=cfg.max_pages_per_site, clock=self.clock)
        self.sequencer = Sequencer(self.frontier, self.sites, cfg.per_call,
                                   cfg.max_sites_in_memory)
        # recrawl on: the schedule and the stage that feeds due visits back to the sites
        self.recrawl: Recrawl = self._revisits() if cfg.recrawl else NoRecrawl()
        self.input = Input(cfg, self.normalizer, self.seen, self.frontier, self.stats,
                           self.node.admission, self.sequencer.notify,
                           make_due=self.recrawl.force, discovered=self.recrawl.discovered)
        policy = NetworkPolicy(cfg.allow_networks)  # one for DNS and robots.txt redirects
        self.dns = Dns(cfg, self.stats, self.sites, policy, self._resolved, self.clock)
        # bodies being read or parsed share one budget: a document that does not fit waits
        self.memory = DocumentMemory(cfg.document_memory, self.stats)
        # the HTTP clients take addresses from the DNS stage; each is made at its first use
        self.fetcher = Fetcher(cfg, self.dns, BandwidthLimiter(cfg.max_bandwidth)
                               if cfg.max_bandwidth else None, self.memory)
        # robots.txt verdicts outlive the process: stateDir's file, behind Redis in a cluster
        self.verdicts = self.stores.add("robots", self.node.verdicts(
            FileVerdicts(self.state.robots_path(), self.turn)))
        self.robots = Robots(
            cfg, self.stats, self.sites, policy, fetcher=self.fetcher, memory=self.memory,
            store=self.verdicts,
            record=self.outputs.record_robots if self.outputs.keep_raw else None,  # archives
            on_sitemaps=self.input.add_sitemaps,  # Sitemap: lines, fed to input like links
        )
        self.parser = Parser(cfg, self.stats, self.normalizer, self.input, self.outputs,
                             self.turn, self.changed)
        self.reader = Reader(
            cfg, self.stats, self.fetcher, self.robots, self.sites,
            Routes(self.parser, self.input, self.outputs, self.normalizer, self.contents),
            self.endings, self.recrawl)
        # the node calls back into the stages built on its seams
        self.node.bind(CrawlHooks(sites=self.sites, queued=self.sequencer.notify,
                                  changed=self.changed, idle=self.idle,
                                  parse_pending=self.parser.flush,
                                  adopt=self.recrawl.adopt, surrender=self.recrawl.surrender,
                                  site_learned=self.recrawl.site_learned))
        fetch_page = self.node.page_fetch(self.reader.fetch)
        if on_page_fetch is not None:
            fetch_page = _observed(fetch_page, on_page_fetch)
        self.opener = Opener(cfg, self.sites, self.robots, self.reader, self.changed,
                             fetch_page=fetch_page,
                             fetch_robots=self.node.robots_fetch(self.robots.fetch),
                             stats=self.stats, clock=self.clock)
        # the pipeline's arrows back into the site table (built first: both need it)
        self.sites.connect(on_new_site=self.dns.submit, on_job=self.opener.consider)
        self._subscribe()
        if self.crawl_log is not None:
            self.stores.add("crawl log", self.crawl_log)
        self.stores.add("done", self.done)  # last: see `_subscribe`
        self.progress = Progress(self, enabled=progress)
        self.resumed = 0  # URLs to fetch found in stateDir at start
        self.finished_before = 0  # URLs the done-record says a killed run finished
        self.loading = 0  # seed sources still being read
        self.stop_requested = False
        self._changed = asyncio.Event()

    def _revisits(self) -> Recrawl:
        """recrawl on: the schedule in stateDir and the stage that feeds its due visits back
        (the reader and the crawl log report every page's outcome to it)."""
        from larbinpy.frontier.recrawldb import SiteStates
        from larbinpy.frontier.schedule import GRANULARITY, Schedule
        from larbinpy.stages.revisits import Revisits

        # a page is popped at most a granularity late: a small share of recrawlMin
        schedule = self.stores.add("schedule", Schedule(
            self.state.schedule_dir, _schedule_position(self.saved.schedule),
            granularity=min(GRANULARITY, max(0.01, self.cfg.recrawl_min / 16))))
        states = self.stores.add("recrawl sites", SiteStates(
            self.state.schedule_dir / "sites.sqlite", self.turn))
        return Revisits(self.cfg, schedule, states, self.sites, self.clock, self.turn,
                        self.changed, self.node.hand_over)

    def _subscribe(self) -> None:
        """Who is told every job's final outcome, in this order (the order is important): the
        recrawl sets the page's due time, which the crawl log's line then says; the
        done-record last, so a job is done once everything else knows it."""
        self.endings.subscribe(self.recrawl.ended)
        self.endings.subscribe(self.failures.ended)
        self.endings.subscribe(self.sites.tally)  # the per-site view's tallies
        if self.crawl_log is not None:
            self.endings.subscribe(self.crawl_log.ended)
        self.endings.subscribe(self.done.ended)

    def _open_state(self, local: bool) -> None:
        """stateDir and what lives in it: the seen-sets, the FIFOs, the site spill, the crawl
        log. `local` False: a cluster node's, wiped (its queues and seen-set are in Redis)."""
        cfg, scratch = self.cfg, self.scratch
        hash_size = _hash_size(cfg, resume=local and not scratch)
        self.state = StateDir(
            cfg.state_dir,
            {"hashSize": hash_size, "hashFunctions": cfg.hash_functions},
            scratch or not local,
            # a cluster node keeps its recrawl schedule: it owns those pages' sites
            keep=() if scratch else ("schedule",),
        )
        # a cluster's seen-set is in Redis; the local one is only its cache, and exact, as a
        # hit there skips Redis (cluster/redis_seen.py)
        seen = open_seen_set(self.state.bitmap_path("seen"), hash_size,
                             cfg.hash_functions, cfg.seen_set if local else "exact",
                             cfg.seen_cache)
        contents = (
            BitmapSeenSet(self.state.bitmap_path("contents"), CONTENT_BITS) if cfg.no_dup else None
        )
        self.saved = self.state.load()
        if scratch and local:
            set_aside_outputs(cfg)  # before the outputs and the crawl log open their files
        # the order is important: the outputs first (a page's files before the URLs that say
        # it is done), the queues before the seen-sets (a URL is never durably seen before it
        # is durably queued); the done-record is registered last, in __init__
        stores = self.stores
        self.outputs = stores.add("outputs", Outputs(cfg, self.stats))
        self.frontier = stores.add("frontier",
                                   DiskFrontier(self.state.frontier_dir, self.saved.frontier))
        self.spill = stores.add("spill", SiteSpill(self.state.spill_dir, self.saved.spill))
        self.seen = stores.add("seen", seen)
        self.contents = stores.add("contents", contents) if contents is not None else None
        self.failures = RecentFailures()  # the status page's last failures
        log_path = crawl_log_path(cfg)
        self.crawl_log = CrawlLog(log_path, self.turn) if log_path is not None else None
        self.done = DoneRecord(self.state.done_path(), local and not scratch, self.turn)
        # every job's final outcome, to its subscribers (`_subscribe`)
        self.endings = Endings(self.done.take_skip, self.turn)

    # --- "is the crawl done?" ---

    def idle(self) -> bool:
        """True exactly when nothing is queued, parked or in flight in any stage."""
        return (
            self.loading == 0
            and len(self.frontier) == 0
            and self.sites.queued == 0
            and self.dns.waiting_sites == 0
            and self.opener.in_flight == 0
            and self.parser.pending == 0  # pages read this turn, links not extracted yet
            and self.outputs.backlog() == 0  # a full disk pauses the crawl; it is not done
            and self.node.idle()  # nothing on its way elsewhere (a cluster's Redis)
            and self.recrawl.pending == 0  # (recrawl) due, not yet fed
        )

    def changed(self) -> None:
        """A stage finished something: re-check whether the crawl is done (and whether the
        sequencer, held back by maxSitesInMemory, may go on)."""
        self._changed.set()
        self.sequencer.room()

    def _resolved(self, site: Site) -> None:
        """DNS answered for a site: a stored robots.txt verdict applies, then on to the
        opener."""
        if site.state is SiteState.ROBOTS:
            self.robots.recall(site)
        self.opener.consider(site)
        self.changed()

    # --- what the daemon's faces show (daemon.status.StatusSource) ---

    def gauges(self) -> Gauges:
        """The figures that cost nothing to read (the progress line, every second)."""
        return Gauges(
            stats=self.stats, queued_per_priority=self.frontier.sizes(),
            queued_in_sites=self.sites.queued, sites_known=len(self.sites.by_key),
            in_flight=self.opener.in_flight, idle=self.idle(), stopping=self.stop_requested,
        )

    def figures(self) -> Figures:
        """Every figure of the status page, status.json and /metrics (walks the sites)."""
        census = self.sites.census()
        return Figures(
            gauges=self.gauges(), site_states=census.states, sites_parked=census.parked,
            outputs=self.outputs.status(),
            cluster=self.node.status(),
            version=self.version, tls_verify=self.cfg.tls_verify, proxy=self.cfg.proxy,
            waiting_for=census.waiting_for(),
            seen_set={
                "kind": self.cfg.seen_set, "bitmap_fill": round(self.seen.fill(), 6),
                "expected_loss": self.seen.expected_loss()} if self.node.local_state else None,
            failures=self.failures.lines(),
            recrawl=self.recrawl.figures(),
        )

    def sites_view(self) -> dict[str, Any]:
        """The busiest and the most failing sites (`/sites`: the table's two boards, and one
        walk of it for the sites backing off)."""
        return top_sites(self.sites)

    def site_view(self, host: str) -> list[dict[str, Any]]:
        """The sites of one host[:port], with their last outcomes and, with recrawl, the pages
        whose revisits find the most new URLs (`/sites/HOST`)."""
        return [{**found, "discovers_most": self.recrawl.discoverers(found["site"])}
                for found in site_detail(self.sites, host)]

    # --- run ---

    async def run(self) -> int:
        """Crawl until done (exitAtEnd) or stopped by a signal; return the exit code."""
        self._resume()
        tasks = [*self.dns.start(), *self.opener.start(),
                 asyncio.ensure_future(self.sequencer.run()),
                 asyncio.ensure_future(self._tick()),
                 asyncio.ensure_future(self._checkpoints())]
        tasks.append(asyncio.ensure_future(self.recrawl.run()))
        self._install_signals()
        ports = self._ports()
        try:
            await self.node.start()
            if ports is not None:
                await ports.start()
            self._log_start()
            await self._load_seeds()
            await self._wait_until_done()
            await self._stop(tasks)
        finally:
            if ports is not None:
                await ports.stop()
            await self.fetcher.close()
            await self.node.close()  # no-op after a clean stop; else (a cluster's) a kill -9
            await self.dns.close()
            self._close()
        self.progress.summary()
        return 0

    def _ports(self) -> Ports | None:
        """The HTTP ports; None when both are off (then aiohttp.web is never imported)."""
        if not (self.cfg.http_port or self.cfg.input_port):
            return None
        from larbinpy.daemon.ports import Ports

        return Ports(self.cfg, self, self.input.submit, self.changed, self.normalizer.normalize)

    def _log_start(self) -> None:
        """What an operator needs first in the log: the file, the state, the ports, outputs."""
        cfg = self.cfg
        log.info("config %s", Path(cfg.path).resolve())
        if self.saved.fresh and not self.resumed and not self.finished_before:
            log.info("stateDir %s: new crawl", Path(cfg.state_dir).resolve())
        else:  # a checkpoint, or (killed before the first one) FIFOs and a done-record
            skipped = (f" ({counted(self.finished_before, 'URL')} finished after the last "
                       "checkpoint not fetched again)" if self.finished_before else "")
            log.info("stateDir %s: resumed, about %s to fetch%s",
                     Path(cfg.state_dir).resolve(), counted(self.resumed, "URL"), skipped)
        host = f"[{cfg.http_host}]" if ":" in cfg.http_host else cfg.http_host
        for port, what, path in ((cfg.http_port, "status page (httpPort)", "/"),
                                 (cfg.input_port, "input port (inputPort)", "/urls")):
            if port:
                log.info("%s on http://%s:%d%s", what, host, port, path)
            else:
                log.info("%s off", what)
        outputs = cfg.effective_outputs()
        log.info("outputs: %s", f"{', '.join(outputs)} in {Path(cfg.save_dir).resolve()}"
                 if outputs else "none")
        if self._nothing_can_come():
            log.warning("nothing to crawl: no startUrl, no seedFile, no URL in stateDir %s and "
                        "inputPort 0: no URL can ever reach this crawl", cfg.state_dir)

    def _nothing_can_come(self) -> bool:
        """Can no URL ever reach this crawl? (No seed, nothing resumed, no input port, and
        not a cluster node, which other nodes give work.)"""
        cfg = self.cfg
        return (not cfg.start_urls and not cfg.seed_file and not cfg.input_port
                and cfg.cluster is None and self.saved.fresh and not self.resumed
                and not self.finished_before and len(self.frontier) == 0
                and self.sites.queued == 0)

    def _resume(self) -> None:
        """Put back what the last checkpoint held in memory, and restart spilled sites."""
        self.node.recover()
        finished = self.finished_before = len(self.done.skip)
        jobs = [j for j in self.saved.jobs if not self.done.take_skip(j.url)]
        # revisits in flight at the checkpoint come back from the schedule (its position is
        # the oldest popped and not put again), not from here
        jobs = [j for j in jobs if j.kind is not JobKind.REVISIT]
        # the FIFOs still hold the finished URLs the checkpoint's jobs did not (skipped later)
        in_fifos = finished - (len(self.saved.jobs) - len(jobs))
        waiting = len(self.frontier) + len(self.spill) + len(jobs) - in_fifos
        self.resumed = max(waiting, 0)  # for the start-up log line
        self.stats.urls_seen = max(self.stats.urls_seen, self.saved.urls_seen)
        self.input.restore(jobs)
        for key in list(self.spill.sites()):
            self.sites.adopt(key)
        if jobs:
            # the restored jobs are on the FIFOs again: a new checkpoint keeps a second crash
            # from restoring them a second time
            self.checkpoint()
        self.saved.jobs = []

    async def _load_seeds(self) -> None:
        """startUrl lines, then seedFile, through the input stage."""
        self.loading += 1
        try:
            for depth, group in itertools.groupby(self.cfg.start_urls, key=lambda s: s.depth):
                self._submit_seeds([s.url for s in group], depth)
            if self.cfg.seed_file:
                await self._load_seed_file(self.cfg.seed_file)
        finally:
            self.loading -= 1
            self.changed()

    async def _load_seed_file(self, path: str) -> None:
        """seedFile, streamed: SEED_BATCH lines at a time, a loop turn between batches (memory
        holds one batch, and the crawl runs while a file of millions of lines is read); a
        refused line is logged with its number."""
        lines = accepted = 0
        for batch in _batches(_read_lines(path), SEED_BATCH):
            accepted += self._submit_seeds([url for _, url in batch], self.cfg.depth_in_site,
                                           where=(path, {url: n for n, url in reversed(batch)}))
            lines = batch[-1][0]
            await asyncio.sleep(0)  # a huge seed file must not stall the crawl
        log.info("seedFile %s read (%d lines): %s", path, lines, counted(accepted, "new URL"))

    def _submit_seeds(self, urls: list[str], depth: int,
                      where: tuple[str, dict[str, int]] | None = None) -> int:
        """Submit seeds; a refused seed is logged (a duplicate is normal on resume), with its
        file and line number when `where` gives them (file, URL -> line); how many were new."""
        result = self.input.submit(urls, depth=depth)
        for url, reason in result.rejected:
            level = logging.DEBUG if reason.startswith("duplicate") else logging.WARNING
            if where is None:
                log.log(level, "seed %s refused: %s", url, reason)
            else:
                log.log(level, "seedFile %s line %d: %s refused: %s", where[0],
                        where[1].get(url, 0), url, reason)
        return result.accepted

    async def _wait_until_done(self) -> None:
        """Wake on every change; stop when asked, or when idle with exitAtEnd."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self.stop_requested or (self.cfg.exit_at_end and self._done()):
                return

    def _done(self) -> bool:
        """exitAtEnd: this crawl is done; in a cluster, the whole cluster is."""
        return self.node.done

    async def _stop(self, tasks: list[asyncio.Task[None]]) -> None:
        """No new fetches; let running ones finish (bounded), then cancel and checkpoint."""
        self.opener.stopping = True
        deadline = time.monotonic() + self.cfg.timeout_total
        # fetches held back by a paused output (disk full) are not waited for: the checkpoint
        # saves their jobs
        while (self.opener.in_flight and time.monotonic() < deadline and not self._forced
               and self.outputs.paused_reason is None):
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 0.5)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # the last turn's pages: their links reach admission before the cluster leaves, and
        # the pages the hook before the outputs drain
        self.turn.run()
        await self.node.stop()  # a cluster's: flush to Redis, leave (handing over if not done)
        await self.outputs.drain()
        try:
            self.checkpoint()
        except OSError as exc:  # the last durable checkpoint stays valid: resume from it
            log.error("final checkpoint failed (%s); a restart resumes from the previous one",
                      exc)

    def in_memory(self) -> Iterator[Job]:
        """Jobs that only memory holds: site windows, fetches in flight, fetched pages that
        an output has not stored yet (a crash fetches them again)."""
        yield from self.sites.jobs()
        yield from self.opener.active.values()
        yield from self.outputs.pending_jobs()

    def checkpoint(self) -> None:
        """Make outputs and queues durable, save cursors and in-memory jobs, then release."""
        self._commit(*self._snapshot())

    async def checkpoint_async(self) -> None:
        """`checkpoint()`, with the outputs' per-file fsyncs in a worker thread: the crawl goes
        on meanwhile, and the checkpoint is written once they are done."""
        self.turn.run()
        taken = self.outputs.take_unsynced()  # the pages' files written up to this moment
        try:
            snapshot = self._snapshot()
            for part in taken:
                await asyncio.to_thread(part.sync)
        except BaseException:  # OSError, or cancelled by a stop: the next flush redoes them
            self.outputs.give_back(taken)
            raise
        self._commit(*snapshot)

    def _snapshot(self) -> tuple[dict[str, Any], list[Job]]:
        """Every store flushed and synced (the outputs but those taken), then their positions
        and the jobs only memory holds, as of this moment."""
        # the turn's end first: pages read but not parsed go on (their links to the FIFOs,
        # the pages to the outputs), the turn's final lines and due times are written
        self.turn.run()
        return self.stores.snapshot(), list(self.in_memory())

    def _commit(self, positions: dict[str, Any], jobs: list[Job]) -> None:
        """Write the checkpoint, then each store releases what lies before its position (the
        done-record the URLs the checkpoint covers)."""
        self.state.write_checkpoint(positions["frontier"], positions["spill"], jobs,
                                    self.stats.urls_seen, positions.get("schedule"))
        self.stores.release(positions)

    async def _tick(self) -> None:
        """Once a second: throughput sample and progress line."""
        while True:
            await asyncio.sleep(1.0)
            now = asyncio.get_running_loop().time()
            self.stats.sample()
            self.progress.update()
            self.sites.evict(now)
            self.dns.purge(now)
            self.changed()  # belt and braces: the done check is exact, this only re-runs it

    async def _checkpoints(self) -> None:
        """Every checkpointInterval seconds: save state (bounds re-fetches after a crash)."""
        failing = 0  # checkpoints failed in a row (logged at the first, and on recovery)
        while True:
            await asyncio.sleep(self.cfg.checkpoint_interval)
            try:
                await self.checkpoint_async()
            except OSError as exc:  # disk full, no fd: keep crawling, the next one may succeed
                self.stats.resource_waits += 1
                failing += 1
                if failing == 1:
                    log.error("checkpoint failed (%s); the previous one stays valid; retrying "
                              "every %s s", exc, self.cfg.checkpoint_interval)
                continue
            if failing:
                log.warning("checkpoint written again after %d failed attempts", failing)
                failing = 0

    # --- signals and shutdown ---

    _forced = False

    def _install_signals(self) -> None:
        """SIGTERM/SIGINT: clean stop; a second one: stop waiting for running fetches."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, self.reopen_logs)
        if early_sigterm():  # it came while the crawler was starting: stop as asked
            loop.call_soon(self.request_stop)

    def reopen_logs(self) -> None:
        """SIGHUP: reopen the log file and the crawl log (logrotate moved them)."""
        reopen_logs()
        if self.crawl_log is not None:
            self.crawl_log.reopen()

    def request_stop(self) -> None:
        """Stop cleanly (second call: do not wait for fetches in flight)."""
        running = self.opener.in_flight
        if self.stop_requested:
            self._forced = True
            if running:  # (a SIGTERM during start-up may come twice: see early_sigterm)
                log.info("stopping now: not waiting for the %s in flight",
                         counted(running, "fetch", "fetches"))
        else:
            log.info("stopping: no new fetches; waiting for the %d in flight (at most "
                     "timeoutTotal, %g s; a second signal stops waiting), then checkpointing",
                     running, self.cfg.timeout_total)
        self.stop_requested = True
        self.changed()

    def _close(self) -> None:
        """The last turn's end, then every store closed, then stateDir's lock released."""
        self.turn.run()
        try:
            self.stores.close()
        finally:
            self.state.close()


def _node_type(cfg: Config) -> type[Embedded] | type[Cluster]:
    """Where the crawl's seams come from, the one place it is chosen: `Embedded`, or with
    `cluster` set the Cluster class (a ConfigError when the redis client is missing: it is an
    optional extra)."""
    if cfg.cluster is None:
        return Embedded
    try:
        from larbinpy.cluster import Cluster
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "redis":
            raise
        raise cfg.error("cluster", "cluster needs the redis client: "
                        "pip install 'larbinpy[cluster]'") from None
    return Cluster


def _hash_size(cfg: Config, resume: bool) -> int:
    """The seen-set's hashSize: larbin.conf's, except that a stateDir made with another
    default (2^30 before the exact seen-set's 2^27) resumes with the size it was made with,
    unless larbin.conf sets one (then StateDir checks that they agree). larbin.conf's Config
    stays as parsed."""
    saved = saved_meta(cfg.state_dir).get("hashSize") if resume else None
    if "hashsize" not in cfg.lines and isinstance(saved, int) and saved != cfg.hash_size:
        log.info("stateDir %s was made with hashSize %d: kept (larbin.conf sets none)",
                 cfg.state_dir, saved)
        return saved
    return cfg.hash_size


def _schedule_position(saved: object) -> tuple[int, int, int] | None:
    """The schedule's position as the checkpoint's JSON gives it back (a list of three
    integers); None when there is none (a new schedule, or one read from its start)."""
    if isinstance(saved, list) and len(saved) == 3 and all(isinstance(x, int) for x in saved):
        return saved[0], saved[1], saved[2]
    return None


def set_aside_outputs(cfg: Config) -> Path | None:
    """--scratch starts a new crawl: an earlier crawl's files in saveDir are moved aside, to
    saveDir.YYYYmmdd-HHMMSS (nothing is deleted), so the new crawl's outputs do not mix with
    them. Returns where they went; None if saveDir was empty or could not be moved (said)."""
    save, state = Path(cfg.save_dir).resolve(), Path(cfg.state_dir).resolve()
    if not save.is_dir() or not any(save.iterdir()):
        return None
    if state == save or save in state.parents:
        log.warning("--scratch: saveDir %s holds stateDir: its earlier outputs stay", save)
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = save.with_name(f"{save.name}.{stamp}")
    n = 1
    while aside.exists():
        aside, n = save.with_name(f"{save.name}.{stamp}-{n}"), n + 1
    try:
        save.rename(aside)
    except OSError as exc:  # a mount point, a busy directory...
        log.warning("--scratch: cannot move saveDir %s aside (%s): new outputs are added to "
                    "it", save, exc)
        return None
    log.info("--scratch: the earlier crawl's outputs in %s were moved to %s", save, aside)
    return aside


def crawl_log_path(cfg: Config) -> Path | None:
    """Where the crawl log goes: `crawlLog` (a relative path inside saveDir), None for none."""
    if cfg.crawl_log is None:
        return None
    return Path(cfg.save_dir) / cfg.crawl_log  # an absolute crawlLog stays as it is


def _observed(fetch: PageFetch, observe: Callable[[Site, Job], None]) -> PageFetch:
    """`fetch`, telling `observe` as each call starts."""
    async def observed_fetch(site: Site, job: Job) -> None:
        observe(site, job)
        await fetch(site, job)
    return observed_fetch


def reopen_logs() -> None:
    """SIGHUP: reopen log files (logrotate moved them)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.acquire()
            try:
                handler.close()  # the next record reopens the file by name
            finally:
                handler.release()
    log.info("log files reopened")


def _read_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, URL) of each non-empty, non-comment line of a seed file."""
    with open(Path(path), encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if line and not line.startswith("#"):
                yield number, line


def _batches(items: Iterator[tuple[int, str]], size: int) -> Iterator[list[tuple[int, str]]]:
    """Consecutive lists of `size` items."""
    while batch := list(itertools.islice(items, size)):
        yield batch
