"""The exact store behind the seen-set: 64-bit URL fingerprints in an on-disk hash table.

`ExactSeenSet` (seen.py) asks it only about URLs whose bitmap bits are set. The table is a file
of 4 KiB buckets of 512 little-endian uint64 slots (0 = empty; a fingerprint is never 0); a
fingerprint lives in bucket `fp % buckets`, its slots filled from the front. It is read and
written with pread/pwrite, never mapped: the kernel's page cache keeps the hot buckets, and
none of the file counts in the process's RSS, so memory does not grow with the crawl. Every
insert reaches the kernel before `add` returns, so a `kill -9` loses nothing; `sync()` makes it
survive a power loss too. When the table is 3/4 full (or a bucket is), it doubles: a new file is
written bucket by bucket beside the old one, synced, then renamed over it (a crash during the
rewrite leaves the old table whole).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

BUCKET_BYTES = 4096
SLOTS = BUCKET_BYTES // 8
MIN_BUCKETS = 64
MAX_LOAD = 0.75  # of all slots; a bucket overflows at 512 where 384 is the mean: never in practice
RESIZE_CHUNK = 256  # buckets read at once while doubling
_EMPTY = bytes(8)


def _find(bucket: bytes, needle: bytes) -> int:
    """Byte offset of an aligned 8-byte `needle` in `bucket`, or -1."""
    i = bucket.find(needle)
    while i != -1 and i & 7:
        i = bucket.find(needle, i + 1)
    return i


def _used(bucket: bytes) -> int:
    """Bytes in use at the front of a bucket (slots fill from the front)."""
    i = _find(bucket, _EMPTY)
    return len(bucket) if i == -1 else i


class FingerprintTable:
    """A set of non-zero uint64 fingerprints in a file of hash buckets."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        Path(f"{self.path}.new").unlink(missing_ok=True)  # a doubling cut short by a crash
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size == 0:
            os.ftruncate(self._fd, MIN_BUCKETS * BUCKET_BYTES)  # sparse
            size = MIN_BUCKETS * BUCKET_BYTES
        self.buckets = size // BUCKET_BYTES
        self.count = self._count()

    def _count(self) -> int:
        """Fingerprints stored (one sequential pass; done at open only)."""
        n = 0
        for start in range(0, self.buckets, RESIZE_CHUNK):
            data = os.pread(self._fd, RESIZE_CHUNK * BUCKET_BYTES, start * BUCKET_BYTES)
            for off in range(0, len(data), BUCKET_BYTES):
                n += _used(data[off:off + BUCKET_BYTES]) // 8
        return n

    def _bucket(self, b: int) -> bytes:
        """One bucket's bytes."""
        return os.pread(self._fd, BUCKET_BYTES, b * BUCKET_BYTES)

    def contains(self, fps: list[int]) -> list[bool]:
        """Whether each fingerprint is stored (one read per distinct bucket)."""
        nb, seen_buckets = self.buckets, {}
        out = []
        for fp in fps:
            b = fp % nb
            data = seen_buckets.get(b)
            if data is None:
                data = seen_buckets[b] = self._bucket(b)
            out.append(_find(data, fp.to_bytes(8, "little")) != -1)
        return out

    def add(self, fps: Iterable[int]) -> None:
        """Store fingerprints (already stored ones are skipped); written before returning."""
        groups: dict[int, list[int]] = {}
        nb = self.buckets
        for fp in fps:
            groups.setdefault(fp % nb, []).append(fp)
        for b, group in groups.items():
            if not self._add_bucket(b, group):
                self._double()
                self.add(fp for g in groups.values() for fp in g)  # rehashed: start again
                return
        if self.count > MAX_LOAD * SLOTS * self.buckets:
            self._double()

    def _add_bucket(self, b: int, group: list[int]) -> bool:
        """Append a bucket's new fingerprints; False (nothing written) if it would overflow."""
        data = self._bucket(b)
        new = b"".join(dict.fromkeys(
            n for n in (fp.to_bytes(8, "little") for fp in group) if _find(data, n) == -1))
        if not new:
            return True
        used = _used(data)
        if used + len(new) > BUCKET_BYTES:
            return False
        os.pwrite(self._fd, new, b * BUCKET_BYTES + used)
        self.count += len(new) // 8
        return True

    def _double(self) -> None:
        """Rehash into twice the buckets: bucket b splits into b and b + old count."""
        nb, tmp = self.buckets, Path(f"{self.path}.new")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, 2 * nb * BUCKET_BYTES)
            for start in range(0, nb, RESIZE_CHUNK):
                data = os.pread(self._fd, RESIZE_CHUNK * BUCKET_BYTES, start * BUCKET_BYTES)
                for i in range(len(data) // BUCKET_BYTES):
                    bucket = data[i * BUCKET_BYTES:(i + 1) * BUCKET_BYTES]
                    slots = memoryview(bucket[:_used(bucket)]).cast("Q").tolist()
                    lo = [fp for fp in slots if not fp & nb]  # nb is a power of two
                    hi = [fp for fp in slots if fp & nb]
                    b = start + i
                    for target, part in ((b, lo), (b + nb, hi)):
                        if part:
                            os.pwrite(fd, b"".join(fp.to_bytes(8, "little") for fp in part),
                                      target * BUCKET_BYTES)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd, self.buckets = fd, 2 * nb
        _sync_dir(self.path.parent)

    def sync(self) -> None:
        """Make every stored fingerprint survive a power loss."""
        os.fsync(self._fd)

    def close(self) -> None:
        """Sync and close the file."""
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def _sync_dir(path: Path) -> None:
    """fsync a directory so a rename in it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
