"""The memory budget of documents being read or parsed: one pool of bytes for the process.

A page, a sitemap or a robots.txt is held whole in memory from its first byte until its parse
ends. Each takes its bytes from this pool (`documentMemory`) as it grows, through its
`Reservation`: `read_body` takes them at once when the size is announced, else as they
arrive; whoever parses the document gives them back (`Reservation.release`). A document that
does not fit waits for room, in the order asked, so many large documents at once are read a
few at a time instead of all growing together.

Nothing deadlocks: a request is granted when it fits and no earlier one waits, when the pool
is empty (a document larger than the whole pool then takes it alone), or when it comes from
the oldest document holding bytes (so a document already partly read always finishes, and
the pool's use exceeds its size by at most that one document). Waiting never holds the event
loop (it awaits a future) and ends at the document's deadline (its fetch's `timeoutTotal`):
then TimeoutError, counted as a timeout like any fetch that ran out of time.

What an operator sees: each wait counts in `resource_waits` (status.json), and a full pool is
logged, at most once every LOG_EVERY seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from larbinpy.stats import Stats, counted

log = logging.getLogger("larbinpy.docmemory")
LOG_EVERY = 60.0  # seconds between two "pool full" log lines
MiB = 1024 * 1024


class Reservation:
    """The bytes one document holds in the pool, and what it waits for."""

    __slots__ = ("_future", "_want", "deadline", "held", "pool")

    def __init__(self, pool: DocumentMemory, deadline: float | None) -> None:
        self.pool = pool
        self.deadline = deadline  # time.monotonic() by which a wait for room gives up
        self.held = 0
        self._want = 0  # bytes asked and not granted yet (while waiting)
        self._future: asyncio.Future[None] | None = None

    async def take(self, nbytes: int) -> None:
        """Hold `nbytes` more, waiting for room (TimeoutError past the deadline)."""
        if nbytes > 0:
            await self.pool._take(self, nbytes)

    def take_now(self, nbytes: int) -> bool:
        """Hold `nbytes` more if the pool grants them without a wait (as `take` would);
        False, holding nothing more, if they must be waited for."""
        return nbytes <= 0 or self.pool._grant_now(self, nbytes)

    def release(self) -> None:
        """Give back everything held (the document was parsed, or dropped); idempotent."""
        self.pool._release(self)


class DocumentMemory:
    """A byte pool shared by every document in flight: FIFO, deadlock-free (module docstring)."""

    def __init__(self, capacity: int, stats: Stats | None = None) -> None:
        self.capacity = capacity
        self.stats = stats  # documents that waited count as resource_waits there
        self.used = 0
        self.peak = 0  # most bytes held at once
        self.waits = 0  # requests that had to wait for room
        self._holders: dict[Reservation, None] = {}  # holding bytes, oldest first
        self._queue: deque[Reservation] = deque()  # waiting for room, in the order asked
        self._logged = -LOG_EVERY  # time.monotonic() of the last "pool full" line

    def reservation(self, deadline: float | None = None) -> Reservation:
        """A new document's (empty) reservation; waits for room end at `deadline`."""
        return Reservation(self, deadline)

    @property
    def waiting(self) -> int:
        """Documents waiting for room now."""
        return len(self._queue)

    def _grantable(self, res: Reservation, nbytes: int) -> bool:
        """May `res` have `nbytes` more now (ignoring who waits ahead)?"""
        if self.used == 0 or self.used + nbytes <= self.capacity:
            return True
        return next(iter(self._holders), None) is res  # the oldest holder always goes on

    def _grant_now(self, res: Reservation, nbytes: int) -> bool:
        """Grant at once if allowed (the oldest holder, or it fits and nobody waits)."""
        oldest = next(iter(self._holders), None) is res
        if oldest or (not self._queue and self._grantable(res, nbytes)):
            self._grant(res, nbytes)
            return True
        return False

    async def _take(self, res: Reservation, nbytes: int) -> None:
        """Grant at once when allowed, else wait in line."""
        if self._grant_now(res, nbytes):
            return
        future = asyncio.get_running_loop().create_future()
        res._want, res._future = nbytes, future
        self._queue.append(res)
        self.waits += 1
        if self.stats is not None:
            self.stats.resource_waits += 1
        self._log_full()
        try:
            if res.deadline is None:
                await future
            else:
                async with asyncio.timeout(res.deadline - time.monotonic()):
                    await future
        finally:
            if res._future is future:  # not granted (timed out, cancelled): leave the line
                res._future = None
                self._queue.remove(res)
                self._wake()  # it may have held up those behind it

    def _log_full(self) -> None:
        """Say the pool is full (not more often than LOG_EVERY)."""
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY:
            self._logged = now
            log.info("documentMemory full: %.1f of %.1f MiB held, %s waiting for room (%s so "
                     "far)", self.used / MiB, self.capacity / MiB,
                     counted(len(self._queue), "document"), counted(self.waits, "wait"))

    def _grant(self, res: Reservation, nbytes: int) -> None:
        """`res` holds `nbytes` more."""
        if not res.held:
            self._holders[res] = None
        res.held += nbytes
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def _release(self, res: Reservation) -> None:
        """`res` gives back all it holds; those waiting go on as room allows."""
        if res.held:
            self.used -= res.held
            res.held = 0
            del self._holders[res]
            self._wake()

    def _wake(self) -> None:
        """Grant waiting requests: the oldest holder's first, then in order while they fit."""
        oldest = next(iter(self._holders), None)
        if oldest is not None and oldest._future is not None:
            self._queue.remove(oldest)
            self._resume(oldest)
        while self._queue and self._grantable(self._queue[0], self._queue[0]._want):
            self._resume(self._queue.popleft())

    def _resume(self, res: Reservation) -> None:
        """Grant a waiting request (already out of the line) and wake its document."""
        future, res._future = res._future, None
        self._grant(res, res._want)
        res._want = 0
        if future is not None and not future.done():
            future.set_result(None)
