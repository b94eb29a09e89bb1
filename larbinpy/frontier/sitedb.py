"""What a site's record must not forget when the site table lets it go: the site records on
disk (`stateDir/sites.sqlite`, one row a site, written once a loop turn: `turndb.py`).

The site table (`sites.py`) keeps in memory the sites it is working on and a bounded number of
idle ones; a site it forgets, or that a `kill -9` took from memory, comes back with its row:
- `ready_at`: its politeness clock, as a wall-clock time (so it means the same after a
  restart): no fetch of it before, whoever forgot it;
- `backoffs`: 429/503 answers in a row, the exponent of its next back-off;
- `pages`: page fetches started, what `maxPagesPerSite` counts over the whole crawl;
- `addrs`, `dns_expires`: its DNS answer and when its TTL ends (wall clock), so a site brought
  back within it (after the DNS stage's bounded cache forgot its host, or after a restart)
  asks no DNS again. The answer rides on a row written for the fields above, never a write of
  its own: a site whose row says nothing more than a new site's (no clock to wait for, no
  page limit) is asked again, which costs a query, not a disk write for every site resolved.

Its robots.txt verdict has its own store (`robotsdb.py`), its queued URLs theirs (the priority
FIFOs, `diskqueue.SiteSpill`); a dead site's negative cache (minutes) is not kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from larbinpy.frontier.turndb import TurnTable, transaction
from larbinpy.turn import TurnEnd

SCHEMA = """
CREATE TABLE IF NOT EXISTS sites (site TEXT PRIMARY KEY, ready_at REAL NOT NULL,
    backoffs INTEGER NOT NULL, pages INTEGER NOT NULL) WITHOUT ROWID
"""
# added since the first version: (column, declaration), added to an older database on open
COLUMNS_ADDED = (("addrs", "TEXT NOT NULL DEFAULT ''"),
                 ("dns_expires", "REAL NOT NULL DEFAULT 0"))


@dataclass(frozen=True, slots=True)
class SiteRecord:
    """A site's row: its clock on the wall clock (`time.time()`), back-offs and pages, and its
    DNS answer (addresses; the end of its TTL on the wall clock; none: ())."""

    ready_at: float
    backoffs: int
    pages: int
    addrs: tuple[str, ...] = ()
    dns_expires: float = 0.0


class SiteRecords(TurnTable[SiteRecord]):
    """The rows of `stateDir/sites.sqlite` (see the module docstring)."""

    def __init__(self, path: Path, turn: TurnEnd | None = None) -> None:
        self.path = path
        super().__init__(path, SCHEMA, turn)
        have = {row[1] for row in self._db.execute("PRAGMA table_info(sites)")}
        for column, declaration in COLUMNS_ADDED:
            if column not in have:
                self._db.execute(f"ALTER TABLE sites ADD COLUMN {column} {declaration}")

    def get(self, key: str) -> SiteRecord | None:
        """The site's last record (this turn's, if it changed in it); None: never recorded."""
        record = self._batch.pending.get(key)
        if record is not None:
            return record
        row = self._db.execute("SELECT ready_at, backoffs, pages, addrs, dns_expires FROM sites"
                               " WHERE site = ?", (key,)).fetchone()
        if row is None:
            return None
        return SiteRecord(row[0], row[1], row[2], tuple(row[3].split()), row[4])

    def put(self, key: str, record: SiteRecord) -> None:
        """The site's state changed: its row is written at the end of this loop turn."""
        self._batch.put(key, record)

    def _write(self, records: dict[str, SiteRecord]) -> None:
        """A turn's records in one transaction: after it they survive a kill."""
        rows = [(k, r.ready_at, r.backoffs, r.pages, " ".join(r.addrs), r.dns_expires)
                for k, r in records.items()]
        with transaction(self._db):
            self._db.executemany("INSERT OR REPLACE INTO sites (site, ready_at, backoffs, pages,"
                                 " addrs, dns_expires) VALUES (?, ?, ?, ?, ?, ?)", rows)

    def __len__(self) -> int:
        """Sites recorded."""
        self._batch.flush()
        count: int = self._db.execute("SELECT count(*) FROM sites").fetchone()[0]
        return count

