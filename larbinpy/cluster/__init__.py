"""Scale-out on Redis: several larbinpy nodes, one crawl (`cluster redis://host:port/db`).

Without `cluster` none of this is imported (nor the `redis` client it needs). With it, the
crawler (`crawler.py`) builds the stages on this node's seams instead of the embedded ones
(`Cluster` is a `node.Node`, as `node.Embedded` is):

* input's `Admission` (`stages/input.py`): `redis_seen.Admission` -- URLs the local cache has
  not seen make one round trip (SADD test-and-set of their 64-bit fingerprints in Redis sets,
  then own new URLs to the local FIFO, others to their owner's stream);
* the site table's `Forward` (`frontier/sites.py`): `Cluster.forward` -- a job popped by the
  sequencer for a site this node does not own (any more) goes to the `streams.Outbox`
  instead of a site queue;
* the opener's `PageFetch` and `RobotsFetch` (`stages/opener.py`): `Cluster.page_fetch` and
  `Cluster.robots_fetch` wrap the reader's and robots' fetch -- a fetched job leaves the
  node's pending hash (`streams.Fetched`), and with `waitDuration` > 0 every fetch, robots.txt
  too, takes its IP's lease (`ipclock.py`);
* the robots stage's `VerdictStore` (`frontier/robotsdb.py`): `robots_shared.SharedVerdicts`
  -- verdicts learned go to Redis with their expiry too, and a site new to this node (handed
  over) looks there before fetching robots.txt;
* "is the crawl done?": `Crawler.idle()` adds `Cluster.idle()` (nothing buffered for Redis),
  and with `exitAtEnd` the crawl ends when `termination.py` says the whole cluster is done.

Building order: the seams exist before the stages (a `Cluster` is made from the seen-set, the
FIFO and the counters), and the cluster calls back into stages built on them (the site table,
the sequencer, the parser, the crawl's idle check): those come once, through `bind`
(`node.CrawlHooks`).

Background tasks on the crawler's loop: the heartbeat (`membership.py`: live set, reaping,
recovery of lost nodes, figures for the status page), the inbound stream reader, the outbox,
the admission batcher, the pending-hash upkeep, the termination poll.

Local state: a cluster node always starts with empty local queues (the local `stateDir` is
wiped as with `--scratch`): what it must fetch is in Redis -- its own pending hash from a
previous run under the same `nodeId` goes back through its stream at start-up, and the URLs
of nodes that are gone are recovered by the live ones.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import socket
import zlib
from typing import Any, ClassVar

from redis.exceptions import RedisError

from larbinpy.cluster import membership as _membership
from larbinpy.cluster.ipclock import IpClock
from larbinpy.cluster.link import Link
from larbinpy.cluster.membership import Membership
from larbinpy.cluster.redis_seen import CAP, Admission, SeenCache
from larbinpy.cluster.robots_shared import SharedVerdicts
from larbinpy.cluster.streams import Fetched, Inbox, Outbox
from larbinpy.cluster.termination import Termination
from larbinpy.config import Config, ConfigError
from larbinpy.frontier.interface import Frontier
from larbinpy.frontier.robotsdb import VerdictStore
from larbinpy.frontier.schedule import Visit, decode_visits, encode_visits
from larbinpy.links.urls import site_key
from larbinpy.node import CrawlHooks
from larbinpy.records import Job, Site
from larbinpy.stages.opener import PageFetch, RobotsFetch
from larbinpy.stats import Outcome, Stats

log = logging.getLogger("larbinpy.cluster")

STOP_TIMEOUT = 10.0  # longest wait for the loops to end, and for the hand-over, at a stop
FIGURES = ("pages", "bytes", "urls_seen", "success", "errors", "queued", "round_trips")


def default_node_id() -> str:
    """host:pid -- unique on a machine, readable on the status page."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Cluster:
    """This node's part of a cluster crawl (a `node.Node`)."""

    # its queues and seen-set are in Redis: the local stateDir is wiped, its seen-set a cache
    local_state: ClassVar[bool] = False
    # built by `bind`: they call back into the crawl
    hooks: CrawlHooks
    fetched: Fetched
    termination: Termination
    ipclock: IpClock | None

    def __init__(self, cfg: Config, seen: SeenCache, frontier: Frontier,
                 stats: Stats) -> None:
        assert cfg.cluster is not None
        self.cfg, self.frontier, self.stats = cfg, frontier, stats
        self.node = cfg.node_id or default_node_id()
        self.link = Link(cfg.cluster, cfg.cluster_name, self.node)
        self.membership = Membership(self.link, self.rebalance)
        self._seq = 0  # numbers every step that gives this node work (termination.py)
        self.admission = Admission(self.link, seen, frontier, stats,
                                   self.membership.owner, self.next_seq, self._queued)
        self.inbox = Inbox(self.link, frontier, self.next_seq, self._queued, self._adopt,
                           seen.add)
        self.outbox = Outbox(self.link, self.beat, self.route)
        self.tasks: list[asyncio.Task[Any]] = []
        self.shared_verdicts: SharedVerdicts | None = None
        self.closed = False
        self._last_beat = 0.0

    def bind(self, hooks: CrawlHooks) -> None:
        """The crawl's side, once its stages exist: before `page_fetch`, `robots_fetch` and
        `start`."""
        self.hooks = hooks
        self.fetched = Fetched(self.link, hooks.parse_pending, self.admission.settled)
        self.termination = Termination(self.link, hooks.idle, self.seq, hooks.changed)
        cfg = self.cfg
        self.ipclock = (IpClock(self.link, hooks.sites, cfg.wait_duration, cfg.timeout_total)
                        if cfg.wait_duration > 0 else None)

    # --- the seams (see the module docstring) ---

    def page_fetch(self, fetch: PageFetch) -> PageFetch:
        """The reader's fetch as a node runs it: under its IP's lease (`waitDuration` > 0),
        then the job leaves the pending hash (unless it was put back in its queue)."""
        async def fetch_and_forget(site: Site, job: Job) -> None:
            retries = job.retries
            await fetch(site, job)  # cancelled (stopping): it stays pending, survivors fetch it
            if job.retries == retries:  # a 429/503 puts the job back in its queue: still ours
                self.fetched.add(job.url)
        if self.ipclock is None:
            return fetch_and_forget
        return self.ipclock.wrap_page(fetch_and_forget)

    def robots_fetch(self, fetch: RobotsFetch) -> RobotsFetch:
        """robots.txt's fetch as a node runs it: under its IP's lease (`waitDuration` > 0)."""
        return fetch if self.ipclock is None else self.ipclock.wrap_robots(fetch)

    def verdicts(self, local: VerdictStore) -> VerdictStore:
        """The robots stage's verdict store: Redis in front of `local`."""
        self.shared_verdicts = SharedVerdicts(self.link, local)
        return self.shared_verdicts

    def forward(self, key: str, job: Job) -> bool:
        """The site table's `Forward`: True when another node owns the job's site (the outbox
        sends it there)."""
        owner = self.membership.owner(key)
        if owner == self.node:
            return False
        self.outbox.add(owner, job)
        return True

    def hand_over(self, key: str, job: Job, visit: Visit) -> bool:
        """The recrawl's `HandOver`: True when another node owns the revisit's site (the
        outbox sends the job there with its page's history, validators, digest, estimator,
        and what its site learned)."""
        owner = self.membership.owner(key)
        if owner == self.node:
            return False
        self.outbox.add(owner, job, encode_visits([visit], self.hooks.site_learned(key)))
        return True

    def _adopt(self, histories: list[bytes]) -> None:
        """Revisits handed over to this node: their pages join its schedule, what their sites
        learned its sites' recrawl states."""
        visits: list[Visit] = []
        sites: dict[str, bytes] = {}
        for history in histories:
            try:
                handed, site = decode_visits(history)
            except (ValueError, zlib.error) as exc:  # another version's node, or damage
                log.warning("cluster: a page history handed over was unreadable (%s)", exc)
                continue
            visits += handed
            if site and handed:
                sites[site_key(handed[0].url)] = site
        self.hooks.adopt(visits, sites)

    # --- the hooks ---

    def next_seq(self) -> int:
        """A new number for a step that gives this node work."""
        self._seq += 1
        return self._seq

    def seq(self) -> int:
        """The number of the last such step."""
        return self._seq

    def _queued(self) -> None:
        """Jobs reached the local FIFO: wake the sequencer, re-check "done"."""
        self.hooks.queued()
        self.hooks.changed()

    def route(self, job: Job) -> None:
        """A job this node holds: into the local FIFO if it owns the site, else to the owner."""
        owner = self.membership.owner(site_key(job.url))
        if owner != self.node:
            self.outbox.add(owner, job)
            return
        self.frontier.push([job])
        self.frontier.flush()
        self._queued()

    def rebalance(self) -> None:
        """The live set changed: hand the queues of sites now owned elsewhere to their owners.

        Jobs still in the local FIFO are handed over as the sequencer pops them (`forward`);
        fetches in flight finish here.
        """
        sites, moved = self.hooks.sites, 0
        for site in list(sites.by_key.values()):
            owner = self.membership.owner(site.key)
            if owner == self.node or not sites.has_work(site):
                continue
            while sites.has_work(site):
                job = sites.take(site)
                visit = self.hooks.surrender(job)  # a revisit: its page's history goes too
                self.outbox.add(owner, job, None if visit is None else encode_visits(
                    [visit], self.hooks.site_learned(site.key)))
                moved += 1
            sites.rest(site)
        if moved:
            log.info("cluster: handing %d queued URLs to their new owners", moved)

    def recover(self) -> None:
        """Nothing local to mend: what this node must fetch is in Redis (`start` takes it)."""

    def idle(self) -> bool:
        """Nothing waiting for Redis: admission, outbox, inbound entries not acknowledged."""
        shared = self.shared_verdicts
        return (self.admission.idle() and self.outbox.idle() and not self.inbox.busy
                and (shared is None or shared.idle()))

    @property
    def done(self) -> bool:
        """The whole cluster is done (exitAtEnd)."""
        return self.termination.done

    # --- life cycle ---

    async def start(self) -> None:
        """Join the cluster, take back this node id's pending URLs, start the tasks."""
        try:
            await self.membership.register(new_crawl=True)
            await self._restore_figures()
            await self._check_seen_set()
            await self.membership.recover(self.node)  # a previous run's URLs -> own stream
        except (OSError, RedisError) as exc:
            await self.link.close()
            raise ConfigError(self.cfg.path, self.cfg.lines.get("cluster"),
                              f"cluster {self.cfg.cluster}: cannot use Redis: {exc}") from None
        log.info("cluster %s: node %s joined; live nodes: %s", self.cfg.cluster_name,
                 self.node, ", ".join(self.membership.live))
        self.tasks = [asyncio.ensure_future(self._heartbeats())]
        if len(self.membership.live) > 1:
            # Fetch nothing until every node has seen us join (a heartbeat each) and handed
            # over the sites we now own, so a site is not fetched by two nodes at once.
            await self.link.pause(2 * _membership.HEARTBEAT_S)
        loops = [self.inbox.run(), self.outbox.run(), self.admission.run(), self.fetched.run()]
        if self.cfg.exit_at_end:
            loops.append(self.termination.run())
        self.tasks += map(asyncio.ensure_future, loops)

    async def _restore_figures(self) -> None:
        """A previous run under this node id: its count of URLs seen goes on (the seen-set
        in Redis remembers them, so this run would not count them again)."""
        raw = await self.link.execute("HGET", self.link.key("stats"), self.node)
        try:
            previous = int(json.loads(raw)["urls_seen"]) if raw else 0
        except (ValueError, KeyError, TypeError):
            previous = 0
        self.stats.urls_seen = max(self.stats.urls_seen, previous)

    async def _check_seen_set(self) -> None:
        """Warn of what makes the seen-set in Redis cost more or know less than it should: a
        Redis that keeps sets of 511 integers as hash tables (`redis_seen.CAP`: ~60 bytes a
        URL instead of 8), and a crawl begun by a version whose seen-set was a Redis bitmap
        (`seen:<i>` keys: the fingerprints do not know those URLs, which may be fetched
        again)."""
        try:
            config = await self.link.execute("CONFIG", "GET", "set-max-intset-entries")
            entries = int(next(iter(config.values()))) if config else CAP
        except (RedisError, ValueError, AttributeError):  # CONFIG refused (a managed Redis)
            entries = CAP
        if entries < CAP:
            log.warning("cluster %s: Redis's set-max-intset-entries is %d: the seen-set's sets "
                        "of up to %d fingerprints take ~60 bytes a URL instead of 8 (set it to "
                        "%d or more)", self.cfg.cluster_name, entries, CAP, CAP)
        if await self.link.execute("EXISTS", self.link.key("seen", "0")):
            log.warning("cluster %s: Redis holds an older version's seen-set (%s); the URLs it "
                        "saw are not known to this version's and may be fetched again",
                        self.cfg.cluster_name, self.link.key("seen", "0"))

    async def _heartbeats(self) -> None:
        """Every HEARTBEAT_S: heartbeat, then recover the nodes that are gone."""
        link = self.link
        while not link.stopping.is_set():
            await link.pause(_membership.HEARTBEAT_S)
            await link.retrying("the heartbeat", self.beat)
            for node in self.membership.dead:
                await link.retrying("recovering a node", functools.partial(
                    self.membership.recover, node, self._beat_if_due))

    async def _beat_if_due(self) -> None:
        """During a long recovery: keep beating, or the others would take us for dead."""
        if asyncio.get_running_loop().time() - self._last_beat >= _membership.HEARTBEAT_S:
            await self.beat()

    async def beat(self) -> None:
        """One heartbeat (also run by the outbox when an owner refused URLs)."""
        self._last_beat = asyncio.get_running_loop().time()
        await self.membership.beat(json.dumps(self.figures()))
        if self.membership.done and self.cfg.exit_at_end:
            self.termination.mark_done()

    async def stop(self) -> None:
        """Leave the cluster: flush what is buffered, then hand over or clean up."""
        try:
            await asyncio.wait_for(self._leave(), STOP_TIMEOUT)
        except (OSError, RedisError, TimeoutError) as exc:
            # what was admitted is in Redis: after the heartbeat expires, the others take it
            log.error("cluster: could not leave cleanly (%s); the other nodes take over this "
                      "node's URLs once its heartbeat expires", exc)
        finally:
            await self.close()

    async def _leave(self) -> None:
        """End the loops, flush, say goodbye (with hand-over unless the crawl is done)."""
        await self._end_loops()
        await self.admission.drain()
        await self.outbox.drain()
        if self.shared_verdicts is not None:
            await self.shared_verdicts.drain()
        await self.fetched.flush()
        await self.membership.beat(json.dumps(self.figures()))  # final figures
        if self.done:  # the crawl is over: what is left pending is dropped jobs
            await self.link.execute("DEL", self.link.key("pending", self.node))
        await self.membership.leave(handover=not self.done)
        if not self.done:
            log.info("cluster: left; the live nodes take over this node's queued URLs")

    async def _end_loops(self) -> None:
        """Ask the loops to end (between round trips), wait for them, cancel stragglers."""
        self.link.stopping.set()
        self.admission.wake.set()
        self.outbox.wake.set()
        if self.tasks:
            _, late = await asyncio.wait(self.tasks, timeout=STOP_TIMEOUT / 2)
            for task in late:
                task.cancel()
        self.tasks = []

    async def close(self) -> None:
        """End the loops and release the connection, without leaving (after a crash this is
        like a kill -9: the others take over once the heartbeat expires)."""
        if self.closed:
            return
        self.closed = True
        await self._end_loops()
        await self.link.close()

    # --- figures ---

    def figures(self) -> dict[str, Any]:
        """This node's figures, as the other nodes see them."""
        stats, sites = self.stats, self.hooks.sites
        return {
            "pages": stats.pages, "bytes": stats.bytes, "urls_seen": stats.urls_seen,
            "success": stats.outcomes[Outcome.success], "errors": stats.errors(),
            "pages_per_s": round(stats.rates(10.0)[0], 2),
            "queued": len(self.frontier) + sites.queued, "idle": self.hooks.idle(),
            "round_trips": self.link.round_trips, "sent": self.admission.sent,
            "received": self.inbox.received, "forwarded": self.outbox.forwarded,
        }

    def status(self) -> dict[str, Any]:
        """The cluster part of the status page: every node's figures and the totals."""
        nodes: dict[str, dict[str, Any]] = {}
        for node, raw in self.membership.stats.items():
            try:
                nodes[node] = json.loads(raw)
            except ValueError:
                continue
        nodes[self.node] = self.figures()  # ours, fresh
        for node, figures in nodes.items():
            figures["live"] = node in self.membership.live
        totals = {k: sum(f.get(k, 0) for f in nodes.values()) for k in FIGURES}
        totals["pages_per_s"] = round(sum(f.get("pages_per_s", 0) for f in nodes.values()
                                          if f["live"]), 2)
        return {"name": self.cfg.cluster_name, "node": self.node,
                "live": list(self.membership.live), "dead": list(self.membership.dead),
                "totals": totals, "nodes": dict(sorted(nodes.items()))}

