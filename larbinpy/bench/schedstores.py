"""Stores `larbinpy bench --schedule N --store ...` can drive, and their kill -9 check.

`ours` is `frontier.schedule.Schedule`. `sqlite` (`SqliteSchedule`, bench-only) is the same
API on one SQLite table, to measure our storage engine against the obvious one: a table of
the Visit's fields keyed by URL (WITHOUT ROWID: the row lives in the URL's b-tree, no second
key), an index on (popped, due), WAL, synchronous=NORMAL, a 64 MiB page cache (ours maps at
most 64 MB of its index). As ours, puts are held in memory until `flush()`, which writes them
in one transaction; `pop_due` reads by due order and marks the rows popped in its own
transaction; `put` clears the mark. The crash contract is ours: a kill -9 keeps every flushed
put, and what was popped and not put again comes back (opening clears every mark, so no
position is needed: `position()` returns a constant).

`kill9_recovery` runs a child process that pops and puts again on a store, kills it with
SIGKILL mid-run, reopens the store and checks that exactly the pages in flight come back
(`python -m larbinpy.bench.schedstores child ...` is that child).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from larbinpy.frontier.schedule import BUFFER_RECORDS, Position, Schedule, Visit

STORES = ("ours", "sqlite")
GRANULARITY = 60.0
CACHE_BYTES = 64 << 20
RECRAWL_MIN, RECRAWL_MAX = 3600.0, 30 * 86400.0
POP_BATCH = 1000
IN_FLIGHT = 4  # batches the kill -9 child holds popped and not put again (being fetched)

_COLUMNS = ("url, due, fetched, captured, etag, lm, digest, status, depth, priority, tag, "
            "stats")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS visits (
    url TEXT PRIMARY KEY NOT NULL,
    popped INTEGER NOT NULL,  -- 1: handed out by pop_due, not put again since
    due INTEGER NOT NULL,  -- times in ms: 6-byte integers where a REAL takes 8
    fetched INTEGER NOT NULL,
    captured INTEGER NOT NULL,
    etag TEXT,
    lm TEXT,
    digest BLOB NOT NULL,
    status INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    tag INTEGER NOT NULL,
    stats BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS visits_due ON visits (popped, due);
"""


class Store(Protocol):
    """What the bench calls on a schedule store."""

    def put_many(self, visits: Iterable[Visit]) -> None:
        """Store (or replace) pages; written at flush()."""

    def flush(self) -> None:
        """Write every pending put: from here a kill -9 keeps them."""

    def pop_due(self, now: float, limit: int) -> list[Visit]:
        """Up to `limit` pages due by `now`, earliest first."""

    def get(self, url: str) -> Visit | None:
        """The page's current history."""

    def position(self) -> Position:
        """Where a restart reads from."""

    def sync(self) -> None:
        """Flush and make everything survive a power loss."""

    def release(self, position: Position) -> None:
        """Delete what a restart from `position` no longer reads."""

    def close(self) -> None:
        """Flush and close."""

    def __len__(self) -> int:
        """Pages scheduled."""


def _ms(t: float) -> int:
    """A time in whole milliseconds (as ours keeps them)."""
    return round(t * 1000.0)


def _row(v: Visit) -> tuple[Any, ...]:
    """A Visit as the table's columns (popped cleared)."""
    return (v.url, _ms(v.due), _ms(v.fetched_at), _ms(v.captured_at), v.etag, v.last_modified,
            v.digest, v.status, v.depth, v.priority, v.tag, v.stats)


def _visit(row: tuple[Any, ...]) -> Visit:
    """A Visit from the table's columns (in _COLUMNS order)."""
    (url, due, fetched, captured, etag, lm, digest, status, depth, prio, tag, stats) = row
    return Visit(url, due / 1000, fetched / 1000, etag, lm, bytes(digest), captured / 1000,
                 status, depth, prio, tag, bytes(stats))


class SqliteSchedule:
    """The schedule's API on one SQLite table with an index on the due time (bench only)."""

    def __init__(self, directory: Path, saved: Position | None = None, *,
                 cache: int = CACHE_BYTES, buffer_records: int = BUFFER_RECORDS) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        # isolation_level None: transactions are the explicit BEGIN/COMMIT below, one a flush.
        self.db = sqlite3.connect(self.dir / "schedule.sqlite", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(f"PRAGMA cache_size=-{cache // 1024}")  # negative: KiB
        self.db.executescript(_SCHEMA)
        # Pages handed out before a kill and not put again: they come back (the index's
        # (popped, due) order finds them without a scan).
        self.db.execute("UPDATE visits SET popped = 0 WHERE popped = 1")
        self._pending: dict[str, Visit] = {}  # puts not yet written, the latest per page
        self._pending_min_due = float("inf")
        self._buffer_max = buffer_records

    def __len__(self) -> int:
        """Pages scheduled (a count over the table: not on any timed path)."""
        self.flush()
        (n,) = self.db.execute("SELECT count(*) FROM visits").fetchone()
        return int(n)

    def put(self, visit: Visit) -> None:
        """Store (or replace) a page's history and due time; written at flush()."""
        self._pending[visit.url] = visit
        self._pending_min_due = min(self._pending_min_due, visit.due)
        if len(self._pending) >= self._buffer_max:
            self.flush()

    def put_many(self, visits: Iterable[Visit]) -> None:
        """`put` each."""
        for v in visits:
            self.put(v)

    def flush(self) -> None:
        """Write every pending put in one transaction (a put clears the popped mark)."""
        if not self._pending:
            return
        self.db.execute("BEGIN")
        self.db.executemany(f"INSERT OR REPLACE INTO visits (popped, {_COLUMNS}) VALUES "
                            "(0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            map(_row, self._pending.values()))
        self.db.execute("COMMIT")
        self._pending.clear()
        self._pending_min_due = float("inf")

    def pop_due(self, now: float, limit: int) -> list[Visit]:
        """Up to `limit` pages due by `now`, earliest first, marked popped (one transaction)."""
        now_ms = int(now * 1000)
        if self._pending_min_due * 1000 <= now_ms:  # a pending put is due: it must be seen
            self.flush()
        self.db.execute("BEGIN")
        rows = self.db.execute(f"SELECT {_COLUMNS} FROM visits WHERE popped = 0 AND due <= ? "
                               "ORDER BY due LIMIT ?", (now_ms, limit)).fetchall()
        self.db.executemany("UPDATE visits SET popped = 1 WHERE url = ?",
                            ((r[0],) for r in rows))
        self.db.execute("COMMIT")
        # A row whose page has a pending put is stale (the put replaces it at the flush, due
        # later): marked, not handed out.
        return [_visit(r) for r in rows if r[0] not in self._pending]

    def get(self, url: str) -> Visit | None:
        """The page's current history (None if it is not scheduled)."""
        visit = self._pending.get(url)
        if visit is not None:
            return visit
        row = self.db.execute(f"SELECT {_COLUMNS} FROM visits WHERE url = ?",
                              (url,)).fetchone()
        return None if row is None else _visit(row)

    def drop(self, url: str) -> bool:
        """Forget a page (popped or not); False if it was not scheduled."""
        pending = self._pending.pop(url, None)
        gone = self.db.execute("DELETE FROM visits WHERE url = ?", (url,)).rowcount
        return bool(gone) or pending is not None

    def force(self, url: str, now: float) -> bool:
        """Make a page due now; False if it is not scheduled."""
        visit = self.get(url)
        if visit is None:
            return False
        self.put(replace(visit, due=min(visit.due, now)))
        return True

    def position(self) -> Position:
        """A constant: the popped marks are in the table, and opening clears them."""
        self.flush()
        return (0, 0, 0)

    def sync(self) -> None:
        """Flush, then checkpoint the WAL into the database with fsyncs (power loss)."""
        self.flush()
        self.db.execute("PRAGMA wal_checkpoint(FULL)")

    def release(self, position: Position) -> None:
        """Nothing to delete: SQLite reuses the pages of replaced rows."""

    def close(self) -> None:
        """Flush and close."""
        self.flush()
        self.db.close()


def open_store(store: str, directory: Path, saved: Position | None = None) -> Store:
    """The store named `store` (one of STORES) in `directory`, reopened at `saved`."""
    if store == "ours":
        return Schedule(directory, saved, granularity=GRANULARITY, cache=CACHE_BYTES)
    if store == "sqlite":
        return SqliteSchedule(directory, saved)
    raise ValueError(f"unknown schedule store {store!r}: one of {', '.join(STORES)}")


# --- kill -9 in mid-run, then reopen ---


def child(store: str, directory: Path, log: Path, clock: float, step: float,
          checkpoint_every: int, seed: int) -> None:
    """Pop and put again until killed, on a simulated clock from `clock`, with IN_FLIGHT
    batches popped and not yet put again (a crawler's pages being fetched). The log says what
    happened: `P i clock [urls]` once batch i is popped, `S i` before its puts, `F i` once
    they are flushed (from there they are kept); the checkpoint file holds the last durable
    position."""
    ckpt = directory.parent / f"{directory.name}.ckpt"
    saved = json.loads(ckpt.read_text()) if ckpt.exists() else None
    s = open_store(store, directory, None if saved is None else tuple(saved))
    rng = random.Random(seed)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    since, batch = 0, 0
    flying: list[tuple[int, list[Visit]]] = []
    while True:
        got = s.pop_due(clock, POP_BATCH)
        if not got:
            clock += step
            continue
        batch += 1
        os.write(fd, f"P {batch} {clock} {json.dumps([v.url for v in got])}\n".encode())
        flying.append((batch, got))
        if len(flying) <= IN_FLIGHT:
            continue
        i, done = flying.pop(0)
        os.write(fd, f"S {i}\n".encode())
        for v in done:  # fetched: put again after its next interval
            v.fetched_at = v.captured_at = clock
            v.due = clock + rng.uniform(RECRAWL_MIN, RECRAWL_MAX)
        s.put_many(done)
        s.flush()
        os.write(fd, f"F {i}\n".encode())
        since += len(done)
        if since >= checkpoint_every:  # as the crawler: position, sync, saved, release
            since = 0
            pos = s.position()
            s.sync()
            tmp = ckpt.with_suffix(".tmp")
            tmp.write_text(json.dumps(pos))
            os.replace(tmp, ckpt)
            s.release(pos)


def kill9_recovery(store: str, directory: Path, clock: float, position: Position,
                   step: float, seconds: float, checkpoint_every: int = 100_000,
                   seed: int = 41) -> dict[str, Any]:
    """Run `child` on the store (closed, checkpointed at `position`), SIGKILL it after about
    `seconds`, reopen the store and pop what is due at the kill's clock: the reopen's time,
    pages in flight at the kill and how many of them came back, pages put (flushed) before
    the kill that came back anyway (should be 0), pages lost (should be 0)."""
    ckpt = directory.parent / f"{directory.name}.ckpt"
    ckpt.write_text(json.dumps(position))
    log = directory.parent / f"{directory.name}.kill9.log"
    log.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "larbinpy.bench.schedstores", "child", store,
                             str(directory), str(log), repr(clock), repr(step),
                             str(checkpoint_every), str(seed)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + seconds
    # Killed once it has flushed a batch (it has reached its loop) and `seconds` have passed,
    # at a random moment within its next 100 ms: anywhere in a pop, a put or a flush.
    while time.monotonic() < deadline or not (log.exists() and b"\nF " in log.read_bytes()):
        if proc.poll() is not None:
            raise RuntimeError(f"the kill -9 child ended first: {proc.stderr.read()!r}"
                               if proc.stderr else "the kill -9 child ended first")
        time.sleep(0.02)
    time.sleep(random.Random(seed).uniform(0.0, 0.1))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.stderr:
        proc.stderr.close()
    popped: dict[int, tuple[float, set[str]]] = {}  # batch -> its clock, its pages
    # url -> clock of its pop: put again (due an hour or more later) and flushed, so it must
    # not come back as it was (due by then), only as put again if that is due by the kill
    flushed: dict[str, float] = {}
    maybe: tuple[float, set[str]] = (clock, set())  # being put when killed: either is right
    kill_clock, batches = clock, 0
    for line in log.read_bytes().split(b"\n")[:-1]:  # a torn last line is left out
        word, i, *rest = line.decode().split(" ", 3)
        if word == "P":
            kill_clock, batches = float(rest[0]), batches + 1
            popped[int(i)] = (float(rest[0]), set(json.loads(rest[1])))
        elif word == "S":
            maybe = popped.pop(int(i))
        elif word == "F":
            flushed.update(dict.fromkeys(maybe[1], maybe[0]))
            maybe = (clock, set())
    in_flight = set().union(*(urls for _, urls in popped.values()))  # must come back
    t = time.perf_counter()
    saved = json.loads(ckpt.read_text())
    s = open_store(store, directory, tuple(saved))
    open_s = time.perf_counter() - t
    t = time.perf_counter()
    back: dict[str, float] = {}  # url -> due
    first_pop_s = 0.0
    while True:
        got = s.pop_due(kill_clock, POP_BATCH)
        if not back:
            first_pop_s = time.perf_counter() - t
        if not got:
            break
        back.update((v.url, v.due) for v in got)
    lost = sum(1 for url in sorted({*flushed, *in_flight, *maybe[1]})[:2000]
               if s.get(url) is None)
    old_back = sum(1 for url, popped_at in flushed.items() if back.get(url, 1e18) <= popped_at)
    s.close()
    return {
        "store": store, "killed_after_batches": batches, "reopen_s": round(open_s, 3),
        "first_pop_s": round(first_pop_s, 3), "in_flight": len(in_flight),
        "in_flight_back": len(in_flight & back.keys()), "last_batch_unsure": len(maybe[1]),
        "flushed_back_as_before": old_back,
        "flushed_due_again_back": len(flushed.keys() & back.keys()) - old_back,
        "due_not_yet_popped_back": len(back.keys() - in_flight - maybe[1] - flushed.keys()),
        "lost_of_2000_checked": lost,
        "exact": in_flight <= back.keys() and not old_back and lost == 0,
    }


def main(argv: list[str]) -> None:
    """`python -m larbinpy.bench.schedstores child STORE DIR LOG CLOCK STEP EVERY SEED`."""
    if len(argv) != 8 or argv[0] != "child":
        raise SystemExit(main.__doc__)
    child(argv[1], Path(argv[2]), Path(argv[3]), float(argv[4]), float(argv[5]), int(argv[6]),
          int(argv[7]))


if __name__ == "__main__":
    main(sys.argv[1:])
