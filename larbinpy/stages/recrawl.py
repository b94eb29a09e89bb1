"""The recrawl seam: what the reader, input and the crawler ask of the recrawl, on or off.

With `recrawl on` the crawler gives every stage `stages/revisits.Revisits` (the schedule, its
feeder and its policy); without, `NoRecrawl`, which answers as a crawl that fetches each page
once: no history, no validators, nothing due. The stages never ask which they have, and a
crawl without recrawl never imports the schedule, its policy or their math.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from larbinpy.records import Job, Revisit, Site
from larbinpy.stats import Outcome

if TYPE_CHECKING:
    from larbinpy.frontier.endings import Ended
    from larbinpy.frontier.recrawl import Answer
    from larbinpy.frontier.schedule import Visit

# what `Recrawl.prepare` returns for a fetch without history: no answer to fill, no headers
Prepared = tuple["Answer | None", "dict[str, str] | None"]
NO_HISTORY: Prepared = (None, None)


class Recrawl(Protocol):
    """The recrawl, as the other stages see it."""

    @property
    def pending(self) -> int:
        """Due visits popped and not yet handed to their site (`Crawler.idle` reads it)."""
        ...

    @property
    def lastmod(self) -> Callable[[str, float], None] | None:
        """Told each listed page of a sitemap with its <lastmod> (None: lastmods are not
        read)."""
        ...

    async def run(self) -> None:
        """The task that feeds due visits to their sites, forever (returns at once: off)."""
        ...

    def prepare(self, site: Site, job: Job) -> Prepared | None:
        """Before a fetch: the `Answer` the reader fills as the response comes and the
        conditional GET's headers; None when the job is a stale revisit (the page was fetched
        and scheduled again since it was popped): then it must not be fetched."""
        ...

    def revisit_of(self, answer: Answer | None, url: str, kind: Outcome) -> Revisit | None:
        """The revisit record a fetch that found the copy kept gets (a 304, or the same
        body), for the archives."""
        ...

    def discovered(self, page: Job, jobs: list[Job]) -> None:
        """New URLs a revisited page's links gave, queued now (when each is first fetched
        makes the discovery delay)."""
        ...

    def release(self, job: Job) -> None:
        """A revisit job went back to its site's queue (a 429/503): its site may take the
        next one when it comes back."""
        ...

    def skipped(self, site_key: str) -> None:
        """A job left its site's queue with no fetch and no outcome (a replay's job the
        done-record says finished before a kill): a waiting revisit may go now."""
        ...

    def ended(self, ended: Ended) -> None:
        """A job's final outcome (an `Endings` subscriber): the page is scheduled again and
        `ended.due` says when."""
        ...

    def force(self, url: str) -> bool:
        """Make a known page due now (`larbinpy submit --force`); False if it is unknown."""
        ...

    def figures(self) -> dict[str, Any] | None:
        """status.json's `recrawl` object (None: off)."""
        ...

    def discoverers(self, site: str) -> list[dict[str, Any]]:
        """The pages of a site (its key) whose revisits found the most new URLs, with how
        many, most first (`/sites/HOST`; empty: off)."""
        ...

    def adopt(self, visits: list[Visit], sites: dict[str, bytes]) -> None:
        """Pages another cluster node handed over with their history, and their sites'
        states."""
        ...

    def surrender(self, job: Job) -> Visit | None:
        """A queued job leaves for its site's new owner: a revisit's history goes with it."""
        ...

    def site_learned(self, key: str) -> bytes:
        """What a site learned, to travel with its revisits to a new owner (b"": nothing)."""
        ...


class NoRecrawl:
    """`recrawl off`: each page is fetched once; nothing is scheduled, due or handed over."""

    pending = 0
    lastmod = None  # sitemaps' lastmods are not read

    async def run(self) -> None:
        """Nothing to feed."""

    def prepare(self, site: Site, job: Job) -> Prepared | None:
        """No history, no validators."""
        return NO_HISTORY

    def revisit_of(self, answer: Answer | None, url: str, kind: Outcome) -> Revisit | None:
        """No copy is kept to repeat."""
        return None

    def discovered(self, page: Job, jobs: list[Job]) -> None:
        """No page is revisited."""

    def release(self, job: Job) -> None:
        """No revisit jobs."""

    def skipped(self, site_key: str) -> None:
        """No revisit waits."""

    def ended(self, ended: Ended) -> None:
        """Nothing to schedule."""

    def force(self, url: str) -> bool:
        """No page is known to the schedule: `--force` queues it as a new URL."""
        return False

    def figures(self) -> dict[str, Any] | None:
        """No recrawl figures."""
        return None

    def discoverers(self, site: str) -> list[dict[str, Any]]:
        """No revisits, no discoverers."""
        return []

    def adopt(self, visits: list[Visit], sites: dict[str, bytes]) -> None:
        """No node hands pages over with their history (nor is any asked to)."""

    def surrender(self, job: Job) -> Visit | None:
        """No job is a revisit with a history."""
        return None

    def site_learned(self, key: str) -> bytes:
        """No site learns anything to hand over."""
        return b""
