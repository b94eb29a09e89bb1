"""A job's final outcome, told once to everything that follows it.

Every job (a URL admitted to the crawl) reaches exactly one final outcome, decided where it
happens: the reader (a fetch's outcome; a 429/503 sent back to its site's queue is not final),
the reader's refusals without a request (robots.txt, maxPagesPerSite) and the site table (a
dead site's queue, a job for a dead site). Each calls `Endings.end` once for it, and the event
(`Ended`) goes to the subscribers the crawler gave, in their order:

1. the recrawl (`stages/revisits.py`): schedules the page again and sets `Ended.due`;
2. the status page's last failures (`daemon/status.py`);
3. the site's tally, for the per-site view (`Sites.tally`);
4. the crawl log (`crawlLog`), whose line says `next`: the due time just set;
5. the done-record, last: a job is done once everything else knows it.

A job the done-record says finished before a crash (replayed from the checkpoint or the FIFOs)
ends once more without an event: its line was written then.

URLs refused before they become jobs (urlDup, outOfScope, tooDeep, trap at input) are counted,
not ended one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from larbinpy.records import Job
from larbinpy.stats import Outcome
from larbinpy.turn import TurnEnd

if TYPE_CHECKING:  # loaded with `recrawl on` only
    from larbinpy.frontier.recrawl import Answer


@dataclass(slots=True)
class Ended:
    """One job's final outcome, as every subscriber sees it."""

    job: Job
    kind: Outcome
    status: int | None = None  # the HTTP status, when there was an answer
    nbytes: int = 0  # bytes on the wire
    ms: int = 0  # how long the fetch took
    ctype: str | None = None  # the answer's media type
    note: str | None = None  # why, in words, when the kind does not say (the crawl log's)
    answer: Answer | None = None  # recrawl: what the fetch observed (None: no request)
    due: float | None = None  # recrawl: when the page is due again (set by the recrawl)


class Subscriber(Protocol):
    """Told every job's final outcome; must be cheap and must not raise."""

    def __call__(self, ended: Ended, /) -> None: ...


class Endings:
    """The one place a job's final outcome is told (see the module docstring)."""

    def __init__(self, replayed: Callable[[str], bool] | None = None,
                 turn: TurnEnd | None = None) -> None:
        """`replayed(url)`: True (once) for a URL that finished before a crash
        (`DoneRecord.take_skip`; None: nothing finished before). `turn`: the end of the loop
        turn, where the subscribers write what they were told."""
        self.replayed = replayed or no_replay
        self.subscribers: tuple[Subscriber, ...] = ()
        self.turn = turn or TurnEnd()

    @property
    def pending(self) -> bool:
        """Are outcomes told this turn still to be written (at the turn's end)?"""
        return self.turn.pending

    async def recorded(self) -> None:
        """Wait until the outcomes told so far are written: the reader's wait before a
        request, so that a `kill -9` re-fetches at most the requests on the wire."""
        await self.turn.passed()

    def subscribe(self, subscriber: Subscriber) -> None:
        """Tell `subscriber` every outcome from now on, after those subscribed before it (the
        crawler subscribes them once, in the order the module's docstring gives)."""
        self.subscribers = (*self.subscribers, subscriber)

    def end(self, job: Job, kind: Outcome, status: int | None = None, nbytes: int = 0,
            ms: int = 0, ctype: str | None = None, note: str | None = None,
            answer: Answer | None = None) -> None:
        """The final outcome of one job, to every subscriber."""
        if self.replayed(job.url):
            return  # its line was written before the crash (a replayed job ended again)
        ended = Ended(job, kind, status, nbytes, ms, ctype, note, answer)
        for subscriber in self.subscribers:
            subscriber(ended)


def no_replay(url: str) -> bool:
    """`Endings`' `replayed` where nothing was finished before (a tool, a test)."""
    return False
