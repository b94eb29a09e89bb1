"""What a site's record must not forget when the site table lets it go: the site records on
disk (`stateDir/sites.sqlite`, one row a site, written once a loop turn: `turndb.py`).

The site table (`sites.py`) keeps in memory the sites it is working on and a bounded number of
idle ones; a site it forgets, or that a `kill -9` took from memory, comes back with its row:
- `ready_at`: its politeness clock, as a wall-clock time (so it means the same after a
  restart): no fetch of it before, whoever forgot it;
- `backoffs`: 429/503 answers in a row, the exponent of its next back-off;
- `pages`: page fetches started, what `maxPagesPerSite` counts over the whole crawl.

Its robots.txt verdict has its own store (`robotsdb.py`), its queued URLs theirs (the priority
FIFOs, `diskqueue.SiteSpill`); its DNS answer is asked again (the DNS stage's cache may still
hold it), and so is a dead site's negative cache, which lasts minutes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from larbinpy.frontier.turndb import TurnBatch, open_db, sync, transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS sites (site TEXT PRIMARY KEY, ready_at REAL NOT NULL,
    backoffs INTEGER NOT NULL, pages INTEGER NOT NULL) WITHOUT ROWID
"""


@dataclass(frozen=True, slots=True)
class SiteRecord:
    """A site's row: its clock on the wall clock (`time.time()`), back-offs and pages."""

    ready_at: float
    backoffs: int
    pages: int


def loop_now() -> float:
    """The loop's clock (without a running loop, a tool's or a test's: the monotonic one)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def loop_to_wall() -> float:
    """What to add to the loop's clock to get the wall clock's."""
    return time.time() - loop_now()


class SiteRecords:
    """The rows of `stateDir/sites.sqlite` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = open_db(path, SCHEMA)
        self._batch: TurnBatch[SiteRecord] = TurnBatch(self._write)

    def get(self, key: str) -> SiteRecord | None:
        """The site's last record (this turn's, if it changed in it); None: never recorded."""
        record = self._batch.pending.get(key)
        if record is not None:
            return record
        row = self._db.execute("SELECT ready_at, backoffs, pages FROM sites WHERE site = ?",
                               (key,)).fetchone()
        return None if row is None else SiteRecord(*row)

    def put(self, key: str, record: SiteRecord) -> None:
        """The site's state changed: its row is written at the end of this loop turn."""
        self._batch.put(key, record)

    def _write(self, records: dict[str, SiteRecord]) -> None:
        """A turn's records in one transaction: after it they survive a kill."""
        rows = [(k, r.ready_at, r.backoffs, r.pages) for k, r in records.items()]
        with transaction(self._db):
            self._db.executemany("INSERT OR REPLACE INTO sites VALUES (?, ?, ?, ?)", rows)

    def __len__(self) -> int:
        """Sites recorded."""
        self._batch.flush()
        count: int = self._db.execute("SELECT count(*) FROM sites").fetchone()[0]
        return count

    def sync(self) -> None:
        """Checkpoint: written and durable against power loss."""
        self._batch.flush()
        sync(self._db)

    def close(self) -> None:
        """Write what is pending and close the database."""
        try:
            self._batch.flush()
        finally:
            self._db.close()
