"""On-disk queues: the priority FIFOs and the per-site overflow, in bounded memory, kill -9 safe.

In the crawler, the input stage pushes accepted URLs into the `DiskFrontier` (one `SegmentFifo`
per priority, in `stateDir/frontier/`), the sequencer pops them, and the site queues keep at most
a few jobs of each site in memory and send the rest to `SiteSpill` (`stateDir/spill/`). Memory
depends on the number of priorities and sites, never on the number of queued URLs.

Crash contract (shared by both classes):
- every file holds whole job lines (`priority\\tdepth\\thops\\turl\\n`, the hops field being
  `hops:tag:kind:retries` for tagged, sitemap or retried jobs: `joblines.py`), only
  ever appended; once `flush()` returns, the bytes are in the kernel, so a `kill -9` keeps them
  (no fsync on the hot path; `sync()` fsyncs, for the checkpoint and power loss);
- a read cursor is `(file number, byte offset of the next job)`: the checkpoint saves cursors
  instead of jobs, and reopening at a saved cursor replays exactly the jobs after it;
- nothing is deleted while a restart could still rewind to it: consumed files go only in
  `release(cursor)`, called with the cursor of the last *durable* checkpoint;
- on open, a torn last line (a write cut by the kill) is truncated away: it was never reported
  flushed. A file cut short anywhere (a disk that filled, a power loss, an operator's copy) is
  repaired the same way: cut back to its last whole line, and what was cut is logged. A
  malformed line in the middle of a file is damage and raises `StateError`, naming file and
  offset, rather than being read as a shorter queue.

Resource contract: a write or open refused by the system (EMFILE, ENFILE, ENOMEM, ENOSPC...)
raises OSError and changes nothing: buffered jobs stay buffered, cursors and counts stay
where they were, and the same call succeeds once the resource is back.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path

import xxhash

from larbinpy.frontier.joblines import decode_job, encode_jobs
from larbinpy.frontier.state import StateError, fsync_dir
from larbinpy.records import Job

SEGMENT_BYTES = 4 << 20  # a FIFO segment is closed past this size ...
SEGMENT_JOBS = 65_536  # ... or this many jobs
BUFFER_BYTES = 64 << 10  # pushed lines held in memory before one write()
READ_BYTES = 64 << 10  # read window: bytes read from the head segment at a time
SCAN_BYTES = 1 << 20  # block size when checking files on open
BATCH = 1024  # jobs encoded at a time by push (bounds memory for generators)
UNSYNCED_MAX = 16  # closed segments waiting for sync() before we fsync them anyway
SPILL_SEGMENT_BYTES = 4 << 20  # a site's spill file is closed past this size
SPILL_BUFFER_BYTES = 1 << 20  # spilled lines held in memory (all sites) before writing
SPILL_FDS = 64  # spill files kept open (LRU)
WARN_EVERY = 10.0  # seconds between two warnings that queued jobs cannot be written

Position = tuple[int, int]

log = logging.getLogger("larbinpy.diskqueue")

# An open refused for want of descriptors: closing cached fds may let it through.
_FD_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
_warned = -WARN_EVERY  # time.monotonic() of the last such warning

# A line start not followed by two integers, a hops field (`+` when a via field follows: see
# joblines.py) and a tab: a malformed job line.
_BAD_LINE = re.compile(rb"(?m)^(?!-?[0-9]+\t-?[0-9]+\t-?[0-9]+(?:(?::-?[0-9]+){3})?\+?\t)")
_SEGMENT = re.compile(r"(.+)\.([0-9]+)\.seg")
_SPILL = re.compile(r"([0-9a-f]{32})\.([0-9]+)\.spill")


# --- lines and files ---


def _chunks(jobs: Iterable[Job]) -> Iterator[list[Job]]:
    """Lists of at most BATCH jobs (bounded memory when given a generator)."""
    if isinstance(jobs, list) and len(jobs) <= BATCH:  # the common case, without copying
        if jobs:
            yield jobs
        return
    it = iter(jobs)
    while batch := list(islice(it, BATCH)):
        yield batch


def _parse(line: bytes, path: Path | str, offset: int) -> Job:
    """One job line (without its newline); StateError names the file and offset if malformed."""
    try:
        return decode_job(line)
    except ValueError:
        raise StateError(f"{path}: malformed job line at byte {offset}; use --scratch") from None


def _write_all(fd: int, data: bytes, size: int) -> None:
    """Append all of data; on failure cut the file back to `size` so no torn line stays."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def _read_lines(fd: int, offset: int, want: int, limit: int | None, path: Path) -> bytes:
    """Whole lines from offset (at least one, about `want` bytes), up to limit; b"" at the end."""
    while True:
        size = want if limit is None else min(want, limit - offset)
        if size <= 0:
            return b""
        data = os.pread(fd, size, offset)
        cut = data.rfind(b"\n") + 1
        if cut:
            return data[:cut]
        if not data:
            return b""
        if len(data) < want:  # the end (of file or limit) inside a line: a torn line
            raise StateError(f"{path}: truncated job line at byte {offset}")
        want *= 2  # a line longer than the window


def _whole_end(fd: int, size: int) -> int:
    """Offset just after the last newline of a file (0 if none): where a torn tail starts."""
    end = size
    while end > 0:
        lo = max(0, end - READ_BYTES)
        i = os.pread(fd, end - lo, lo).rfind(b"\n")
        if i >= 0:
            return lo + i + 1
        end = lo
    return 0


def _scan(path: Path, start: int) -> tuple[int, int, int]:
    """Check the job lines of path from `start`: (how many, the start used, end of good lines).

    A torn tail (no final newline, or one unparsable final line) is not an error: the end
    returned excludes it and the caller cuts it off. A saved cursor beyond that end (the file
    was cut short) is moved to the end, and logged. A malformed line before the last is damage:
    StateError.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        size = _whole_end(fd, os.fstat(fd).st_size)
        if start > size:
            log.warning("%s: cut short before its saved cursor (byte %d, now %d bytes): the jobs "
                        "in between are lost", path, start, size)
            start = size
        if start and os.pread(fd, 1, start - 1) != b"\n":
            raise StateError(f"{path}: saved cursor {start} is not a line start; use --scratch")
        off, count = start, 0
        while block := _read_lines(fd, off, SCAN_BYTES, size, path):
            bad = _BAD_LINE.search(block, 0, len(block) - 1)
            if bad:
                final = block.find(b"\n", bad.start()) + 1 == len(block)
                if final and off + len(block) == size:
                    return count + block.count(b"\n", 0, bad.start()), start, off + bad.start()
                raise StateError(
                    f"{path}: malformed job line at byte {off + bad.start()}; use --scratch")
            count += block.count(b"\n")
            off += len(block)
        return count, start, off
    finally:
        os.close(fd)


def _try(flush: Callable[[], None]) -> None:
    """A flush a push triggers: on OSError the jobs stay buffered (pushed and counted), the
    error is logged, and the next flush tries again; only an explicit flush() raises."""
    global _warned
    try:
        flush()
    except OSError as exc:
        if time.monotonic() - _warned >= WARN_EVERY:  # once in a while, not once a push
            _warned = time.monotonic()
            log.warning("cannot write queued jobs yet, kept in memory: %s", exc)


def _cut(path: Path | str, end: int, last: bool) -> None:
    """Truncate a file to `end`, its last whole line; log it unless it is a kill's torn write."""
    size = os.stat(path).st_size
    if size == end:
        return
    if not last:  # only the last file is ever appended to: anything else was damaged
        log.warning("%s: cut back from %d to %d bytes (a torn job line)", path, size, end)
    else:
        log.info("%s: torn last write cut off (%d bytes)", path, size - end)
    os.truncate(path, end)


# --- one FIFO ---


class SegmentFifo:
    """A persistent FIFO of jobs: append-only segment files NAME.SEQ.seg in one directory."""

    def __init__(self, directory: Path, name: str, position: Position | None = None) -> None:
        self.dir = Path(directory)
        self.name = name
        self.dir.mkdir(parents=True, exist_ok=True)
        self._wfd = self._rfd = -1
        self._open(position)

    # --- opening ---

    def _path(self, seq: int) -> Path:
        """File of segment `seq`."""
        return self.dir / f"{self.name}.{seq}.seg"

    def _find(self) -> list[int]:
        """Numbers of this FIFO's segments on disk, oldest first."""
        seqs = []
        for entry in os.scandir(self.dir):
            m = _SEGMENT.fullmatch(entry.name)
            if m and m.group(1) == self.name:
                seqs.append(int(m.group(2)))
        return sorted(seqs)

    def _open(self, position: Position | None) -> None:
        """Find the segments, check them from the cursor, truncate a torn tail, count the jobs."""
        self._segs = self._find()
        if not self._segs:
            if position and position[1]:
                raise StateError(f"{self._path(position[0])}: missing; use --scratch")
            self._segs = [position[0] if position else 0]
            os.close(os.open(self._path(self._segs[0]), os.O_WRONLY | os.O_CREAT, 0o644))
        self._dir_dirty = True  # the first sync also makes the directory entries durable
        rseq, roff = position or (self._segs[0], 0)
        if rseq not in self._segs:
            raise StateError(f"{self._path(rseq)}: missing (saved cursor); use --scratch")
        self._count = 0
        last = self._segs[-1]
        for seq in self._segs:
            if seq >= rseq:
                count, start, end = _scan(self._path(seq), roff if seq == rseq else 0)
                if seq == rseq:
                    roff = start
                self._count += count
                _cut(self._path(seq), end, seq == last)
        self._wseq, self._wsize, self._wjobs = last, end, count
        self._wfd = os.open(self._path(last), os.O_WRONLY | os.O_APPEND)
        self._unsynced: list[int] = []  # closed segments not yet fsynced
        self._buf: list[str] = []
        self._buf_chars = self._buf_jobs = 0
        self._rseq, self._roff = rseq, roff
        self._rfd = os.open(self._path(rseq), os.O_RDONLY)
        self._lines: list[bytes] = []
        self._li = 0

    def restore(self, position: Position) -> None:
        """Reopen at a saved cursor (unflushed pushes are written first)."""
        self.close()
        self._open(position)

    # --- writing ---

    def __len__(self) -> int:
        return self._count

    def push(self, jobs: Iterable[Job]) -> None:
        """Append jobs (buffered; written when the buffer is full or on flush())."""
        for batch in _chunks(jobs):
            while batch:
                # Cut the batch where the segment is full, so segments rotate on time.
                room = max(1, SEGMENT_JOBS - self._wjobs - self._buf_jobs)
                part, batch = (batch, []) if len(batch) <= room else (batch[:room], batch[room:])
                text = encode_jobs(part)
                self._buf.append(text)
                self._buf_chars += len(text)
                self._buf_jobs += len(part)
                self._count += len(part)
                if self._buf_chars >= BUFFER_BYTES or len(part) == room:
                    _try(self.flush)

    def flush(self) -> None:
        """Hand buffered jobs to the kernel with one write: from here a kill -9 keeps them."""
        if not self._buf:
            return
        data = "".join(self._buf).encode("utf-8", "surrogateescape")
        _write_all(self._wfd, data, self._wsize)  # the buffer is kept if this raises
        self._buf, self._buf_chars = [], 0
        self._wsize += len(data)
        self._wjobs += self._buf_jobs
        self._buf_jobs = 0
        if self._wsize >= SEGMENT_BYTES or self._wjobs >= SEGMENT_JOBS:
            with contextlib.suppress(OSError):  # no fd for the next one: retried at next flush
                self._rotate()

    def _rotate(self) -> None:
        """Start the next segment; the full one waits, open, for its fsync in sync()."""
        # The new file is created only after the old one got its last whole line, so at any
        # kill the only segment that can end in a torn line is the last one.
        fd = os.open(self._path(self._wseq + 1),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        self._unsynced.append(self._wfd)
        self._wseq += 1
        self._wfd = fd
        self._wsize = self._wjobs = 0
        self._segs.append(self._wseq)
        self._dir_dirty = True
        if len(self._unsynced) > UNSYNCED_MAX:  # bound open fds if sync() is not called
            self._sync_closed()

    def _sync_closed(self) -> None:
        """Fsync and close the full segments written since the last sync."""
        while self._unsynced:  # one at a time: a failed fsync leaves the rest for next time
            os.fsync(self._unsynced[0])
            os.close(self._unsynced.pop(0))

    def sync(self) -> None:
        """Flush, then make everything written durable against power loss (checkpoint time)."""
        self.flush()
        self._sync_closed()
        os.fsync(self._wfd)
        if self._dir_dirty:
            fsync_dir(self.dir)
            self._dir_dirty = False

    # --- reading ---

    def pop(self) -> Job | None:
        """The oldest job (flushed or still buffered), or None when empty."""
        i = self._li
        if i >= len(self._lines):
            if not self._count or not self._fill():
                return None
            i = 0
        line = self._lines[i]
        self._li = i + 1
        self._roff += len(line) + 1
        self._count -= 1
        try:
            return decode_job(line)
        except ValueError:
            offset = self._roff - len(line) - 1
            raise StateError(f"{self._path(self._rseq)}: malformed job line at byte {offset}; "
                             "use --scratch") from None

    def _fill(self) -> bool:
        """Load the next read window from the head segment; False if nothing is left."""
        while True:
            at_writer = self._rseq == self._wseq
            if at_writer and self._roff >= self._wsize:
                if not self._buf:
                    return False
                self.flush()  # pop sees buffered jobs: write them, then read them back
                continue
            limit = self._wsize if at_writer else None  # the writer's file: flushed bytes only
            data = _read_lines(self._rfd, self._roff, READ_BYTES, limit, self._path(self._rseq))
            if data:
                self._lines = data[:-1].split(b"\n")
                self._li = 0
                return True
            if at_writer:
                return False
            self._next_segment()

    def _next_segment(self) -> None:
        """Move the read cursor to the start of the following segment."""
        seq = self._segs[self._segs.index(self._rseq) + 1]
        fd = os.open(self._path(seq), os.O_RDONLY)  # first: a refused open changes nothing
        os.close(self._rfd)
        self._rseq, self._roff, self._rfd = seq, 0, fd

    def position(self) -> Position:
        """Cursor of the next job to pop: (segment number, byte offset)."""
        return self._rseq, self._roff

    def jobs(self) -> Iterator[Job]:
        """Every waiting job in order, read from the files (the cursor does not move)."""
        self.flush()
        seq, off = self._rseq, self._roff
        for s in self._segs:
            if s < seq:
                continue
            path = self._path(s)
            fd = os.open(path, os.O_RDONLY)
            try:
                off = off if s == seq else 0
                while block := _read_lines(fd, off, READ_BYTES, None, path):
                    for line in block[:-1].split(b"\n"):
                        yield _parse(line, path, off)
                        off += len(line) + 1
            finally:
                os.close(fd)

    def newest_urls(self) -> Iterator[list[str]]:
        """The URLs of every file, newest lines first, a window of whole lines at a time
        (consumed lines included): where a restart finds the last batch a kill cut short."""
        self.flush()
        for seq in reversed(self._segs):
            path = self._path(seq)
            fd = os.open(path, os.O_RDONLY)
            try:
                end, head = os.fstat(fd).st_size, b""  # head: a line begun before the window
                while end > 0:
                    lo = max(0, end - READ_BYTES)
                    data = os.pread(fd, end - lo, lo) + head
                    end = lo
                    cut = data.find(b"\n") + 1 if lo else 0
                    head, data = data[:cut], data[cut:]
                    if data:
                        yield [_parse(line, path, lo).url for line in data[:-1].split(b"\n")]
            finally:
                os.close(fd)

    # --- deleting ---

    def release(self, position: Position) -> None:
        """Delete segments wholly before `position`, the cursor of the last durable checkpoint."""
        # Never past our own read cursor either: those segments still hold jobs to pop.
        while len(self._segs) > 1 and self._segs[0] < min(position[0], self._rseq):
            self._path(self._segs.pop(0)).unlink(missing_ok=True)

    def close(self) -> None:
        """Flush and close the files (no fsync: call sync() first for power-loss safety)."""
        if self._wfd < 0:
            return
        self.flush()
        for fd in [*self._unsynced, self._wfd, self._rfd]:
            os.close(fd)
        self._unsynced = []
        self._wfd = self._rfd = -1


# --- the priority FIFOs ---


class DiskFrontier:
    """The `Frontier` on disk: one SegmentFifo per priority, highest first, FIFO within."""

    def __init__(self, directory: Path, positions: dict[int, Position] | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        positions = positions or {}
        prios = set(positions)
        for entry in os.scandir(self.dir):
            m = _SEGMENT.fullmatch(entry.name)
            if m and re.fullmatch(r"p-?[0-9]+", m.group(1)):
                prios.add(int(m.group(1)[1:]))
        self._fifos = {p: SegmentFifo(self.dir, f"p{p}", positions.get(p)) for p in prios}
        self._order = sorted(self._fifos, reverse=True)
        self._size = sum(map(len, self._fifos.values()))

    def __len__(self) -> int:
        return self._size

    def push(self, jobs: Iterable[Job]) -> None:
        """Append each job to the FIFO of its priority."""
        it = iter(jobs)
        while chunk := list(islice(it, BATCH)):
            prios = {j.priority for j in chunk}
            if len(prios) == 1:  # the usual batch: the links of one page, one priority
                self._push_run(chunk)
                continue
            groups: dict[int, list[Job]] = {p: [] for p in prios}
            for job in chunk:
                groups[job.priority].append(job)
            for run in groups.values():
                self._push_run(run)

    def _push_run(self, run: list[Job]) -> None:
        """Push jobs that all have the same priority."""
        prio = run[0].priority
        fifo = self._fifos.get(prio)
        if fifo is None:
            fifo = self._fifos[prio] = SegmentFifo(self.dir, f"p{prio}")
            self._order = sorted(self._fifos, reverse=True)
        fifo.push(run)
        self._size += len(run)

    def pop(self) -> Job | None:
        """The oldest job of the highest non-empty priority."""
        if not self._size:
            return None
        for prio in self._order:
            fifo = self._fifos[prio]
            if len(fifo):
                job = fifo.pop()  # (an OSError here leaves the count as it was)
                self._size -= 1
                return job
        return None

    def sizes(self) -> dict[int, int]:
        """Queued jobs per priority."""
        return {p: len(self._fifos[p]) for p in self._order}

    def jobs(self) -> Iterator[Job]:
        """Every waiting job, highest priority first, read from the files."""
        for prio in self._order:
            yield from self._fifos[prio].jobs()

    def newest_urls(self) -> Iterator[Iterator[list[str]]]:
        """Per priority, `SegmentFifo.newest_urls`."""
        for fifo in self._fifos.values():
            yield fifo.newest_urls()

    def position(self) -> dict[int, Position]:
        """Read cursor of every priority, for the checkpoint."""
        return {p: f.position() for p, f in self._fifos.items()}

    def release(self, positions: dict[int, Position]) -> None:
        """Delete segments consumed before the cursors of the last durable checkpoint."""
        for prio, pos in positions.items():
            if prio in self._fifos:
                self._fifos[prio].release(pos)

    def flush(self) -> None:
        """Hand every buffered job to the kernel."""
        for fifo in self._fifos.values():
            fifo.flush()

    def sync(self) -> None:
        """Flush and fsync every FIFO."""
        for fifo in self._fifos.values():
            fifo.sync()

    def close(self) -> None:
        """Flush and close every FIFO."""
        for fifo in self._fifos.values():
            fifo.close()


# --- per-site overflow ---


class _Spilled:
    """What SiteSpill remembers of one site: its files, cursors and count (no jobs)."""

    __slots__ = ("count", "gens", "pending", "rgen", "roff", "wsize")

    def __init__(self) -> None:
        self.gens: list[int] = []  # file numbers on disk, oldest first (last one is written)
        self.rgen = -1  # file of the read cursor (-1: no file yet)
        self.roff = 0  # byte offset of the next job in it
        self.wsize = 0  # flushed bytes of the last file
        self.count = 0  # jobs waiting, buffered ones included
        self.pending: list[str] | None = None  # encoded lines not yet written


class SiteSpill:
    """Jobs of sites whose in-memory queue is full, one append-only file per site (and gen).

    Files are `HASH.GEN.spill` (HASH = xxh3-128 of the site key), starting with a `#KEY` line so
    a restart can name the site. GEN comes from one counter for the whole directory, always above
    every number in use or in the saved cursors, so a stale cursor never points into a new file.
    """

    def __init__(self, directory: Path, positions: dict[str, Position] | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._root = f"{self.dir}{os.sep}"
        self._sites: dict[str, _Spilled] = {}
        self._fds: OrderedDict[str, int] = OrderedDict()  # file name -> fd, LRU
        self._dirty: dict[str, _Spilled] = {}  # sites with pending lines
        self._pending_chars = 0
        self._total = 0
        self._unsynced: set[str] = set()  # files written since the last sync
        self._dir_dirty = False
        self._open(positions or {})

    # --- files ---

    @staticmethod
    def _file(key: str, gen: int) -> str:
        """File name of one generation of a site's spill."""
        return f"{xxhash.xxh3_128_hexdigest(key.encode('utf-8', 'surrogateescape'))}.{gen}.spill"

    @staticmethod
    def _header(key: str) -> bytes:
        """First line of every spill file of a site."""
        return f"#{key}\n".encode("utf-8", "surrogateescape")

    def _fd(self, name: str) -> int:
        """An fd for reading and appending to a spill file (from the LRU cache)."""
        fd = self._fds.pop(name, None)
        if fd is None:  # (a str path: pathlib would cost more than the open itself)
            fd = self._open_fd(name)
            if len(self._fds) >= SPILL_FDS:
                os.close(self._fds.popitem(last=False)[1])
        self._fds[name] = fd
        return fd

    def _open_fd(self, name: str) -> int:
        """Open a spill file; out of descriptors, give back half the cache and try once more."""
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
        try:
            return os.open(self._root + name, flags, 0o644)
        except OSError as exc:
            if exc.errno not in _FD_ERRNOS or not self._fds:
                raise
        for _ in range((len(self._fds) + 1) // 2):  # the least recently used ones
            os.close(self._fds.popitem(last=False)[1])
        return os.open(self._root + name, flags, 0o644)

    def _unlink(self, name: str) -> None:
        """Delete a spill file, closing its cached fd."""
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        (self.dir / name).unlink(missing_ok=True)

    # --- opening ---

    def _open(self, positions: dict[str, Position]) -> None:
        """Rebuild every site's record from the files and the saved cursors."""
        groups: dict[str, list[int]] = {}
        for entry in os.scandir(self.dir):
            m = _SPILL.fullmatch(entry.name)
            if m:
                groups.setdefault(m.group(1), []).append(int(m.group(2)))
        self._next_gen = max([-1, *(g for gens in groups.values() for g in gens),
                              *(p[0] for p in positions.values())]) + 1
        for stem, gens in groups.items():
            gens = self._whole_files(stem, sorted(gens))
            if gens:
                key = self._read_key(stem, gens[0])
                self._restore_site(key, gens, positions.get(key))

    def _whole_files(self, stem: str, gens: list[int]) -> list[int]:
        """The site's files that have a whole header line; the others hold no job: deleted."""
        kept = []
        for gen in gens:
            name = f"{stem}.{gen}.spill"
            if self._head(self.dir / name) is not None:
                kept.append(gen)
                continue
            # A torn first write (kill) or a file cut short within its header: no job lines.
            level = logging.INFO if gen == gens[-1] else logging.WARNING
            log.log(level, "%s: no whole header line (%d bytes): removed", self.dir / name,
                    os.stat(self.dir / name).st_size)
            self._unlink(name)
        return kept

    def _read_key(self, stem: str, gen: int) -> str:
        """The site key in the header of a site's file."""
        head = self._head(self.dir / f"{stem}.{gen}.spill")
        key = head[1:-1].decode("utf-8", "surrogateescape") if head else ""
        if not head or head[:1] != b"#" or not self._file(key, 0).startswith(stem):
            raise StateError(f"{self.dir / f'{stem}.{gen}.spill'}: bad header; use --scratch")
        return key

    @staticmethod
    def _head(path: Path) -> bytes | None:
        """The first line of a file, or None if it has no complete first line."""
        with open(path, "rb") as f:
            head = f.readline(64 << 10)
        return head if head.endswith(b"\n") else None

    def _restore_site(self, key: str, gens: list[int], cursor: Position | None) -> None:
        """Check one site's files from its cursor, cut torn tails, count its jobs."""
        hlen = len(self._header(key))
        rgen, roff = cursor or (gens[0], hlen)
        if rgen not in gens:  # the cursor's file was consumed and deleted (release)
            later = [g for g in gens if g > rgen]
            if not later:  # all older than a durable cursor: consumed, nothing to restore
                for g in gens:
                    self._unlink(self._file(key, g))
                return
            rgen, roff = later[0], hlen
        site = _Spilled()
        site.gens, site.rgen, site.roff = gens, rgen, roff
        for gen in gens:
            if gen < rgen:
                continue
            path = self.dir / self._file(key, gen)
            if self._head(path) != self._header(key):
                raise StateError(f"{path}: bad header; use --scratch")
            count, start, site.wsize = _scan(path, roff if gen == rgen else hlen)
            if gen == rgen:
                site.roff = max(start, hlen)
            site.count += count
            _cut(path, site.wsize, gen == gens[-1])
        self._sites[key] = site
        self._total += site.count

    # --- writing ---

    def __len__(self) -> int:
        return self._total

    def count(self, site_key: str) -> int:
        """Jobs of this site waiting in the spill."""
        site = self._sites.get(site_key)
        return site.count if site else 0

    def sites(self) -> Iterator[str]:
        """Keys of the sites that have spilled jobs waiting."""
        return (k for k, s in self._sites.items() if s.count)

    def push(self, site_key: str, jobs: list[Job]) -> None:
        """Append jobs to a site's spill (buffered; written when the buffer is full or on flush)."""
        if not jobs:
            return
        site = self._sites.get(site_key)
        if site is None:
            if "\n" in site_key:
                raise ValueError("site key contains a newline")
            site = self._sites[site_key] = _Spilled()
        text = encode_jobs(jobs)
        if site.pending is None:
            site.pending = [text]
            self._dirty[site_key] = site
        else:
            site.pending.append(text)
        site.count += len(jobs)
        self._total += len(jobs)
        self._pending_chars += len(text)
        if self._pending_chars >= SPILL_BUFFER_BYTES:
            _try(self.flush)

    def flush(self) -> None:
        """Write every site's buffered lines: one open-append per site (fds cached, LRU)."""
        while self._dirty:  # one site at a time: a failure leaves the rest buffered, as they were
            key, site = next(iter(self._dirty.items()))
            self._flush_site(key, site)
            del self._dirty[key]

    def _flush_site(self, key: str, site: _Spilled) -> None:
        """Append a site's buffered lines to its last file, starting a new file when needed.

        If the open or the write fails, nothing changes: the lines stay buffered."""
        assert site.pending is not None
        data = "".join(site.pending).encode("utf-8", "surrogateescape")
        new = not site.gens or site.wsize >= SPILL_SEGMENT_BYTES
        if new:
            # A new file gets its header in the same write as its first lines, so a kill
            # leaves either no file content, a torn first write (dropped on open), or both.
            gen, size = self._next_gen, 0
            data = self._header(key) + data
        else:
            gen, size = site.gens[-1], site.wsize
        name = self._file(key, gen)
        try:
            _write_all(self._fd(name), data, size)
        except OSError:
            if new:  # no empty file left behind (its number is used again)
                with contextlib.suppress(OSError):
                    self._unlink(name)
            raise
        if new:
            self._next_gen += 1
            site.gens.append(gen)
            self._dir_dirty = True
            if site.rgen < 0:
                site.rgen, site.roff = gen, len(self._header(key))
        self._unsynced.add(name)
        site.wsize = size + len(data)
        self._pending_chars -= sum(map(len, site.pending))
        site.pending = None

    def sync(self) -> None:
        """Flush, then fsync every spill file written since the last sync (checkpoint time)."""
        self.flush()
        for name in self._unsynced:
            fd = self._fds.get(name)
            if fd is not None:
                os.fsync(fd)
            elif (self.dir / name).exists():  # evicted from the LRU: closing does not fsync
                fd = os.open(self.dir / name, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        self._unsynced = set()
        if self._dir_dirty:
            fsync_dir(self.dir)
            self._dir_dirty = False

    # --- reading ---

    def pop_many(self, site_key: str, n: int) -> list[Job]:
        """Up to n of the site's spilled jobs, oldest first."""
        site = self._sites.get(site_key)
        if site is None or n <= 0 or not site.count:
            return []
        if site.pending is not None:  # the reader may reach them: write them first
            self._flush_site(site_key, site)
            del self._dirty[site_key]
        out: list[Job] = []
        n = min(n, site.count)
        try:
            self._read(site_key, site, n, out)
        except OSError:
            if not out:
                raise  # nothing moved: the caller may try again later
            # the jobs read so far are handed over (the cursor is past them); the rest waits
        site.count -= len(out)
        self._total -= len(out)
        return out

    def _read(self, site_key: str, site: _Spilled, n: int, out: list[Job]) -> None:
        """Append up to n of the site's jobs to `out`, moving its read cursor past them."""
        while len(out) < n:
            name = self._file(site_key, site.rgen)
            path, last = self.dir / name, site.rgen == site.gens[-1]
            want = min(READ_BYTES, 256 * (n - len(out)))
            data = _read_lines(self._fd(name), site.roff, want, site.wsize if last else None, path)
            if not data:
                if last:
                    break
                site.rgen = site.gens[site.gens.index(site.rgen) + 1]
                site.roff = len(self._header(site_key))
                continue
            for line in data[:-1].split(b"\n")[: n - len(out)]:
                out.append(_parse(line, path, site.roff))
                site.roff += len(line) + 1

    # --- cursors and deletion ---

    def position(self) -> dict[str, Position]:
        """Read cursor of every site that has a file, for the checkpoint."""
        return {k: (s.rgen, s.roff) for k, s in self._sites.items() if s.gens}

    def release(self, positions: dict[str, Position]) -> None:
        """Delete spill files consumed before the cursors of the last durable checkpoint."""
        for key, (gen, off) in positions.items():
            site = self._sites.get(key)
            if site is None:
                continue
            while site.gens and site.gens[0] < min(gen, site.rgen):
                self._unlink(self._file(key, site.gens.pop(0)))
            drained = not site.count and site.pending is None
            if drained and (gen, off) == (site.rgen, site.roff):
                # Restarting from that checkpoint finds nothing for this site: its files can
                # go, and a later spill starts a new, higher generation. Newest first, so a
                # kill in between leaves only files older than the cursor (dropped on open).
                for g in reversed(site.gens):
                    self._unlink(self._file(key, g))
                del self._sites[key]

    def close(self) -> None:
        """Flush and close every cached fd."""
        self.flush()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
