"""What survives a restart: the files in `stateDir` and the checkpoint that writes them.

Layout:
- `meta.json`: the settings that give the state its meaning (hash set size and functions);
  a resume with different ones is refused.
- `seen.bitmap` (and `contents.bitmap` with noDup): the hash set, memory-mapped, always current.
- `checkpoint`: every job not yet fetched (FIFOs, site queues, fetches in flight) at the
  last checkpoint, one line each, with a header naming the journal that follows it and a
  trailer with the line count and a CRC, written to a temporary file and renamed.
- `journal.N`: every job accepted since checkpoint N was taken, appended before its URL is
  marked seen (see Input._queue), so a `kill -9` loses nothing: restart = checkpoint +
  journals. Jobs fetched since the last checkpoint are fetched again: that is the bound.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from .records import Job

FORMAT = 1


class StateError(Exception):
    """State in stateDir that cannot be used (the message says why)."""


def _line(job: Job) -> str:
    """A job as one text line: priority, depth, hops, URL."""
    return f"{job.priority}\t{job.depth}\t{job.hops}\t{job.url}\n"


def _job(line: str) -> Job | None:
    """Parse one job line; None for a torn or malformed line."""
    parts = line.rstrip("\n").split("\t", 3)
    if len(parts) != 4 or not line.endswith("\n"):
        return None
    try:
        return Job(parts[3], int(parts[1]), int(parts[0]), int(parts[2]))
    except ValueError:
        return None


class StateDir:
    """The files of one crawl's state."""

    def __init__(self, path: str, meta: dict[str, object], scratch: bool) -> None:
        self.root = Path(path)
        self.root.mkdir(parents=True, exist_ok=True)
        if scratch:
            self._wipe()
        self._check_meta(meta)
        self.seq = 0  # number of the journal being written
        self._journal_fd: int | None = None

    def _wipe(self) -> None:
        """--scratch: forget everything saved."""
        for p in self.root.iterdir():
            if p.name == "meta.json" or p.name.startswith(("journal.", "checkpoint")) or (
                p.suffix == ".bitmap"
            ):
                p.unlink()

    def _check_meta(self, meta: dict[str, object]) -> None:
        """Refuse state made with settings that would change its meaning."""
        path = self.root / "meta.json"
        if path.exists():
            try:
                saved = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise StateError(f"{path} is unreadable ({exc}); use --scratch") from None
            for key, value in meta.items():
                if saved.get(key) != value:
                    raise StateError(
                        f"{path}: state was made with {key} {saved.get(key)}, the configuration "
                        f"says {value}; restore the old value or start again with --scratch"
                    )
        else:
            path.write_text(json.dumps({"format": FORMAT, **meta}))

    def bitmap_path(self, name: str) -> Path:
        """Path of a bitmap file (seen, contents)."""
        return self.root / f"{name}.bitmap"

    # --- restart ---

    def load(self) -> list[Job]:
        """Jobs to resume: the last checkpoint plus every journal written after it."""
        jobs, seq = self._read_checkpoint()
        for n in sorted(self._journals()):
            if n >= seq:
                jobs.extend(self._read_journal(n))
        self.seq = max([seq, *self._journals()], default=seq) + 1
        return jobs

    def _journals(self) -> list[int]:
        """Numbers of the journal files present."""
        return [int(p.suffix[1:]) for p in self.root.glob("journal.*") if p.suffix[1:].isdigit()]

    def _read_checkpoint(self) -> tuple[list[Job], int]:
        """The checkpoint's jobs and the first journal after it ([] and 0 if none)."""
        path = self.root / "checkpoint"
        if not path.exists():
            return [], 0
        lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines(True)
        if len(lines) < 2 or not lines[0].startswith("larbinpy-checkpoint "):
            raise StateError(f"{path} is truncated or not a checkpoint; use --scratch")
        header, body, trailer = lines[0], lines[1:-1], lines[-1]
        crc = zlib.crc32("".join(body).encode("utf-8", "surrogateescape"))
        if trailer != f"end {len(body)} {crc}\n":
            raise StateError(f"{path} is corrupt (count or checksum mismatch); use --scratch")
        jobs = [j for j in map(_job, body) if j is not None]
        if len(jobs) != len(body):
            raise StateError(f"{path} has malformed lines; use --scratch")
        return jobs, int(header.split("journal=")[1])

    def _read_journal(self, n: int) -> list[Job]:
        """The whole lines of journal n (a torn last line from a crash is skipped)."""
        text = (self.root / f"journal.{n}").read_text(encoding="utf-8", errors="surrogateescape")
        return [j for j in map(_job, text.splitlines(True)) if j is not None]

    # --- while crawling ---

    def open_journal(self) -> None:
        """Start appending to journal `seq`."""
        path = self.root / f"journal.{self.seq}"
        self._journal_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def journal(self, jobs: list[Job]) -> None:
        """Append accepted jobs; one write() per batch, so a kill -9 keeps them (no fsync)."""
        assert self._journal_fd is not None
        os.write(self._journal_fd, "".join(map(_line, jobs)).encode("utf-8", "surrogateescape"))

    def checkpoint(self, pending: Iterable[Job]) -> None:
        """Save every pending job, then drop the journals the checkpoint now covers."""
        # Order matters: the new journal opens before the snapshot is taken, so a job
        # accepted after this point is in the new journal, and one accepted before is in
        # the snapshot or in an older journal that is only deleted once the rename is done.
        old_fd, old_seq = self._journal_fd, self.seq
        self.seq += 1
        self.open_journal()
        body = "".join(map(_line, pending)).encode("utf-8", "surrogateescape")
        crc, count = zlib.crc32(body), body.count(b"\n")
        tmp = self.root / "checkpoint.tmp"
        with open(tmp, "wb") as f:
            f.write(f"larbinpy-checkpoint {FORMAT} journal={self.seq}\n".encode())
            f.write(body)
            f.write(f"end {count} {crc}\n".encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.root / "checkpoint")
        _fsync_dir(self.root)
        if old_fd is not None:
            os.close(old_fd)
        for n in self._journals():
            if n <= old_seq:
                (self.root / f"journal.{n}").unlink(missing_ok=True)

    def close(self) -> None:
        """Close the journal."""
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None


def _fsync_dir(path: Path) -> None:
    """Make a rename durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
