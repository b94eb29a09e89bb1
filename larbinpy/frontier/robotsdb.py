"""robots.txt verdicts that outlive the process: the robots stage's verdict store.

A verdict is what the robots stage learned of a site: the robots.txt body to obey (or none:
allow all), the failures in a row of its fetch (5xx, 429, unreachable), and whether those
failures became a standing "complete disallow" (retries exhausted); it holds until `expires`,
a wall-clock time (`time.time()`), so it means the same after a restart.

`VerdictStore` is the seam the robots stage is given in `Crawler.__init__`:
- `FileVerdicts` (the embedded crawl): an SQLite database, `stateDir/robots.sqlite`, one row a
  site (`turndb.py`: written in one transaction at the end of the loop turn that learned them,
  which a `kill -9` cannot tear and loses at most the turn in progress). A broad crawl meets
  millions of sites, so memory holds only a bounded cache of the recent verdicts
  (`CACHE_VERDICTS`); a checkpoint makes them durable against power loss and deletes the
  expired rows. The `robots.jsonl` file of earlier versions is read in once, then removed.
- a cluster node's store (`cluster/robots_shared.py`) puts Redis in front of it, so a site
  handed to another node takes its verdict along.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from larbinpy.frontier.durable import Durable
from larbinpy.frontier.turndb import TurnTable, transaction
from larbinpy.turn import TurnEnd

CACHE_VERDICTS = 4096  # verdicts kept in memory, the most recently used (None: known absent)
IMPORT_BATCH = 10_000  # verdicts a transaction when an old robots.jsonl is read in
SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (site TEXT PRIMARY KEY, expires REAL NOT NULL, body BLOB,
    failures INTEGER NOT NULL, disallow INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS by_expiry ON verdicts (expires)
"""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What is known of a site's robots.txt until `expires` (wall clock)."""

    expires: float
    body: bytes | None = None  # the robots.txt to obey; None: allow all (or disallow, below)
    failures: int = 0  # failed fetches in a row within this verdict's lifetime
    disallow: bool = False  # retries exhausted: complete disallow until `expires`

    def encode(self, key: str) -> str:
        """One JSON line (bytes kept exactly through surrogate escapes)."""
        body = None if self.body is None else self.body.decode("utf-8", "surrogateescape")
        return json.dumps({"site": key, "expires": self.expires, "body": body,
                           "failures": self.failures, "disallow": self.disallow}) + "\n"

    @staticmethod
    def decode(line: str) -> tuple[str, Verdict] | None:
        """(site key, verdict) of one line; None for a torn or malformed line."""
        if not line.endswith("\n"):
            return None  # the last line of a file cut by a kill: ignored
        try:
            d = json.loads(line)
            body = d["body"]
            return d["site"], Verdict(
                float(d["expires"]),
                None if body is None else body.encode("utf-8", "surrogateescape"),
                int(d["failures"]), bool(d["disallow"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


class VerdictStore(Durable, Protocol):
    """Where the robots stage keeps and finds verdicts (a store of the checkpoint: its `sync`
    makes what was put durable and drops expired verdicts)."""

    def get(self, key: str) -> Verdict | None:
        """The site's unexpired verdict known here, without waiting (None: unknown)."""
        ...

    async def lookup(self, key: str) -> Verdict | None:
        """The site's unexpired verdict, asking further afield when that takes a round trip
        (a cluster's Redis); the embedded store answers as `get`."""
        ...

    def put(self, key: str, verdict: Verdict) -> None:
        """Remember a verdict just learned."""
        ...


class FileVerdicts(TurnTable[Verdict]):
    """Verdicts in an SQLite database with a bounded cache in front (see the module docstring).

    Invariant: a verdict `put` in this loop turn is in the turn's batch until its commit, so
    `get` finds it there first; after the commit it is in the database (and maybe the cache).
    """

    def __init__(self, path: Path, turn: TurnEnd | None = None) -> None:
        self.path = path
        self._cache: OrderedDict[str, Verdict | None] = OrderedDict()  # None: known absent
        super().__init__(path, SCHEMA, turn)
        self._import_jsonl(path.with_name("robots.jsonl"))

    def __len__(self) -> int:
        """Verdicts on disk, expired ones not yet deleted included (a checkpoint deletes them)."""
        self._batch.flush()
        count: int = self._db.execute("SELECT count(*) FROM verdicts").fetchone()[0]
        return count

    def get(self, key: str) -> Verdict | None:
        """The site's verdict if it has not expired."""
        verdict = self._batch.pending.get(key)
        if verdict is None:
            if key in self._cache:
                self._cache.move_to_end(key)
                verdict = self._cache[key]
            else:
                verdict = self._read(key)
                self._remember(key, verdict)
        if verdict is None or verdict.expires <= time.time():
            return None
        return verdict

    def _read(self, key: str) -> Verdict | None:
        """The site's row, expired or not; None when there is none."""
        row = self._db.execute("SELECT expires, body, failures, disallow FROM verdicts"
                               " WHERE site = ?", (key,)).fetchone()
        if row is None:
            return None
        return Verdict(row[0], row[1], row[2], bool(row[3]))

    def _remember(self, key: str, verdict: Verdict | None) -> None:
        """Into the cache, forgetting the least recently used beyond CACHE_VERDICTS."""
        self._cache[key] = verdict
        self._cache.move_to_end(key)
        if len(self._cache) > CACHE_VERDICTS:
            self._cache.popitem(last=False)

    async def lookup(self, key: str) -> Verdict | None:
        """As `get` (the disk answers without a round trip)."""
        return self.get(key)

    def put(self, key: str, verdict: Verdict) -> None:
        """Remember it; its row is written at the end of this loop turn."""
        self._cache.pop(key, None)  # the pending verdict supersedes what was cached
        self._batch.put(key, verdict)

    def _write(self, verdicts: dict[str, Verdict]) -> None:
        """A turn's verdicts in one transaction: after it they survive a kill."""
        rows = [(k, v.expires, v.body, v.failures, int(v.disallow)) for k, v in verdicts.items()]
        with transaction(self._db):
            self._db.executemany("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?, ?, ?)", rows)
        for key, verdict in verdicts.items():
            self._remember(key, verdict)

    def sync(self) -> None:
        """Checkpoint: commit, delete the expired rows, and fsync."""
        self._batch.flush()
        now = time.time()
        with transaction(self._db):
            self._db.execute("DELETE FROM verdicts WHERE expires <= ?", (now,))
        self._cache = OrderedDict((k, v) for k, v in self._cache.items()
                                  if v is None or v.expires > now)
        super().sync()

    def _import_jsonl(self, old: Path) -> None:
        """The JSON-lines file of earlier versions: its live verdicts (the last line of each
        site wins; a torn line is skipped) into the database, then the file is removed."""
        if not old.exists():
            return
        now = time.time()
        with open(old, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                decoded = Verdict.decode(line)
                if decoded is not None and decoded[1].expires > now:
                    self._batch.pending[decoded[0]] = decoded[1]
                if len(self._batch.pending) >= IMPORT_BATCH:
                    self._batch.flush()
        self._batch.flush()
        old.unlink()
