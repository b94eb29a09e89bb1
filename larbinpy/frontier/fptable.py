"""The exact store behind the seen-set: 64-bit URL fingerprints in an on-disk hash table.

`ExactSeenSet` (seen.py) asks it only about URLs whose bitmap bits are set, and stores the
fingerprint of every URL it admits. The table is a file of 2 KiB buckets of 256 uint64 slots in
native byte order (0 = empty; a fingerprint is never 0). A fingerprint lives in bucket
`fp % buckets`, at slot `(fp >> 40) % 256` or the next free one after it (linear probing inside
the bucket, wrapping). Slots are never emptied, so a stored fingerprint sits between its home
slot and the first empty slot after it.

Cost: a lookup reads WINDOW slots (128 bytes) from the home slot, which settles it unless all
of them are taken (up to 8% at the highest load; then the whole bucket is read); an insert is
that read plus an 8-byte store. The URLs a crawl confirms are spread evenly over the whole
table (a page's links to old pages), so no cache smaller than the table saves a read for most
of them. Keys seen lately are answered before the table by seen.py's memo of recent URLs.

Memory and system calls: set by `cache` (`seenCache`), not by the crawl. With a cache the file
is mapped (shared, read-write) and fingerprints are stored through the mapping: a pwrite of 8
bytes goes through the file system's write path every time (ext4 updates the file's times), a
store into the mapping costs a page fault only when its page was clean. While the whole table
fits in the cache, windows are read from the mapping too, with no system call; the mapped
pages count in the process's RSS, up to `cache`. A larger table is read with pread (one system
call a lookup, served by the kernel's page cache, which the RSS does not count: mapping it for
reading would fault for most lookups), and the pages its stores mapped are dropped (madvise)
whenever they could add up to `cache`; their data stays in the page cache. Without a cache
(0): pread and pwrite only. The file's blocks are allocated before it is mapped, so a full disk
is an OSError when the table is opened or doubled, never a SIGBUS on a store.

Durability: every insert reaches the kernel's page cache before `add` returns, so a `kill -9`
loses nothing; `sync()` makes it survive a power loss too. When the table is 70% full (or a
bucket is), it doubles: a new file is written bucket by bucket beside the old one, synced, then
renamed over it (a crash during the rewrite leaves the old table whole). Doubling stops the
caller for a pass over the table, once per doubling of the crawl: amortised, each fingerprint
is moved about once.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

from larbinpy.frontier.state import fsync_dir

BUCKET_BYTES = 2048
SLOTS = BUCKET_BYTES // 8
MIN_BUCKETS = 64
# Of all slots. A bucket holds 179 on average at this load (sd 13): filling its 256 slots is
# 5.9 sd away, which would only double the table early.
MAX_LOAD = 0.7
# Slots read per lookup from the home slot on: 128 bytes (two cache lines; the syscall costs
# the same as for 8). Just below MAX_LOAD, 8% of the lookups of absent fingerprints find all
# 16 taken (or the window cut short at the bucket's end) and read the whole bucket.
WINDOW = 16
_unpack_window = struct.Struct(f"={WINDOW}Q").unpack_from  # WINDOW slots, as array("Q") reads them
RESIZE_CHUNK = 512  # buckets read at once while doubling and counting
_ORDER = sys.byteorder  # the file is in native byte order, as memoryview.cast reads it


def _home(fp: int) -> int:
    """The first slot a fingerprint probes in its bucket (bits unused by the bucket number)."""
    return (fp >> 40) % SLOTS


def _probe(slots: array[int] | list[int], fp: int) -> tuple[bool, int]:
    """(found, slot): the fingerprint's slot, or the free slot it would take (-1: full)."""
    i = _home(fp)
    for _ in range(SLOTS):
        v = slots[i]
        if v == fp:
            return True, i
        if v == 0:
            return False, i
        i = (i + 1) % SLOTS
    return False, -1


class FingerprintTable:
    """A set of non-zero uint64 fingerprints in a file of hash buckets."""

    def __init__(self, path: str | Path, cache: int = 0) -> None:
        """Open (or create) the table in `path`; map it while it is at most `cache` bytes."""
        self.path = Path(path)
        Path(f"{self.path}.new").unlink(missing_ok=True)  # a doubling cut short by a crash
        if not self.path.exists():
            Path(f"{self.path}.count").unlink(missing_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        empty = size == 0
        if empty:
            os.ftruncate(self._fd, MIN_BUCKETS * BUCKET_BYTES)  # sparse
            size = MIN_BUCKETS * BUCKET_BYTES
        self.buckets = size // BUCKET_BYTES
        self._count_path = Path(f"{self.path}.count")
        self.count = 0 if empty else self._saved_count()  # a new table holds nothing to count
        # A whole window is read into this one array (no bytes object and no array made per
        # lookup); a window cut short by its bucket's end is read into a new one.
        self._window = array("Q", bytes(8 * WINDOW))
        self._into = [self._window]
        self.cache = cache
        self._map: mmap.mmap | None = None
        self._reads_mapped = False  # the whole table fits in the cache: read from the mapping
        self._stores = 0  # stores through the mapping since its pages were last dropped
        self._map_file()

    def _map_file(self) -> None:
        """Map the whole file when there is a cache (after opening or doubling); see above."""
        if self._map is not None:
            self._map.close()
            self._map = None
        if self.cache <= 0:
            return
        size = self.buckets * BUCKET_BYTES
        os.posix_fallocate(self._fd, 0, size)  # a hole in a mapping is a SIGBUS on a full disk
        self._map = mmap.mmap(self._fd, size)
        self._reads_mapped, self._stores = size <= self.cache, 0

    def _saved_count(self) -> int:
        """Fingerprints stored, as the last sync() wrote it (so opening a large table reads
        nothing); after a kill it is low by what came since, which only delays a doubling
        until a bucket fills. Without the file: counted, one sequential pass."""
        try:
            return int(self._count_path.read_text())
        except (OSError, ValueError):
            pass
        n = 0
        for start in range(0, self.buckets, RESIZE_CHUNK):
            data = os.pread(self._fd, RESIZE_CHUNK * BUCKET_BYTES, start * BUCKET_BYTES)
            n += len(data) // 8 - array("Q", data).count(0)
        return n

    def _whole(self, b: int) -> array[int]:
        """A bucket's slots, for a probe that ran past its window."""
        if self._reads_mapped:
            assert self._map is not None  # reads are mapped only while the table is
            return array("Q", self._map[b * BUCKET_BYTES:(b + 1) * BUCKET_BYTES])
        return array("Q", os.pread(self._fd, BUCKET_BYTES, b * BUCKET_BYTES))

    def mapped(self) -> mmap.mmap | None:
        """The whole table's mapping while lookups read it (for seen.py's C twin), else None."""
        return self._map if self._reads_mapped else None

    def contains(self, fps: list[int]) -> list[bool]:
        """Whether each fingerprint is stored (a read of WINDOW slots, rarely of a bucket)."""
        out, nb = [], self.buckets
        mapped, last = self._map if self._reads_mapped else None, SLOTS - WINDOW
        for fp in fps:
            # Slots are never emptied, so a stored fingerprint sits between its home slot and
            # the first empty slot after it: found in the window, or absent if it has a 0.
            home = (fp >> 40) % SLOTS
            at = (fp % nb) * BUCKET_BYTES + 8 * home
            # (read from the mapping as a tuple where it can: no bytes nor array made)
            window: Sequence[int] = (_unpack_window(mapped, at) if mapped and home <= last
                                     else self._read_window(at, home))
            if fp in window:
                out.append(True)
            elif 0 in window:
                out.append(False)
            else:
                out.append(fp in self._whole(fp % nb))
        return out

    def _read_window(self, at: int, home: int) -> array[int]:
        """The slots from `home` on: WINDOW of them, fewer at the end of the bucket."""
        if self._reads_mapped:
            assert self._map is not None  # reads are mapped only while the table is
            return array("Q", self._map[at:at + 8 * min(WINDOW, SLOTS - home)])
        if home > SLOTS - WINDOW:
            return array("Q", os.pread(self._fd, 8 * (SLOTS - home), at))
        if os.preadv(self._fd, self._into, at) != 8 * WINDOW:
            raise OSError(f"{self.path}: short read at {at}: the table was cut")
        return self._window

    def add(self, fps: Iterable[int]) -> None:
        """Store fingerprints (already stored ones are skipped); written before returning."""
        fps = list(fps)
        for n, fp in enumerate(fps):
            if not self._add_one(fp):
                self._double()
                self.add(fps[n:])  # rehashed: what came before is stored, the rest again
                return
        if self.count > MAX_LOAD * SLOTS * self.buckets:
            self._double()

    def _add_one(self, fp: int) -> bool:
        """Write one fingerprint into its first free slot (8 bytes); False if its bucket is full."""
        home, b = (fp >> 40) % SLOTS, fp % self.buckets
        at = b * BUCKET_BYTES + 8 * home
        window = self._read_window(at, home)
        if fp in window:
            return True
        try:
            at += 8 * window.index(0)
        except ValueError:
            found, i = _probe(self._whole(b), fp)  # past the window (or wrapped round)
            if found:
                return True
            if i < 0:
                return False
            at = b * BUCKET_BYTES + 8 * i
        self._store(fp, at)
        self.count += 1
        return True

    def _store(self, fp: int, at: int) -> None:
        """Write a fingerprint at a byte offset: through the mapping if there is one."""
        if self._map is None:
            os.pwrite(self._fd, fp.to_bytes(8, _ORDER), at)
            return
        self._map[at:at + 8] = fp.to_bytes(8, _ORDER)
        if not self._reads_mapped:
            self._stores += 1  # each store maps at most one page
            if self._stores * mmap.PAGESIZE >= self.cache:
                self._map.madvise(mmap.MADV_DONTNEED)  # unmapped, not lost: see above
                self._stores = 0

    def _double(self) -> None:
        """Rehash into twice the buckets: bucket b splits into b and b + old count."""
        nb, tmp = self.buckets, Path(f"{self.path}.new")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, 2 * nb * BUCKET_BYTES)
            for start in range(0, nb, RESIZE_CHUNK):
                data = os.pread(self._fd, RESIZE_CHUNK * BUCKET_BYTES, start * BUCKET_BYTES)
                every = memoryview(data).cast("Q").tolist()
                lo, hi = array("Q"), array("Q")
                for i in range(0, len(every), SLOTS):
                    lo.extend(_rebuild([fp for fp in every[i:i + SLOTS] if fp and not fp & nb]))
                    hi.extend(_rebuild([fp for fp in every[i:i + SLOTS] if fp & nb]))
                os.pwrite(fd, lo.tobytes(), start * BUCKET_BYTES)  # nb is a power of two
                os.pwrite(fd, hi.tobytes(), (start + nb) * BUCKET_BYTES)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd, self.buckets = fd, 2 * nb
        self._map_file()
        fsync_dir(self.path.parent)

    def sync(self) -> None:
        """Make every stored fingerprint survive a power loss; note the count."""
        if self._map is not None:
            self._map.flush()
        os.fsync(self._fd)
        self._count_path.write_text(str(self.count))

    def close(self) -> None:
        """Sync and close the file."""
        if self._fd >= 0:
            self.sync()
            if self._map is not None:
                self._map.close()
                self._map = None
            os.close(self._fd)
            self._fd = -1


def _rebuild(fps: list[int]) -> list[int]:
    """A bucket's slots holding `fps` (at most SLOTS of them)."""
    slots = [0] * SLOTS
    for fp in fps:
        slots[_probe(slots, fp)[1]] = fp
    return slots
