"""Where a crawl's seams come from, as one object: the `Node` protocol and the embedded node.

The crawler (`crawler.py`) builds one node first and the stages on its seams: input's
`Admission`, the site table's `Forward`, the opener's `PageFetch` and `RobotsFetch` (the
reader's and robots' fetch, wrapped or not), the robots stage's `VerdictStore`; then it hands
the node the stages it calls back (`CrawlHooks`, once, through `bind`), and asks it at run time
whether its part of the crawl is done, for its status-page figures, and to start and stop.
`Embedded` is a crawl on its own (everything local, in stateDir); `cluster.Cluster` is a node of
a Redis scale-out. The crawler never asks which one it has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from larbinpy.config import Config
from larbinpy.frontier.interface import Frontier
from larbinpy.frontier.robotsdb import VerdictStore
from larbinpy.frontier.seen import SeenSet
from larbinpy.frontier.sites import Sites, never_forward
from larbinpy.records import Job
from larbinpy.stages.input import Admission, LocalAdmission
from larbinpy.stages.opener import PageFetch, RobotsFetch
from larbinpy.stats import Stats

if TYPE_CHECKING:  # the recrawl's modules load only with `recrawl on`
    from larbinpy.frontier.schedule import Visit


@dataclass(frozen=True)
class CrawlHooks:
    """What a node calls back in its crawl: the stages built on its seams."""

    sites: Sites  # the site queues: rebalancing empties them, a deferred fetch goes back
    queued: Callable[[], None]  # jobs reached the local FIFO: wake the sequencer
    changed: Callable[[], None]  # something finished: re-check whether the crawl is done
    idle: Callable[[], bool]  # nothing queued, parked or in flight here (`Crawler.idle`)
    parse_pending: Callable[[], None]  # parse the pages read so far (links on to admission)
    # pages handed over by another node with their history, and what their sites learned
    # (site key: the recrawl stage's site state, as bytes): into the recrawl schedule
    adopt: Callable[[list[Visit], dict[str, bytes]], None]
    # a queued job leaves for its site's new owner: a revisit's page history, which leaves
    # this node's schedule with it (None: not a revisit)
    surrender: Callable[[Job], Visit | None]
    # what a site learned for the recrawl, to go with its pages (b"": nothing, or recrawl off)
    site_learned: Callable[[str], bytes]


class Node(Protocol):
    """The seams of one crawl process, and what the crawl asks of them.

    Contract: built from the seen-set, the FIFO and the counters, before any stage; `bind` is
    called once, when the stages exist, before `page_fetch`, `robots_fetch`, `recover` and
    `start`. `stop` is a clean leave; `close` may follow it (then a no-op) or replace it after
    a failure.
    """

    # this process's queues, seen-set and verdicts live in stateDir and resume from it (a
    # cluster node's are in Redis: its stateDir is wiped, its seen-set a cache)
    local_state: ClassVar[bool]

    @property
    def admission(self) -> Admission:
        """Input's `Admission`."""
        ...

    def forward(self, key: str, job: Job, /) -> bool:
        """The site table's `Forward`."""
        ...

    def hand_over(self, key: str, job: Job, visit: Visit, /) -> bool:
        """The recrawl's `HandOver` (`stages/revisits.py`)."""
        ...

    def bind(self, hooks: CrawlHooks) -> None:
        """The crawl's side, once its stages exist."""

    def page_fetch(self, fetch: PageFetch) -> PageFetch:
        """The reader's fetch as this node runs it."""
        ...

    def robots_fetch(self, fetch: RobotsFetch) -> RobotsFetch:
        """robots.txt's fetch as this node runs it."""
        ...

    def verdicts(self, local: VerdictStore) -> VerdictStore:
        """The robots stage's verdict store, given stateDir's."""
        ...

    def recover(self) -> None:
        """At start, before the stages run: mend what a kill left half done locally."""

    def idle(self) -> bool:
        """Nothing of this node's is on its way elsewhere (part of `Crawler.idle`)."""
        ...

    @property
    def done(self) -> bool:
        """exitAtEnd: the whole crawl is done (this process's, or the cluster's)."""
        ...

    def status(self) -> dict[str, Any] | None:
        """The node's part of the status page (None: nothing to add)."""
        ...

    async def start(self) -> None:
        """Before the seeds are read."""

    async def stop(self) -> None:
        """At a clean stop, once no fetch runs: flush and leave."""

    async def close(self) -> None:
        """Release what it holds (a no-op after `stop`)."""


class Embedded:
    """A crawl on its own: the local FIFO and seen-set, every site its own, fetches as the
    stages make them, verdicts in stateDir's file."""

    local_state: ClassVar[bool] = True
    hooks: CrawlHooks  # given by `bind`

    def __init__(self, cfg: Config, seen: SeenSet, frontier: Frontier, stats: Stats) -> None:
        self.admission = LocalAdmission(frontier, seen, stats, self._queued)

    def _queued(self) -> None:
        """Jobs reached the FIFO: wake the sequencer."""
        self.hooks.queued()

    forward = staticmethod(never_forward)  # every site is this crawl's

    @staticmethod
    def hand_over(key: str, job: Job, visit: Visit, /) -> bool:
        """Every site is this crawl's: no revisit goes elsewhere."""
        return False

    def bind(self, hooks: CrawlHooks) -> None:
        """The crawl's side, once its stages exist."""
        self.hooks = hooks

    def page_fetch(self, fetch: PageFetch) -> PageFetch:
        """The reader's fetch, as it is."""
        return fetch

    def robots_fetch(self, fetch: RobotsFetch) -> RobotsFetch:
        """robots.txt's fetch, as it is."""
        return fetch

    def verdicts(self, local: VerdictStore) -> VerdictStore:
        """stateDir's verdicts, as they are."""
        return local

    def recover(self) -> None:
        """URLs a kill left queued but not marked seen are marked (`LocalAdmission.recover`)."""
        self.admission.recover()

    def idle(self) -> bool:
        """Nothing is ever on its way elsewhere."""
        return True

    @property
    def done(self) -> bool:
        """This crawl is done: nothing queued, parked or in flight."""
        return self.hooks.idle()

    def status(self) -> None:
        """Nothing to add to the status page."""
        return None

    async def start(self) -> None:
        """Nothing to join."""

    async def stop(self) -> None:
        """Nothing to leave."""

    async def close(self) -> None:
        """Nothing to release."""
