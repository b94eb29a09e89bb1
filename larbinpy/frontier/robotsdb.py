"""robots.txt verdicts that outlive the process: the robots stage's verdict store.

A verdict is what the robots stage learned of a site: the robots.txt body to obey (or none:
allow all), the failures in a row of its fetch (5xx, 429, unreachable), and whether those
failures became a standing "complete disallow" (retries exhausted); it holds until `expires`,
a wall-clock time (`time.time()`), so it means the same after a restart.

`VerdictStore` is the seam the robots stage is given in `Crawler.__init__`:
- `FileVerdicts` (the embedded crawl): `stateDir/robots.jsonl`, one JSON line per verdict
  learned, appended and flushed once per event-loop turn (a `kill -9` loses at most the turn
  in progress; no fsync on the hot path), compacted at checkpoints (only the last, unexpired
  verdict of each site is kept, so the file stays bounded by the sites of one `robotsTtl`),
  read back at start.
- a cluster node's store (`cluster/robots_shared.py`) puts Redis in front of it, so a site
  handed to another node takes its verdict along.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

COMPACT_SLACK = 1000  # lines a file may carry beyond twice its live verdicts before compaction


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


class VerdictStore(Protocol):
    """Where the robots stage keeps and finds verdicts."""

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

    def compact(self) -> None:
        """Checkpoint: make what was put durable and drop expired verdicts."""
        ...

    def close(self) -> None:
        """Release files and connections."""
        ...


class FileVerdicts:
    """Verdicts in one append-only JSON-lines file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.known: dict[str, Verdict] = {}
        self.lines = 0  # lines in the file, live or not
        self._file: IO[str] | None = None
        self._flush_planned = False
        self._load()
        if path.exists() and not line_ends_cleanly(path):
            self._rewrite()  # a torn last line (a kill mid-write): appends must not glue on
        else:
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)

    def _load(self) -> None:
        """Read the file: the last line of each site wins; expired verdicts are skipped."""
        if not self.path.exists():
            return
        now = time.time()
        with open(self.path, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                self.lines += 1
                decoded = Verdict.decode(line)
                if decoded is not None:
                    self.known[decoded[0]] = decoded[1]
        self.known = {k: v for k, v in self.known.items() if v.expires > now}

    def get(self, key: str) -> Verdict | None:
        """The site's verdict if it has not expired."""
        verdict = self.known.get(key)
        if verdict is None:
            return None
        if verdict.expires <= time.time():
            del self.known[key]
            return None
        return verdict

    async def lookup(self, key: str) -> Verdict | None:
        """As `get` (everything is in memory)."""
        return self.get(key)

    def put(self, key: str, verdict: Verdict) -> None:
        """Remember it; the line reaches the file at the end of this loop turn."""
        self.known[key] = verdict
        assert self._file is not None
        self._file.write(verdict.encode(key))
        self.lines += 1
        if not self._flush_planned:
            self._flush_planned = True
            try:
                asyncio.get_running_loop().call_soon(self._flush)
            except RuntimeError:  # no loop (a tool, a test): now
                self._flush()

    def _flush(self) -> None:
        """Hand the turn's lines to the kernel: they survive a kill of the process."""
        self._flush_planned = False
        if self._file is not None and not self._file.closed:
            self._file.flush()

    def compact(self) -> None:
        """Flush and fsync; rewrite without expired or superseded lines when they dominate."""
        now = time.time()
        self.known = {k: v for k, v in self.known.items() if v.expires > now}
        if self.lines > 2 * len(self.known) + COMPACT_SLACK:
            self._rewrite()
        elif self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def _rewrite(self) -> None:
        """Replace the file by the live verdicts (temporary file, fsync, rename)."""
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(v.encode(k) for k, v in self.known.items())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self._file is not None:
            self._file.close()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        self.lines = len(self.known)

    def close(self) -> None:
        """Flush and close the file."""
        if self._file is not None and not self._file.closed:
            self._file.flush()
            self._file.close()


def line_ends_cleanly(path: Path) -> bool:
    """Is the file empty or ending with a newline?"""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return True
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
