"""What the operator sees: a live one-line display in a terminal, the same line in the log
every LOG_EVERY seconds without one (systemd, nohup, CI), and a final summary.

Not a pipeline stage: it only reads the crawl's gauges (`status.StatusSource`) once a second.
"""

from __future__ import annotations

import logging
import sys
import time

from larbinpy.daemon.status import StatusSource
from larbinpy.runtime import logs_are_json, logs_to_file
from larbinpy.stats import counted


def human_bytes(n: float) -> str:
    """1234567 -> '1.2 MB'."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1000
    return f"{n:.1f} TB"


log = logging.getLogger("larbinpy.progress")


class Progress:
    """Live line on stderr in a terminal, else a log line now and then; the summary always."""

    LOG_EVERY = 60.0  # seconds between two progress lines in the log (no terminal)

    def __init__(self, source: StatusSource, enabled: bool) -> None:
        self.source = source
        terminal = sys.stderr.isatty() and not logs_are_json()  # JSON lines: no live line
        self.enabled = enabled and terminal
        self.logged = enabled and not terminal  # a log has no live line: a line now and then
        self.last_logged = time.monotonic()

    def line(self) -> str:
        """pages, pages/s, bytes/s, queue, errors."""
        g = self.source.gauges()
        pps, bps = g.stats.rates()
        queued = sum(g.queued_per_priority.values()) + g.queued_in_sites
        return (
            f"{counted(g.stats.pages, 'page')}  {pps:.0f} pages/s  {human_bytes(bps)}/s  "
            f"queue {queued}  in flight {g.in_flight}  errors {g.stats.errors()}"
        )

    def update(self) -> None:
        """Redraw the live line, or log it when LOG_EVERY seconds have passed."""
        if self.enabled:
            sys.stderr.write("\r\x1b[2K" + self.line())
            sys.stderr.flush()
        elif self.logged and time.monotonic() - self.last_logged >= self.LOG_EVERY:
            self.last_logged = time.monotonic()
            log.info("progress: %s", self.line())

    def summary(self) -> None:
        """One final line: what the crawl did."""
        g = self.source.gauges()
        stats = g.stats
        if self.enabled:
            sys.stderr.write("\r\x1b[2K")
        elapsed = time.monotonic() - stats.started
        kinds = ", ".join(f"{k} {v}" for k, v in stats.outcomes.items() if v)
        text = (
            f"{'stopped' if g.stopping else 'done'} after {elapsed:.1f} s: "
            f"{counted(stats.pages, 'page')} ({stats.pages / max(elapsed, 1e-9):.1f}/s), "
            f"{human_bytes(stats.bytes)}, {counted(stats.urls_seen, 'URL')} seen, "
            f"{counted(g.sites_known, 'site')}; outcomes: {kinds or 'none'}"
        )
        if logs_are_json():  # stderr and logFile carry JSON lines only
            log.info("%s", text)
            return
        sys.stderr.write(f"larbinpy: {text}\n")
        if logs_to_file():  # the log file tells the whole story, its end included
            log.info("%s", text)
