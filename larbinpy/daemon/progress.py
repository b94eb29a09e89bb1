"""What the operator sees in the terminal: a live one-line display and a final summary.

Not a pipeline stage: it only reads the crawler's counters once a second.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from larbinpy.crawler import Crawler


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB'."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000
    return f"{n:.1f} TB"


class Progress:
    """Live line on stderr (only in a terminal) and the summary line (always)."""

    def __init__(self, crawler: Crawler, enabled: bool) -> None:
        self.crawler = crawler
        self.enabled = enabled and sys.stderr.isatty()

    def line(self) -> str:
        """pages, pages/s, bytes/s, queue, errors."""
        c = self.crawler
        pps, bps = c.stats.rates()
        queued = len(c.frontier) + c.sites.queued
        return (
            f"{c.stats.pages} pages  {pps:.0f} pages/s  {human_bytes(bps)}/s  "
            f"queue {queued}  in flight {c.opener.in_flight}  errors {c.stats.errors()}"
        )

    def update(self) -> None:
        """Redraw the live line."""
        if self.enabled:
            sys.stderr.write("\r\x1b[2K" + self.line())
            sys.stderr.flush()

    def summary(self) -> None:
        """One final line: what the crawl did."""
        c = self.crawler
        if self.enabled:
            sys.stderr.write("\r\x1b[2K")
        elapsed = time.monotonic() - c.stats.started
        kinds = ", ".join(f"{k} {v}" for k, v in c.stats.outcomes.items() if v)
        sys.stderr.write(
            f"larbinpy: {'stopped' if c.stop_requested else 'done'} after {elapsed:.1f} s: "
            f"{c.stats.pages} pages ({c.stats.pages / max(elapsed, 1e-9):.1f}/s), "
            f"{human_bytes(c.stats.bytes)}, {c.stats.urls_seen} URLs seen, "
            f"{len(c.sites.by_key)} sites; outcomes: {kinds or 'none'}\n"
        )
