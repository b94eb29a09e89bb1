"""The priority FIFOs between the input stage and the sequencer: the interface.

Scrapy's scheduler interface, larbin's layout: one FIFO per priority, the highest priority
served first, FIFO within a priority. The embedded default is `diskqueue.DiskFrontier`
(segment files in `stateDir/frontier`, bounded memory); a Redis frontier can implement the
same protocol without touching the stages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from larbinpy.frontier.durable import Durable
from larbinpy.records import Job

Position = tuple[int, int]


class Frontier(Durable, Protocol):
    """has-pending / enqueue / next, plus what a checkpoint needs (a `Durable` store: its
    position is its read cursors, one a priority)."""

    def __len__(self) -> int:
        """How many jobs wait."""
        ...

    def push(self, jobs: Iterable[Job]) -> None:
        """Enqueue jobs at their priority."""
        ...

    def flush(self) -> None:
        """Make pushed jobs survive a crash of this process (before they are marked seen)."""
        ...

    def pop(self) -> Job | None:
        """The next job: highest priority first, FIFO within a priority."""
        ...

    def sizes(self) -> dict[int, int]:
        """Waiting jobs per priority."""
        ...

    def position(self) -> dict[int, Position]:
        """Read cursors, saved by a checkpoint."""
        ...

    def newest_urls(self) -> Iterable[Iterable[list[str]]]:
        """Per FIFO, the URLs queued last, newest windows first (consumed ones included):
        where a restart finds the batch a kill cut short between queueing and marking seen."""
        ...
