"""Back-off when a site says "too much" (429, 503), for the reader and robots stages.

The whole site pauses, never the crawl: its politeness clock (`Site.ready_at`, which the
opener obeys) is pushed to `Retry-After` (seconds or an HTTP date, capped by `maxRetryAfter`)
or, without one, to an exponential back-off: max(the site's delay, BACKOFF_MIN) * 2^(n-1) for
the n-th such answer in a row, also capped. Any other answer resets n. Other sites keep
their speed.

For a page (`BackOff`, the reader's), the job goes back to its site's queue, at most
`maxRetries` times (each counted as backedOff); the last answer is then counted by its status.
"""

from __future__ import annotations

from typing import Protocol

from larbinpy.clock import Clock, LoopClock
from larbinpy.records import Job, Site

BACKOFF_MIN = 0.5  # seconds: the first back-off of a site crawled with waitDuration 0
BACK_OFF_STATUSES = frozenset({429, 503})
WALL = LoopClock()  # a date's clock for callers that give none (the robots stage)


def retry_after(value: str | None, cap: float, clock: Clock = WALL) -> float | None:
    """Seconds a `Retry-After` header asks for, within [0, cap] (a date: from `clock.wall()`);
    None if absent or unparsable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        import email.utils  # (here: a date is rare, its import costs a start-up ~10 ms)

        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # HTTP dates are GMT
            return None
        seconds = when.timestamp() - clock.wall()
    return min(max(seconds, 0.0), cap)


def pause_for(site: Site, header: str | None, cap: float, clock: Clock = WALL) -> float:
    """Seconds the site pauses for its next 429/503 answer in a row."""
    pause = retry_after(header, cap, clock)
    if pause is None:
        # the exponent is bounded: a server answering 429 a thousand times must not overflow it
        pause = min(max(site.delay, BACKOFF_MIN) * 2 ** min(site.backoffs, 30), cap)
    return pause


class SiteTable(Protocol):
    """What a back-off changes, through the site table (`frontier.sites.Sites`, its owner)."""

    def back_off(self, site: Site, until: float, /) -> None: ...
    def answered(self, site: Site, /) -> None: ...
    def enqueue(self, job: Job, now: float, /) -> None: ...


class BackOff:
    """The reader's answer to a 429/503: the site pauses, the job goes back to its queue."""

    def __init__(self, max_retries: int, max_retry_after: float, sites: SiteTable,
                 clock: Clock | None = None) -> None:
        self.max_retries, self.cap = max_retries, max_retry_after
        self.sites = sites  # the job waits on its site's queue again (`enqueue`)
        self.clock = clock or LoopClock()  # when the pause ends (loop), a Retry-After date (wall)

    def retry(self, site: Site, job: Job, header: str | None) -> bool:
        """After a 429/503 (`header`: its Retry-After): pause the site from now; True when the
        job went back to its site's queue, False when its retries are spent."""
        now = self.clock.now()
        self.sites.back_off(site, now + pause_for(site, header, self.cap, self.clock))
        if job.retries >= self.max_retries:
            return False
        job.retries += 1
        self.sites.enqueue(job, now)
        return True

    def answered(self, site: Site) -> None:
        """Any other answer: the site answers normally again, the next back-off starts over."""
        if site.backoffs:
            self.sites.answered(site)
