"""Stage 2, larbin's sequencer: from the priority FIFOs into per-site queues.

Each turn moves up to `perCall` jobs, highest priority first, then yields to the other
stages, so a flood of new URLs never starves DNS or the readers.

It is also what bounds the site table of a broad crawl: while `maxSitesInMemory` sites have
work (the table's records less its idle ones), it moves nothing, and the jobs wait on the
FIFOs, on disk, until a site has finished (the crawler wakes it, `room`). A million seeds so
make a million sites one `maxSitesInMemory` at a time, not a million records, DNS questions
and queues at once. Once full it waits for 1% of the budget (`slack`) to finish, not for
each site: a wake a site, each moving one job, cost a turn of this loop a site. Every site
with work finishes it (its fetches end, its politeness and back-off waits are bounded), so
the wait always ends.
"""

from __future__ import annotations

import asyncio
import logging

from larbinpy.frontier.interface import Frontier
from larbinpy.frontier.sites import Sites

log = logging.getLogger("larbinpy.sequencer")
RETRY_DELAY = 5.0


class Sequencer:
    """Moves jobs from the FIFOs to their sites, `per_call` per turn, while fewer than
    `max_sites` sites have work."""

    def __init__(self, frontier: Frontier, sites: Sites, per_call: int,
                 max_sites: int | None = None) -> None:
        self.frontier = frontier
        self.sites = sites
        self.per_call = per_call
        self.max_sites = max_sites  # None: no bound (a tool, a test)
        self.slack = max(1, (max_sites or 0) // 100)  # sites that finish before a full one moves
        self.wake = asyncio.Event()
        self.full = False  # the last turn stopped at max_sites: `room` wakes it

    def notify(self) -> None:
        """New jobs are on the FIFOs."""
        self.wake.set()

    def room(self) -> None:
        """Something finished (the crawler's `changed`): wake a full sequencer once `slack`
        sites have room."""
        if self.full and self.sites.busy() + self.slack <= (self.max_sites or 0):
            self.wake.set()

    async def run(self) -> None:
        """Forever: wait for jobs (and room for their sites), move a batch, yield."""
        loop = asyncio.get_running_loop()
        while True:
            if not len(self.frontier) or self._no_room():
                self.wake.clear()
                await self.wake.wait()
                continue
            try:
                self.turn(loop.time())
            except OSError:  # disk full, too many files: the queues are on disk; try again soon
                log.exception("sequencer: cannot move jobs to their sites; retrying in 5 s")
                await asyncio.sleep(RETRY_DELAY)
            await asyncio.sleep(0)  # one turn = perCall jobs; let the other stages run

    def _no_room(self) -> bool:
        """Do max_sites sites have work (so no job may make another one busy)?"""
        self.full = self.max_sites is not None and self.sites.busy() >= self.max_sites
        return self.full

    def turn(self, now: float) -> int:
        """Move up to `per_call` jobs, stopping when the table is full; how many moved."""
        moved = 0
        pop, enqueue = self.frontier.pop, self.sites.enqueue
        while moved < self.per_call and not self._no_room():
            job = pop()
            if job is None:
                break
            enqueue(job, now)
            moved += 1
        return moved
