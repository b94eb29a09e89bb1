"""The crawl's clock: the loop's monotonic time, the wall clock, and timers on the first.

Everything that decides *when* (politeness and IP clocks, back-off, DNS expiry, the recrawl's
due times and spacing) reads time and arms timers through a `Clock` it is given, never from
`asyncio` or `time` itself. The crawl gives every part one `LoopClock` (the running event
loop's); a unit test gives them a `FakeClock` and moves time by hand, so a politeness wait of
seconds is tested in microseconds, and a test's timing cannot be flaky.

Two times, never mixed: `now()` is the loop's monotonic clock (what `call_at` takes: clocks
in memory), `wall()` is Unix time (what goes to disk, to the crawl log and to HTTP dates).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    """An armed timer (`asyncio.TimerHandle` is one)."""

    def cancel(self) -> None: ...
    def when(self) -> float: ...


class Clock(Protocol):
    """Time and timers, as every part of the crawl reads them."""

    def now(self) -> float:
        """The loop's monotonic time, seconds (what `call_at` takes)."""
        ...

    def wall(self) -> float:
        """Unix time, seconds."""
        ...

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Timer:
        """Call `callback(*args)` once `now()` reaches `when`."""
        ...


class LoopClock:
    """The running event loop's clock (asked for once: each asking is a getpid() on 3.11).
    Without a running loop (a tool, a test outside one) `now()` is `time.monotonic()`,
    which is the default loop's clock too."""

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (RuntimeError outside one)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def now(self) -> float:
        """The loop's time."""
        loop = self._loop
        if loop is None:
            try:
                loop = self.loop()
            except RuntimeError:
                return time.monotonic()
        return loop.time()

    def wall(self) -> float:
        """Unix time."""
        return time.time()

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Timer:
        """`loop.call_at`."""
        return self.loop().call_at(when, callback, *args)


class FakeTimer:
    """A timer of a `FakeClock`."""

    __slots__ = ("_when", "callback", "args", "cancelled")

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]):
        self._when, self.callback, self.args = when, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        """It will not fire."""
        self.cancelled = True

    def when(self) -> float:
        """When it fires."""
        return self._when


class FakeClock:
    """A clock that moves only when told (`advance`), firing its timers in time order, each
    with `now()` at its own time: a test's timing is exact and costs no waiting."""

    def __init__(self, start: float = 1000.0, wall_offset: float = 1.7e9) -> None:
        self._now = start
        self.wall_offset = wall_offset  # wall() - now()
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        """The fake monotonic time."""
        return self._now

    def wall(self) -> float:
        """The fake Unix time (a fixed offset from `now()`)."""
        return self._now + self.wall_offset

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> FakeTimer:
        """Arm a timer (fired by `advance`)."""
        timer = FakeTimer(when, callback, args)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def pending(self) -> list[float]:
        """When the armed timers fire, soonest first."""
        return sorted(t.when() for _, _, t in self._timers if not t.cancelled)

    def advance(self, seconds: float) -> int:
        """Move time on by `seconds`, firing every timer due by then in order; how many
        fired."""
        until = self._now + seconds
        fired = 0
        while self._timers and self._timers[0][0] <= until:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback(*timer.args)
            fired += 1
        self._now = until
        return fired
