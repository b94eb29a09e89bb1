"""The data that flows through the pipeline: a URL (`Job`), a site (`Site`), a page (`Page`).

A `Job` goes input -> priority FIFO -> its site's queue -> a fetch. A `Site` is one record per
scheme+host+port (larbin's NamedSite): its queue, DNS/robots state and politeness clock. An
`IpSlot` is the politeness clock shared by every site on one IP address (larbin's IPSite).
A `Page` is what the reader hands to the outputs. A `SiteTally` is what a site's final outcomes
add up to, for the status page's per-site view (`/sites`).
"""

from __future__ import annotations

import enum
import struct
from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from larbinpy.clock import Timer
from larbinpy.stats import FAILURE_KINDS, Outcome


class JobKind(enum.IntEnum):
    """What a fetched URL is for; written as its number in the state directory's job lines."""

    PAGE = 0  # a page: handed to the outputs, its links to input
    SITEMAP = 1  # a sitemap: parsed for URLs, not output as a page
    # recrawl: a page fetched before, due again; its validators and digest are in the schedule
    # (looked up by URL when it is fetched), so the job itself stays as small as a first visit
    REVISIT = 2
    # a page requisite (`requisites`): fetched once, output, not parsed for links (a
    # stylesheet is read for its url()s and @imports); its depth is how many more levels of
    # stylesheet nesting may follow
    REQUISITE = 3


@dataclass(slots=True)
class Job:
    """One URL to fetch: `depth` is the remaining depth budget (larbin's meaning)."""

    url: str
    depth: int
    priority: int = 0
    hops: int = 0  # redirects followed to reach this URL
    tag: int = 0  # larbin's URL_TAGS: given with a submitted URL, kept across redirects
    kind: JobKind = JobKind.PAGE
    retries: int = 0  # times a 429/503 sent it back to its site's queue
    # the URL it was found on (None for seeds and submissions), for the crawl log; a
    # normalized URL, so it holds no tab or newline (the job-line codec relies on it)
    via: str | None = None
    # once its page is parsed: how many URLs never seen before its links gave (the recrawl's
    # discovery estimate; in memory only)
    found: int = 0


class SiteState(enum.Enum):
    """Where a site is in the pipeline."""

    DNS = "waiting DNS"
    ROBOTS = "waiting robots"
    READY = "ready"
    DEAD = "dead"  # DNS failed or network denied: its URLs are dropped until the cache expires


@dataclass(slots=True, eq=False)
class IpSlot:
    """Politeness clock of one IP address, shared by all its sites."""

    addr: str
    in_flight: int = 0
    ready_at: float = 0.0
    # the sites its fetches or its clock hold back, first come first served
    # (`frontier.politeness`); made when the first waits (an IP of one site never needs it,
    # and an empty deque is 624 bytes)
    waiting: deque[Site] | None = None
    in_ready: int = 0  # its sites on the opener's ready queue: each holds one of its places
    timer: Timer | None = None  # wakes `waiting` when `ready_at` passes
    users: int = 0  # sites attached to it: a slot no site uses is forgotten with them


class SiteQueue:
    """A site's jobs in memory: the highest priority first, first in first out within one.

    One FIFO per priority present (a site's jobs use few of larbin's 0-9), so taking and
    adding cost O(number of priorities), and a long queue of priority-0 links does not hold
    back a URL submitted at a higher priority. A FIFO is a list: a site keeps at most 128 jobs
    in memory (`Sites`), which a list moves at its front as fast as a deque would, and an empty
    deque is 624 bytes against a list's 56, in every site with work.
    """

    __slots__ = ("_by_priority", "_len")

    def __init__(self) -> None:
        self._by_priority: dict[int, list[Job]] = {}
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Job]:
        """The jobs in the order they would be served."""
        for priority in sorted(self._by_priority, reverse=True):
            yield from self._by_priority[priority]

    def fifos(self) -> Iterable[list[Job]]:
        """Its FIFOs, one a priority, the priorities in no particular order (a checkpoint's
        walk, which puts each job back on its priority's FIFO: `Sites.jobs`)."""
        return self._by_priority.values()

    def _fifo(self, priority: int) -> list[Job]:
        """The FIFO of one priority (made when first needed)."""
        fifo = self._by_priority.get(priority)
        if fifo is None:
            fifo = self._by_priority[priority] = []
        return fifo

    def append(self, job: Job) -> None:
        """Queue a job behind those of its priority."""
        self._fifo(job.priority).append(job)
        self._len += 1

    def extend(self, jobs: Iterable[Job]) -> None:
        """Queue jobs in order, each behind those of its priority."""
        for job in jobs:
            self.append(job)

    def appendleft(self, job: Job) -> None:
        """Put a job back at the head of its priority (taken but not fetched)."""
        self._fifo(job.priority).insert(0, job)
        self._len += 1

    def popleft(self) -> Job:
        """The next job: the oldest of the highest priority (IndexError when empty)."""
        if not self._len:
            raise IndexError("pop from an empty SiteQueue")
        priority = max(self._by_priority)
        fifo = self._by_priority[priority]
        job = fifo.pop(0)
        if not fifo:
            del self._by_priority[priority]
        self._len -= 1
        return job

    def clear(self) -> None:
        """Forget every job."""
        self._by_priority.clear()
        self._len = 0


@dataclass(slots=True, eq=False)
class Site:
    """One scheme+host+port: its queue of jobs and everything politeness needs."""

    key: str
    host: str
    state: SiteState = SiteState.DNS
    queue: SiteQueue = field(default_factory=SiteQueue)
    ip: IpSlot | None = None
    dead_until: float = 0.0
    # counted for the URLs that arrive while the site is dead
    dead_reason: Outcome = Outcome.noDNS
    dead_note: str | None = None  # why, in words, for the crawl log ("robots.txt answered 503")
    robots: bytes | None = None  # the robots.txt to obey (parsed when used), None: allow all
    robots_expires: float = 0.0  # 0: robots.txt still to fetch before any page
    robots_failures: int = 0
    delay: float = 0.0  # seconds between fetches: max(waitDuration, Crawl-delay)
    backoffs: int = 0  # 429/503 answers in a row: the exponent of its back-off
    in_flight: int = 0
    ready_at: float = 0.0
    pages: int = 0
    in_ready: bool = False  # already on the opener's ready queue
    waiting_ip: bool = False  # already parked on its IP's waiting list
    timer: Timer | None = None  # only for its own clock, never its IP's
    # recrawl: before this loop time no revisit of it is fed (recrawlShare of its politeness
    # capacity), and the one timer that feeds it then
    revisit_at: float = 0.0
    revisit_timer: Timer | None = None
    # its DNS answer (expiry on the loop's clock, addresses): the DNS stage's cache entry, which
    # its row on disk keeps (frontier/sitedb.py) so a site brought back within the TTL asks
    # no DNS again
    dns: tuple[float, list[str]] | None = None
    # its final outcomes added up, for the per-site view (made at its first outcome)
    tally: SiteTally | None = None


KINDS = tuple(Outcome)  # an outcome kind's number in a tally's ring
_KIND_NUMBER = {kind: i for i, kind in enumerate(KINDS)}
# a ring entry: Unix time (s), the kind's number, HTTP status (0: none), length of the path
_ENTRY = struct.Struct("<IBHB")
RING_KEPT = 10  # last outcomes a site keeps
RING_PATH = 80  # bytes of a URL's path and query kept in the ring (the crawl log has all)


@dataclass(frozen=True, slots=True)
class Recent:
    """One of a site's last outcomes, as its tally's ring gives it back."""

    t: int  # Unix time, seconds
    kind: Outcome
    status: int | None
    path: str  # the URL's path and query, cut to RING_PATH bytes ("..." at the end if cut)


class SiteTally:
    """A site's final outcomes added up, in few bytes: the HTTP answers, the failures
    (`FAILURE_KINDS`), the count of each kind other than success (pairs of numbers in an
    array, made at the first: a dict would cost 224 bytes) and its last RING_KEPT outcomes
    packed in one bytes object (`_ENTRY` and the path's bytes, each, oldest first)."""

    __slots__ = ("answered", "failed", "kind_counts", "ring", "in_ring")

    def __init__(self) -> None:
        self.answered = 0  # outcomes with an HTTP status: pages fetched
        self.failed = 0  # outcomes in FAILURE_KINDS
        self.kind_counts: array[int] | None = None  # kind number, count, kind number, ...
        self.ring = b""
        self.in_ring = 0

    def add(self, t: float, kind: Outcome, status: int | None, path: str) -> None:
        """One final outcome at Unix time `t` of a URL of the site (`path`: its path and
        query)."""
        number = _KIND_NUMBER[kind]
        if status is not None:
            self.answered += 1
        if kind is not Outcome.success:
            if kind in FAILURE_KINDS:
                self.failed += 1
            self._count(number)
        raw = path.encode("utf-8", "surrogateescape")
        if len(raw) > RING_PATH:
            raw = raw[:RING_PATH - 3] + b"..."
        entry = _ENTRY.pack(int(t) & 0xFFFFFFFF, number,
                            status if status is not None and 0 < status < 65536 else 0,
                            len(raw)) + raw
        ring = self.ring
        if self.in_ring == RING_KEPT:  # the oldest goes: its size is in its header
            ring = ring[_ENTRY.size + ring[_ENTRY.size - 1]:]
        else:
            self.in_ring += 1
        # a new bytes object of the exact size (a bytearray cut at its front keeps the room)
        self.ring = ring + entry

    def _count(self, number: int) -> None:
        """One more outcome of the kind of this number."""
        counts = self.kind_counts
        if counts is None:
            self.kind_counts = array("I", (number, 1))
            return
        for i in range(0, len(counts), 2):
            if counts[i] == number:
                counts[i + 1] += 1
                return
        counts.extend((number, 1))

    @property
    def kinds(self) -> dict[Outcome, int]:
        """The count of each kind other than success."""
        counts = self.kind_counts or ()
        return {KINDS[counts[i]]: counts[i + 1] for i in range(0, len(counts), 2)}

    def recent(self) -> list[Recent]:
        """The last outcomes, newest first."""
        out, ring, at = [], self.ring, 0
        while at < len(ring):
            t, kind, status, size = _ENTRY.unpack_from(ring, at)
            at += _ENTRY.size
            path = ring[at:at + size].decode("utf-8", "surrogateescape")
            at += size
            out.append(Recent(t, KINDS[kind], status or None, path))
        out.reverse()
        return out


@dataclass(frozen=True, slots=True)
class Revisit:
    """A fetch that found the copy already kept (recrawl): archives write a revisit record
    pointing at the capture it repeats; the other outputs and the hook skip it."""

    profile: str  # "server-not-modified" (a 304) or "identical-payload-digest" (same body)
    refers_to_uri: str  # the URL of the original capture
    refers_to_date: float  # Unix time of the original capture (WARC-Refers-To-Date)
    payload_digest: bytes  # SHA-1 of the original capture's payload, 20 bytes


@dataclass(slots=True)
class Page:
    """A fetched page, as the outputs see it."""

    job: Job
    url: str  # the URL fetched (redirects are separate jobs, so also the final URL)
    status: int
    headers: Any  # multidict of response headers
    body: bytes
    content_type: str
    ip: str
    fetched_at: float  # wall-clock time
    elapsed: float  # seconds the fetch took
    links: list[str] = field(default_factory=list)
    # the exchange as it went over the wire, for archival outputs (WARC)
    raw_body: bytes | None = None  # body before content-decoding (None unless kept)
    raw_headers: tuple[tuple[bytes, bytes], ...] = ()
    http_version: str = "HTTP/1.1"
    reason: str = ""
    request_headers: Any = None  # headers sent with the request
    revisit: Revisit | None = None  # recrawl: the page was as kept (no new content)
