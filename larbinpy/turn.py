"""The end of a loop turn: the work every stage leaves for it, run in one stated order.

Much of the crawl is done in batches, once a loop turn rather than once a page: the parser
parses the pages read this turn back to back, the outputs create their files back to back,
the recrawl schedule, the crawl log and the done-record are written with one `write()` each,
the state tables with one transaction each. Each of these is a *phase*, and correctness
rests on their order, so it is declared here, once:

1. `PARSE`: the turn's pages, their links extracted and sent to input (onto the FIFO files);
2. `OUTPUTS`: the turn's pages and exchanges to the outputs, in the order read (after all the
   parsing: the turn's files are created back to back);
3. `SCHEDULE`: with recrawl, the turn's new due times to the schedule's files;
4. `CRAWL_LOG`: the turn's final lines, to the crawl log and the done-record;
5. `TABLES`: the state tables (site records, robots.txt verdicts, the sites' recrawl states),
   one transaction each.

The invariant: when a URL reaches the done-record, its page's links are on the FIFO files, its
page went to the outputs and its next due time to the schedule; so a `kill -9` between two
phases loses nothing a restart does not redo. A stage asks for the turn's end with `due()`
(cheap: one flag); `run()` then calls every registered step of every phase in order, at the
end of the turn (a `call_soon` callback), or at once without a running loop (a tool, a test).
A checkpoint and a clean stop call `run()` themselves first.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable

log = logging.getLogger("larbinpy")


class Phase(enum.IntEnum):
    """The end of a turn's phases, in the order they run."""

    PARSE = 0
    OUTPUTS = 1
    SCHEDULE = 2
    CRAWL_LOG = 3
    TABLES = 4


class TurnEnd:
    """Runs the registered steps of every phase, in phase order, at the end of the loop turn
    in which any stage asked for it."""

    def __init__(self) -> None:
        self._steps: list[list[Callable[[], None]]] = [[] for _ in Phase]
        self._flat: tuple[Callable[[], None], ...] = ()
        self._due = False

    def on(self, phase: Phase, step: Callable[[], None]) -> None:
        """Run `step` in `phase` at every turn's end (steps of one phase in the order given).
        A step writes what it gathered and must be cheap when it gathered nothing."""
        self._steps[phase].append(step)
        self._flat = tuple(s for steps in self._steps for s in steps)

    @property
    def pending(self) -> bool:
        """Has a stage asked for this turn's end, and has it not run yet?"""
        return self._due

    def due(self) -> None:
        """Something waits for this turn's end: run the phases then (at once without a running
        loop)."""
        if self._due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.run()
            return
        self._due = True
        loop.call_soon(self.run)

    def run(self) -> None:
        """Every phase's steps, in order, now. A step that fails is logged; the later steps
        still run (a failing output must not keep the crawl log from being written)."""
        self._due = False  # a step asking again (the links it queued...) plans another end
        for step in self._flat:
            try:
                step()
            except Exception:
                log.exception("end of turn: %s failed", getattr(step, "__qualname__", step))

    async def passed(self) -> None:
        """Wait until this turn's end has run, if it is pending. Its callback was planned
        before the caller's own resumption (the loop runs callbacks in the order planned),
        so one yield is enough: the order is what makes it exact."""
        if self._due:
            await asyncio.sleep(0)
