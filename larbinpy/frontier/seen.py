"""The seen-set of the input stage: larbin's bitmap hash set, kept in a file in `stateDir`,
confirmed by an exact store of URL fingerprints (`seenSet exact`, the default).

The bitmap: one bit per hash of a normalized URL, no URL strings kept, so memory is `hashSize`
bits whatever the crawl size. With `hashFunctions K` > 1 each URL sets K bits: a Bloom filter.
The bitmap is a memory-mapped file, so a restart keeps what was seen. A clear bit means new for
certain; a set bit may be another URL's (`seenSet bitmap`, larbin's behaviour, drops the URL).

`ExactSeenSet` confirms each set bit against a 64-bit fingerprint (xxh3, seeded independently
of the bitmap's hash) in `fptable.FingerprintTable`, an on-disk hash table read with pread, so
memory is set by configuration (the `hashSize` bitmap and the memo below), not by the crawl.
A new URL is then dropped only when its fingerprint equals a seen URL's. Birthday bound: a new
URL, offered after n others, is lost with probability at most n / 2^64 (5.4e-12 at n = 10^8);
over a whole crawl of n URLs the expected number lost is n(n-1)/2 / 2^64: at n = 10^8 that
is 10^16 / 2 / 1.8e19 = 2.7e-4 URLs, far below 1 in 10^6 per URL, and the chance that any URL
at all is lost is below 1 in 3,600. The bitmap test in front only lowers it (a lost URL must
also find its bits set).

What confirming costs: one pread per duplicate link that is not in the memo, one pread and
one pwrite per admitted URL. In exact mode the bitmap is only a filter that spares new URLs
the read in `missing`: a smaller one costs less memory (its pages are all touched, so its size
is in RSS) and confirms more new URLs (the fraction of its bits set), never loses one; hence
`hashSize`'s default of 2^27 bits (16 MiB: 7% of new URLs read the table at 10^7 URLs, 53% at
10^8). The memo in front of the bitmap holds the last RECENT_MAX..2*RECENT_MAX URLs added or
found seen, as strings: a site's navigation links repeat on each of its pages. `larbinpy bench
--seen` offers pages of 50 links: 10 new, 20 among the last 2,000 URLs (the memo answers them)
and 20 drawn uniformly from all URLs before (each one a read of the table): a memo flatters
only the first half, and real crawls repeat recent links far more often than that.

A cluster (larbinpy/cluster) keeps its seen-set in Redis, as these same 64-bit fingerprints
(`fingerprint`, in sets: `cluster/redis_seen.py`), and an `ExactSeenSet` a node as its cache.

Durability: the bitmap's bits and the table's slots are written into the kernel's page cache
as they are set (mmap, pwrite), so a `kill -9` keeps every decision; `flush()` (the checkpoint)
makes them survive a power loss. The input stage marks a URL seen only after it is queued.

A stateDir written by a bitmap-only larbinpy (bits set, no table): its bitmap is copied, frozen,
to `seen.legacy.bitmap`, and a URL whose bits are all set there counts as seen, as before
(those old URLs were never fingerprinted; a rebuild would need every URL ever seen). URLs seen
afterwards are exact. `seenSet bitmap` deletes the table: its bits are then the whole seen-set.

A page's links are tested by the C twin `_seenbits.c` (built by `pip install .`; the same
answers, held to this module's code by tests/test_seen.py) while the table is read through
memory and there is no legacy bitmap; the Python code runs otherwise, or with LARBINPY_PURE=1.

`SeenSet` is the small interface the input stage uses; a Redis implementation can replace
`BitmapSeenSet` without touching the stages.
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Iterable
from itertools import filterfalse
from pathlib import Path
from typing import Protocol

import xxhash

from larbinpy import PURE
from larbinpy.frontier.durable import Store
from larbinpy.frontier.fptable import FingerprintTable

try:
    from larbinpy.frontier import _seenbits
except ImportError:  # not built (a source tree without `pip install .`)
    _seenbits = None  # type: ignore[assignment]  # the module's stand-in: "not built"
if PURE:
    _seenbits = None  # type: ignore[assignment]  # the pure twin, as asked

_hash64 = xxhash.xxh3_64_intdigest
_hash128 = xxhash.xxh3_128_intdigest
_MASK64 = (1 << 64) - 1
_FP_SEED = 0x9E3779B97F4A7C15  # fingerprints independent of the bitmap's positions
# Keys known to be seen (added, or found seen), kept as strings in front of the bitmap: most
# links of a page were seen on the site's previous pages, and a set lookup is far cheaper than
# hashing the key, touching a random cache line of the bitmap and reading the fingerprint
# table. Bounded: two generations of RECENT_MAX keys (plus one call's keys); when the newer
# fills, the older is dropped, so the latest RECENT_MAX keys are always kept.
RECENT_MAX = 1 << 15
RECENT_KEY_MAX = 200  # characters: longer URLs are not kept (65,536 of 2 kB would be 130 MB)


class SeenSet(Protocol):
    """Which keys were already seen."""

    def missing(self, keys: list[str]) -> list[str]:
        """The keys not seen yet (nothing is recorded)."""
        ...

    def add(self, keys: Iterable[str]) -> None:
        """Record keys as seen."""
        ...

    def flush(self) -> None:
        """Make what was recorded durable."""
        ...

    def close(self) -> None:
        """Release the set."""
        ...


class BitmapSeenSet(Store):
    """`bits`-bit bitmap in a memory-mapped file; K hash functions (K=1: larbin's hash set)."""

    def __init__(self, path: str | Path, bits: int, functions: int = 1) -> None:
        self.bits, self.k = bits, functions
        nbytes = (bits + 7) // 8
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self.fresh = os.fstat(fd).st_size == 0  # nothing was ever recorded here
            if os.fstat(fd).st_size != nbytes:
                os.ftruncate(fd, nbytes)  # sparse: untouched pages cost neither disk nor RAM
            self._map = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
        self.path = Path(path)
        self._recent: set[str] = set()  # only ever keys known to be seen
        self._older: set[str] = set()  # the generation before
        self._set_bits: int | None = None  # counted on first use (fill)

    def positions(self, key: str) -> list[int]:
        """Bit positions of a key (Kirsch-Mitzenmacher double hashing for K > 1)."""
        if self.k == 1:
            return [_hash64(key.encode()) % self.bits]
        h = _hash128(key.encode())
        h1, h2 = h & _MASK64, (h >> 64) | 1
        return [(h1 + i * h2) % self.bits for i in range(self.k)]

    def split(self, keys: list[str]) -> tuple[list[str], list[str]]:
        """(keys with a clear bit: new for certain, keys with all bits set: maybe seen)."""
        m = self._map
        new: list[str] = []
        maybe: list[str] = []
        if self.k == 1:
            bits = self.bits
            for key in keys:
                p = _hash64(key.encode()) % bits
                (maybe if m[p >> 3] & (1 << (p & 7)) else new).append(key)
            return new, maybe
        bits, k = self.bits, self.k
        for key in keys:
            # a seen key has every bit set; most links were seen, so test bit by bit and stop
            # at the first clear one rather than computing all K positions first
            h = _hash128(key.encode())
            h1, h2 = h & _MASK64, (h >> 64) | 1
            for i in range(k):
                p = (h1 + i * h2) % bits
                if not m[p >> 3] & (1 << (p & 7)):
                    new.append(key)
                    break
            else:
                maybe.append(key)
        return new, maybe

    def _not_recent(self, keys: list[str]) -> list[str]:
        """The keys in neither generation of recent keys."""
        rest = list(filterfalse(self._recent.__contains__, keys))  # a C loop: most are recent
        return list(filterfalse(self._older.__contains__, rest)) if rest else rest

    def _remember(self, keys: list[str]) -> None:
        """Keep seen keys in the recent set (short ones only); a full one becomes the older."""
        if max(map(len, keys), default=0) <= RECENT_KEY_MAX:  # (most pages': C-level loops)
            self._recent.update(keys)
        else:
            self._recent.update(k for k in keys if len(k) <= RECENT_KEY_MAX)
        if len(self._recent) >= RECENT_MAX:
            self._older, self._recent = self._recent, set()

    def missing(self, keys: list[str]) -> list[str]:
        """The keys whose bits are not all set."""
        new, maybe = (self._missing_c(keys) if _seenbits is not None
                      else self.split(self._not_recent(keys)))
        self._remember(maybe)
        return new

    def _missing_c(self, keys: list[str], table: mmap.mmap | None = None,
                   buckets: int | None = None) -> tuple[list[str], list[str]]:
        """By the C twin: (keys not seen, keys found seen past the memo), testing set bits
        against `table` (a mapped FingerprintTable of `buckets`) when one is given."""
        assert _seenbits is not None  # (the callers check)
        return _seenbits.missing(keys, self._recent, self._older, self._map, self.bits, self.k,
                                 table, buckets)

    def add(self, keys: Iterable[str]) -> None:
        """Set the bits of every key (and remember it: a page links to it again soon)."""
        keys = list(keys)
        m, fresh = self._map, 0
        for key in keys:
            for p in self.positions(key):
                old = m[p >> 3]
                if not old & (1 << (p & 7)):
                    m[p >> 3] = old | (1 << (p & 7))
                    fresh += 1
        if self._set_bits is not None:
            self._set_bits += fresh
        self._remember(keys)

    def set_bits(self) -> int:
        """Bits set (read from the file once with pread, so the map's pages stay untouched)."""
        if self._set_bits is None:
            self._set_bits = count_bits(self.path)
        return self._set_bits

    def fill(self) -> float:
        """Fraction of the bits set."""
        return self.set_bits() / self.bits

    def expected_loss(self) -> float:
        """Expected new URLs dropped so far by collisions (see `expected_loss`)."""
        return expected_loss(self.bits, self.k, self.set_bits())

    def flush(self) -> None:
        """Write dirty pages to disk."""
        self._map.flush()

    def close(self) -> None:
        """Flush and unmap."""
        if not self._map.closed:
            self._map.flush()
            self._map.close()


class ExactSeenSet(Store):
    """The bitmap first, then set bits confirmed against 64-bit fingerprints on disk."""

    def __init__(self, path: str | Path, bits: int, functions: int = 1, cache: int = 0) -> None:
        path = Path(path)
        table, legacy = _exact_paths(path)
        existed = path.exists() and path.stat().st_size > 0
        if existed and not table.exists() and count_bits(path):
            import shutil  # (here: only a stateDir of an older version is copied)

            shutil.copyfile(path, legacy)  # a bitmap-only stateDir: its bits stay seen
        self.bitmap = BitmapSeenSet(path, bits, functions)
        if self.bitmap.fresh:  # --scratch removed the bitmap: what was beside it is stale
            table.unlink(missing_ok=True)
            legacy.unlink(missing_ok=True)
        self.legacy = BitmapSeenSet(legacy, bits, functions) if legacy.exists() else None
        self.table = FingerprintTable(table, cache)
        self.k = functions

    def positions(self, key: str) -> list[int]:
        """The key's bit positions in the bitmap (what a cluster's Redis bitmap sets too)."""
        return self.bitmap.positions(key)

    def missing(self, keys: list[str]) -> list[str]:
        """The keys never added: a clear bit, or a set bit and no such fingerprint."""
        bitmap = self.bitmap
        table = self.table.mapped() if _seenbits is not None and self.legacy is None else None
        if table is not None:  # the same answers as below, by the C twin (_seenbits.c)
            new, seen = bitmap._missing_c(keys, table, self.table.buckets)
            bitmap._remember(seen)
            return new
        keys = bitmap._not_recent(keys)
        new, maybe = bitmap.split(keys)
        if not maybe:
            return new
        if self.legacy is not None:
            _, old = self.legacy.split(maybe)
            bitmap._remember(old)
            oldset = set(old)
            maybe = [k for k in maybe if k not in oldset]
        found = self.table.contains([fingerprint(k) for k in maybe])
        seen = [k for k, hit in zip(maybe, found, strict=True) if hit]
        bitmap._remember(seen)
        if len(seen) == len(maybe):
            return new
        fresh = {k for k, hit in zip(maybe, found, strict=True) if not hit}
        fresh.update(new)
        return [k for k in keys if k in fresh]  # in the order given

    def add(self, keys: Iterable[str]) -> None:
        """Store the fingerprints, then set the bits (a set bit always has its fingerprint)."""
        keys = list(keys)
        self.table.add([fingerprint(k) for k in keys])
        self.bitmap.add(keys)

    def fill(self) -> float:
        """Fraction of the bitmap's bits set."""
        return self.bitmap.fill()

    def expected_loss(self) -> float:
        """Expected new URLs dropped so far: fingerprint collisions, n(n-1)/2 / 2^64."""
        n = self.table.count
        return n * (n - 1) / 2 / 2.0**64

    def flush(self) -> None:
        """Make the fingerprints and bits survive a power loss."""
        self.table.sync()
        self.bitmap.flush()

    def close(self) -> None:
        """Sync and release the files."""
        self.table.close()
        self.bitmap.close()
        if self.legacy is not None:
            self.legacy.close()


def fingerprint(key: str) -> int:
    """The key's 64-bit fingerprint, never 0 (0 marks an empty slot)."""
    return _hash64(key.encode(), _FP_SEED) or 1


def _exact_paths(bitmap: Path) -> tuple[Path, Path]:
    """The fingerprint table and the frozen legacy bitmap beside a seen bitmap."""
    stem = bitmap.with_suffix("")
    return Path(f"{stem}.fingerprints"), Path(f"{stem}.legacy.bitmap")


def open_seen_set(
    path: str | Path, bits: int, functions: int, kind: str, cache: int = 0
) -> BitmapSeenSet | ExactSeenSet:
    """The seen-set `seenSet` names (`cache`: bytes of fingerprint table read from memory);
    `bitmap` removes an exact store left beside the bitmap."""
    if kind == "exact":
        return ExactSeenSet(path, bits, functions, cache)
    for stale in _exact_paths(Path(path)):
        stale.unlink(missing_ok=True)  # these bits are the whole seen-set from now on
    return BitmapSeenSet(path, bits, functions)


def count_bits(path: str | Path) -> int:
    """Bits set in a file, read with pread (no mapping, so nothing lands in RSS)."""
    n, chunk = 0, 1 << 20
    fd = os.open(path, os.O_RDONLY)
    try:
        offset = 0
        while data := os.pread(fd, chunk, offset):
            n += int.from_bytes(data, "little").bit_count()
            offset += len(data)
    finally:
        os.close(fd)
    return n


def expected_loss(bits: int, functions: int, set_bits: int) -> float:
    """Expected distinct new URLs a pure bitmap dropped so far, from its fill alone.

    K=1: each admitted URL set one new bit, so `set_bits` URLs were admitted out of n offered,
    where set_bits = m(1 - e^(-n/m)); the loss is n - set_bits. K > 1: admitted a from the fill
    (1 - e^(-ka/m) of the bits set), and each URL offered while the false-positive rate was f
    was dropped with probability f: the integral of f/(1-f) over the a admitted.
    """
    m = float(bits)
    fill = min(set_bits / m, 1 - 1e-12)
    if functions == 1:
        return -m * math.log1p(-fill) - set_bits
    admitted = -m / functions * math.log1p(-fill)
    steps, total = 256, 0.0
    for i in range(steps):
        x = admitted * (i + 0.5) / steps
        f = false_positive_rate(bits, functions, int(x))
        total += f / (1 - f) if f < 1 else 0.0
    return total * admitted / steps


def false_positive_rate(bits: int, functions: int, items: int) -> float:
    """Expected false-positive rate of a Bloom filter: (1 - e^(-kn/m))^k."""
    return (1.0 - math.exp(-functions * items / bits)) ** functions
