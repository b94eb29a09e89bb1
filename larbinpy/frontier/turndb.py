"""SQLite tables in `stateDir` written once a loop turn (`TurnTable`): the robots.txt verdict
store (`robotsdb.py`), the site records (`sitedb.py`) and the sites' recrawl states
(`stages/revisits.py`).

A broad crawl meets millions of sites, so what it must remember of each lives on disk, in an
SQLite database in write-ahead-log mode: a commit is an append to the log without an fsync,
which a `kill -9` cannot tear (the kernel has the bytes; SQLite's recovery keeps whole
transactions only), and a checkpoint (`sync`) fsyncs it into the database against power loss.
The values put during one loop turn wait in memory (`TurnBatch`) and are written in one
transaction in the end of the turn's `TABLES` phase (`turn.py`), so the disk costs one commit
a turn, not one a value. Each table is a store of the checkpoint (`durable.Durable`).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from larbinpy.frontier.durable import Store
from larbinpy.turn import Phase, TurnEnd

DB_CACHE_KIB = 2048  # SQLite's page cache for one database, at most

log = logging.getLogger("larbinpy")

T = TypeVar("T")


def open_db(path: Path, schema: str) -> sqlite3.Connection:
    """The database at `path` in WAL mode (created with `schema`, statements separated by ;)."""
    db = sqlite3.connect(path, isolation_level=None)  # transactions by hand (`transaction`)
    db.execute("PRAGMA journal_mode=WAL")  # a commit appends to the log
    db.execute("PRAGMA synchronous=NORMAL")  # fsync at WAL checkpoints only (`sync`)
    db.execute(f"PRAGMA cache_size=-{DB_CACHE_KIB}")
    for statement in schema.split(";"):
        if statement.strip():
            db.execute(statement)
    return db


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN ... COMMIT, rolled back on an error."""
    db.execute("BEGIN")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def sync(db: sqlite3.Connection) -> None:
    """Durable against power loss: the log fsynced into the database, and emptied."""
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class TurnBatch(Generic[T]):
    """Values put during a loop turn, handed to `write` together at its end (the turn's
    `TABLES` phase; at once without a `turn`: a tool, a test). Invariant: a value put is in
    `pending` until written, a write refused (a full disk) included: it is tried again at the
    next turn's end or `flush`."""

    def __init__(self, write: Callable[[dict[str, T]], None], turn: TurnEnd | None) -> None:
        self.write = write
        self.pending: dict[str, T] = {}
        self.turn = turn
        if turn is not None:
            turn.on(Phase.TABLES, self._turn_end)
        self._refused = False  # the last write failed (said once, until one succeeds)

    def put(self, key: str, value: T) -> None:
        """Write `value` for `key` at the end of this loop turn (the last put of a turn wins)."""
        self.pending[key] = value
        if self.turn is None:
            self.flush()
        else:
            self.turn.due()

    def _turn_end(self) -> None:
        """The end-of-turn flush: a refused write is said, kept, and tried again later."""
        try:
            self.flush()
        except (sqlite3.Error, OSError) as exc:
            if not self._refused:
                log.error("cannot write the state database (%s): its rows wait in memory and "
                          "are written when it can again", exc)
            self._refused = True

    def flush(self) -> None:
        """Write what is pending now; a refused write keeps it pending, and raises."""
        if self.pending:
            pending, self.pending = self.pending, {}
            try:
                self.write(pending)
            except BaseException:
                self.pending = pending  # (`write` puts nothing: nothing newer to merge)
                raise
            if self._refused:
                self._refused = False
                log.warning("the state database can be written again")


class TurnTable(Store, Generic[T]):
    """A table whose rows change many times a turn: `_batch` gathers them, `_write` writes a
    turn's in one transaction (at the end of `turn`'s turns; at each put without one); `sync`
    at a checkpoint, `close` at the end."""

    def __init__(self, path: Path, schema: str, turn: TurnEnd | None = None) -> None:
        self._db = open_db(path, schema)
        self._batch: TurnBatch[T] = TurnBatch(self._write, turn)

    def _write(self, rows: dict[str, T]) -> None:
        """A turn's rows, in one transaction."""
        raise NotImplementedError

    def flush(self) -> None:
        """The rows put so far, committed (to the log: they survive `kill -9`)."""
        self._batch.flush()

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
