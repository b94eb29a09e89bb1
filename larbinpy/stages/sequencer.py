"""Stage 2, larbin's sequencer: from the priority FIFOs into per-site queues.

Each turn moves up to `perCall` jobs, highest priority first, then yields to the other
stages, so a flood of new URLs never starves DNS or the readers.
"""

from __future__ import annotations

import asyncio
import logging

from larbinpy.frontier.interface import Frontier
from larbinpy.frontier.sites import Sites

log = logging.getLogger("larbinpy.sequencer")
RETRY_DELAY = 5.0


class Sequencer:
    """Moves jobs from the FIFOs to their sites, `per_call` per turn."""

    def __init__(self, frontier: Frontier, sites: Sites, per_call: int) -> None:
        self.frontier = frontier
        self.sites = sites
        self.per_call = per_call
        self.wake = asyncio.Event()

    def notify(self) -> None:
        """New jobs are on the FIFOs."""
        self.wake.set()

    async def run(self) -> None:
        """Forever: wait for jobs, move a batch, yield."""
        loop = asyncio.get_running_loop()
        while True:
            if not len(self.frontier):
                self.wake.clear()
                await self.wake.wait()
                continue
            try:
                self.turn(loop.time())
            except OSError:  # disk full, too many files: the queues are on disk; try again soon
                log.exception("sequencer: cannot move jobs to their sites; retrying in 5 s")
                await asyncio.sleep(RETRY_DELAY)
            await asyncio.sleep(0)  # one turn = perCall jobs; let the other stages run

    def turn(self, now: float) -> int:
        """Move up to `per_call` jobs; how many moved."""
        moved = 0
        pop, enqueue = self.frontier.pop, self.sites.enqueue
        while moved < self.per_call:
            job = pop()
            if job is None:
                break
            enqueue(job, now)
            moved += 1
        return moved
