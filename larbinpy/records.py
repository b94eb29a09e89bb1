"""The data that flows through the pipeline: a URL (`Job`), a site (`Site`), a page (`Page`).

A `Job` goes input -> priority FIFO -> its site's queue -> a fetch. A `Site` is one record per
scheme+host+port (larbin's NamedSite): its queue, DNS/robots state and politeness clock. An
`IpSlot` is the politeness clock shared by every site on one IP address (larbin's IPSite).
A `Page` is what the reader hands to the outputs.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from larbinpy.stats import Outcome


class JobKind(enum.IntEnum):
    """What a fetched URL is for; written as its number in the state directory's job lines."""

    PAGE = 0  # a page: handed to the outputs, its links to input
    SITEMAP = 1  # a sitemap: parsed for URLs, not output as a page


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
    waiting: deque[Site] = field(default_factory=deque)
    users: int = 0  # sites attached to it: a slot no site uses is forgotten with them


@dataclass(slots=True, eq=False)
class Site:
    """One scheme+host+port: its queue of jobs and everything politeness needs."""

    key: str
    host: str
    state: SiteState = SiteState.DNS
    queue: deque[Job] = field(default_factory=deque)
    ip: IpSlot | None = None
    dead_until: float = 0.0
    # counted for the URLs that arrive while the site is dead
    dead_reason: Outcome = Outcome.noDNS
    robots: Any = None  # a Protego parser, or None for "allow all"
    robots_expires: float = 0.0  # 0: robots.txt still to fetch before any page
    robots_failures: int = 0
    delay: float = 0.0  # seconds between fetches: max(waitDuration, Crawl-delay)
    backoffs: int = 0  # 429/503 answers in a row: the exponent of its back-off
    in_flight: int = 0
    ready_at: float = 0.0
    pages: int = 0
    in_ready: bool = False  # already on the opener's ready queue
    waiting_ip: bool = False  # already parked on its IP's waiting list
    timer: asyncio.TimerHandle | None = None


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
