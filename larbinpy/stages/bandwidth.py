"""Stage 0, larbin's waitBandwidth: a token bucket on body bytes read per second.

The reader calls `take(n)` after each chunk it reads; when the bucket is empty the reader
waits (the connection stays open, nothing is dropped) until the bucket refills. The body reader
in `net/` knows it only as a `net.body.Throttle`.
"""

from __future__ import annotations

import asyncio
import time


class BandwidthLimiter:
    """Token bucket of `rate` bytes per second, bursting up to one second's worth."""

    def __init__(self, rate: int) -> None:
        self.rate = float(rate)
        self.tokens = float(rate)
        self.stamp = time.monotonic()
        self.waiting = 0  # readers paused right now (for the status page)

    def _refill(self) -> None:
        """Add the tokens earned since the last call."""
        now = time.monotonic()
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    async def take(self, nbytes: int) -> None:
        """Spend `nbytes` tokens, waiting while the bucket is in debt."""
        self._refill()
        self.tokens -= nbytes
        if self.tokens >= 0:
            return
        self.waiting += 1
        try:
            # sleep exactly as long as it takes the bucket to get out of debt
            await asyncio.sleep(-self.tokens / self.rate)
        finally:
            self.waiting -= 1
