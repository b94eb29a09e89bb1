"""The priority FIFOs between the input stage and the sequencer.

Scrapy's scheduler interface, larbin's layout: one FIFO per priority, the highest priority
served first, FIFO within a priority. `Frontier` is the small interface the stages use;
`MemoryFrontier` is the embedded default (its content is saved by the checkpoint, see
`state.py`). A disk-spilling or Redis frontier can replace it without touching the stages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Protocol

from .records import Job


class Frontier(Protocol):
    """has-pending / enqueue / next, as in Scrapy's scheduler."""

    def __len__(self) -> int:
        """How many jobs wait."""
        ...

    def push(self, jobs: Iterable[Job]) -> None:
        """Enqueue jobs at their priority."""
        ...

    def pop(self) -> Job | None:
        """The next job: highest priority first, FIFO within a priority."""
        ...

    def jobs(self) -> Iterator[Job]:
        """Every waiting job, for a checkpoint."""
        ...

    def sizes(self) -> dict[int, int]:
        """Waiting jobs per priority."""
        ...


class MemoryFrontier:
    """Priority FIFOs held in memory."""

    def __init__(self) -> None:
        self._fifos: dict[int, deque[Job]] = {}
        self._order: list[int] = []  # priorities, highest first
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, jobs: Iterable[Job]) -> None:
        """Append each job to the FIFO of its priority."""
        fifos = self._fifos
        for job in jobs:
            fifo = fifos.get(job.priority)
            if fifo is None:
                fifo = fifos[job.priority] = deque()
                self._order = sorted(fifos, reverse=True)
            fifo.append(job)
            self._size += 1

    def pop(self) -> Job | None:
        """The oldest job of the highest non-empty priority."""
        if not self._size:
            return None
        for prio in self._order:
            fifo = self._fifos[prio]
            if fifo:
                self._size -= 1
                return fifo.popleft()
        return None

    def sizes(self) -> dict[int, int]:
        """Queued jobs per priority."""
        return {p: len(self._fifos[p]) for p in self._order}

    def jobs(self) -> Iterator[Job]:
        """Every waiting job, highest priority first."""
        for prio in self._order:
            yield from self._fifos[prio]
