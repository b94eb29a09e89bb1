"""The sites' recrawl states on disk (`stateDir/schedule/sites.sqlite`): what a restart, or a
site the site table forgot, must get back of what the recrawl learned of each site.

One row a site, written at the end of the loop turn that changed it (`TurnTable`, like the
site records), fsynced with the checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from larbinpy.frontier.recrawl import SiteRecrawl
from larbinpy.frontier.turndb import TurnTable, transaction
from larbinpy.turn import TurnEnd


class SiteStates(TurnTable[SiteRecrawl]):
    """The sites' recrawl states on disk (`stateDir/schedule/sites.sqlite`, one row a site,
    written at the end of the loop turn that changed them, like the site records): a
    restart keeps each site's multiplier and the validators it proved false."""

    SCHEMA = "CREATE TABLE IF NOT EXISTS recrawl (site TEXT PRIMARY KEY, state BLOB NOT NULL)"

    def __init__(self, path: Path, turn: TurnEnd | None = None) -> None:
        super().__init__(path, self.SCHEMA, turn)

    def get(self, key: str, capacity: float) -> SiteRecrawl | None:
        """The site's state as last put (None: never, or unreadable)."""
        state = self._batch.pending.get(key)
        if state is not None:
            return state
        row = self._db.execute("SELECT state FROM recrawl WHERE site = ?", (key,)).fetchone()
        return None if row is None else SiteRecrawl.from_bytes(bytes(row[0]), capacity)

    def put(self, key: str, state: SiteRecrawl) -> None:
        """The site's state changed: written at the end of this loop turn."""
        self._batch.put(key, state)

    def _write(self, states: dict[str, SiteRecrawl]) -> None:
        """A turn's states in one transaction."""
        with transaction(self._db):
            self._db.executemany("INSERT OR REPLACE INTO recrawl VALUES (?, ?)",
                                 [(k, v.to_bytes()) for k, v in states.items()])
