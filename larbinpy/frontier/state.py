"""What survives a restart: the files in `stateDir` and the checkpoint that ties them together.

Layout:
- `lock`: held (flock) by the one process using the state, with its pid in it; a second process
  on the same state refuses to start, naming that pid, before it touches anything else.
- `done`: the URLs that reached their final outcome since the last checkpoint
  (`crawllog.CrawlLog`): a restart after a `kill -9` does not fetch them again.
- `meta.json`: the settings that give the state its meaning (hash set size and functions);
  a resume with different ones is refused.
- `seen.bitmap` (and `contents.bitmap` with noDup): the hash set, memory-mapped, always current.
- `frontier/`: the priority FIFOs (`diskqueue.DiskFrontier`), append-only segment files. A job
  is pushed and flushed there *before* its URL is marked seen, so these files are also the
  journal of everything accepted.
- `spill/`: per-site queues beyond the in-memory window (`diskqueue.SiteSpill`).
- `schedule/`: with `recrawl on`, every fetched page's history and next due time
  (`schedule.Schedule`); its read position is in the checkpoint.
- `robots.sqlite`: the robots.txt verdicts learned (`robotsdb.FileVerdicts`), one row a site,
  written at the end of the loop turn that learned them, expired rows deleted at checkpoints.
- `sites.sqlite`: what a site's record must not forget when memory lets it go, one row a site
  (`sitedb.SiteRecords`: its politeness clock, back-off and page count), written at the end of
  the loop turn that changed it.
- `checkpoint`: the URLs seen so far (a count, for the figures), the read cursors of the
  FIFOs and spill files at the last checkpoint, plus the jobs that were in memory then (site
  windows, fetches in flight), with a line count and a CRC; written to a temporary file,
  fsynced, renamed. One found cut short (no trailer: the disk lost its end) is repaired on load
  with what it still holds, and logged.

After a `kill -9`, a restart reopens the FIFOs and spill files at the checkpoint's cursors and
re-queues its jobs: everything accepted is there; of the jobs finished since the checkpoint,
those `done` names are skipped, so what is fetched again is what was in flight at the kill.
Files wholly before a cursor are deleted only once a checkpoint naming a later cursor is durable.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from larbinpy.frontier.joblines import decode_job, encode_jobs
from larbinpy.records import Job

FORMAT = 2
CHECKPOINT_BATCH = 4096  # jobs encoded at a time when writing a checkpoint
Position = tuple[int, int]
_TRAILER = re.compile(r"end [0-9]+ [0-9]+\n")

log = logging.getLogger("larbinpy.state")


class StateError(Exception):
    """State in stateDir that cannot be used (the message says why)."""


@dataclass
class Saved:
    """What the last checkpoint said."""

    frontier: dict[int, Position] = field(default_factory=dict)
    spill: dict[str, Position] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    urls_seen: int = 0  # URLs accepted by the seen-set up to this checkpoint
    fresh: bool = True  # no checkpoint at all: a new crawl
    schedule: object = None  # recrawl: the schedule's position (`schedule.Schedule.position`)


def _saved(cursors: dict[str, Any], jobs: list[Job]) -> Saved:
    """A Saved from a checkpoint's cursor object and jobs."""
    return Saved(
        {int(p): tuple(pos) for p, pos in cursors["frontier"].items()},
        {k: tuple(pos) for k, pos in cursors["spill"].items()},
        jobs,
        urls_seen=int(cursors.get("urls_seen", 0)),
        fresh=False,
        schedule=cursors.get("schedule"),
    )


def _job(line: str) -> Job | None:
    """Parse one checkpoint line (a job line, see joblines.py); None for a malformed line."""
    if not line.endswith("\n"):
        return None
    try:
        return decode_job(line[:-1].encode("utf-8", "surrogateescape"))
    except ValueError:
        return None


def saved_meta(path: str) -> dict[str, object]:
    """The settings a state directory was made with (empty when it has none, or unreadable:
    `StateDir` says what is wrong with it)."""
    try:
        saved = json.loads((Path(path) / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


class StateDir:
    """The files of one crawl's state."""

    def __init__(self, path: str, meta: dict[str, object], scratch: bool,
                 keep: tuple[str, ...] = ()) -> None:
        """`scratch`: forget what is saved, but the folders named in `keep` (a cluster node's
        recrawl schedule outlives its local queues)."""
        self.root = Path(path)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._lock()
        if scratch:
            self._wipe(keep)
        self._check_meta(meta)
        self.frontier_dir = self.root / "frontier"
        self.spill_dir = self.root / "spill"
        self.schedule_dir = self.root / "schedule"  # recrawl (frontier/schedule.py)

    def _lock(self) -> int:
        """Take the state's lock for the life of the process (the kernel drops it at exit,
        kill -9 included); StateError naming the holder's pid when another process has it."""
        path = self.root / "lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise StateError(f"{self.root} is in use by another larbinpy (pid {holder}); "
                             "one process per stateDir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def close(self) -> None:
        """Release the lock (another process may then use the state)."""
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = -1

    def done_path(self) -> Path:
        """The done-record: URLs finished since the last checkpoint (crawllog.CrawlLog)."""
        return self.root / "done"

    def _wipe(self, keep: tuple[str, ...] = ()) -> None:
        """--scratch: forget everything saved (but the folders in `keep`)."""
        for p in self.root.iterdir():
            if p.name in ("frontier", "spill", "schedule") and p.is_dir() and p.name not in keep:
                import shutil  # (here: only --scratch removes folders)

                shutil.rmtree(p)
            elif p.name in ("meta.json", "done", "done.tmp") or p.name.startswith(
                    ("journal.", "checkpoint", "robots.", "sites.")) or p.suffix == ".bitmap":
                p.unlink()

    def _check_meta(self, meta: dict[str, object]) -> None:
        """Refuse state made with settings that would change its meaning."""
        path = self.root / "meta.json"
        if not path.exists():
            path.write_text(json.dumps({"format": FORMAT, **meta}))
            return
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise StateError(f"{path} is unreadable ({exc}); use --scratch") from None
        if saved.get("format") != FORMAT:
            raise StateError(f"{path}: state of another larbinpy version; use --scratch")
        for key, value in meta.items():
            if saved.get(key) != value:
                raise StateError(
                    f"{path}: state was made with {key} {saved.get(key)}, the configuration "
                    f"says {value}; restore the old value or start again with --scratch"
                )

    def bitmap_path(self, name: str) -> Path:
        """Path of a bitmap file (seen, contents)."""
        return self.root / f"{name}.bitmap"

    def sites_path(self) -> Path:
        """Path of the site records (politeness clocks, back-offs, page counts)."""
        return self.root / "sites.sqlite"

    def robots_path(self) -> Path:
        """Path of the robots.txt verdicts file."""
        return self.root / "robots.sqlite"

    def load(self) -> Saved:
        """The last checkpoint (an empty Saved when there is none); a torn one is repaired."""
        path = self.root / "checkpoint"
        if not path.exists():
            return Saved()
        lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines(True)
        if lines and lines[0] != f"larbinpy-checkpoint {FORMAT}\n" and lines[0].endswith("\n"):
            raise StateError(f"{path} is not a checkpoint of this version; use --scratch")
        if len(lines) < 3 or not _TRAILER.fullmatch(lines[-1]):
            return self._torn(path, lines)
        body, trailer = lines[1:-1], lines[-1]
        crc = zlib.crc32("".join(body).encode("utf-8", "surrogateescape"))
        if trailer != f"end {len(body)} {crc}\n":
            raise StateError(f"{path} is corrupt (count or checksum mismatch); use --scratch")
        jobs = [j for j in map(_job, body[1:]) if j is not None]
        if len(jobs) != len(body) - 1:
            raise StateError(f"{path} has malformed lines; use --scratch")
        return _saved(json.loads(body[0]), jobs)

    @staticmethod
    def _torn(path: Path, lines: list[str]) -> Saved:
        """A checkpoint cut short (no whole trailer): keep its cursors and whole job lines.

        Without its cursor line the queues are read from their oldest files (jobs done since
        the files were last released are fetched again); jobs cut off are lost, and logged.
        """
        cursors: dict[str, Any] = {"frontier": {}, "spill": {}}  # as JSON has them
        if len(lines) > 1 and lines[1].endswith("\n"):
            with contextlib.suppress(ValueError):
                found = json.loads(lines[1])
                if isinstance(found, dict) and {"frontier", "spill"} <= found.keys():
                    cursors = found
        jobs = []
        for line in lines[2:]:
            job = _job(line)
            if job is None:  # the tear (the rest, if any, is not trusted)
                break
            jobs.append(job)
        log.warning("%s was cut short (%d lines, no trailer): repaired with %s cursors and %d "
                    "jobs; the jobs cut off are lost", path, len(lines),
                    "its" if cursors["frontier"] or cursors["spill"] else "no saved", len(jobs))
        return _saved(cursors, jobs)

    def write_checkpoint(
        self, frontier: dict[int, Position], spill: dict[str, Position], jobs: Iterable[Job],
        urls_seen: int = 0, schedule: object = None,
    ) -> None:
        """Durably replace the checkpoint (temporary file, fsync, rename, fsync the folder);
        `schedule`: recrawl's schedule position (JSON), absent without recrawl."""
        fields: dict[str, object] = {"frontier": frontier, "spill": spill}
        if urls_seen:  # absent means none (and older checkpoints have no count)
            fields["urls_seen"] = urls_seen
        if schedule is not None:
            fields["schedule"] = schedule
        cursors = json.dumps(fields, separators=(",", ":")) + "\n"
        head = cursors.encode("utf-8", "surrogateescape")
        crc, count, jobs = zlib.crc32(head), 1, list(jobs)
        tmp = self.root / "checkpoint.tmp"
        with open(tmp, "wb") as f:
            f.write(f"larbinpy-checkpoint {FORMAT}\n".encode())
            f.write(head)
            # a batch at a time: the text of all the in-memory jobs in one piece would cost
            # several times their own memory, at the crawl's peak
            for i in range(0, len(jobs), CHECKPOINT_BATCH):
                data = encode_jobs(jobs[i:i + CHECKPOINT_BATCH]).encode("utf-8", "surrogateescape")
                crc, count = zlib.crc32(data, crc), count + data.count(b"\n")
                f.write(data)
            f.write(f"end {count} {crc}\n".encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.root / "checkpoint")
        fsync_dir(self.root)


def fsync_dir(path: Path) -> None:
    """Make file creations and renames in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
