"""The seen-set of the input stage: larbin's bitmap hash set, kept in a file in `stateDir`.

One bit per hash of a normalized URL, no URL strings kept, so memory is `hashSize` bits
whatever the crawl size. With `hashFunctions K` > 1 each URL sets K bits: a Bloom filter.
The bitmap is a memory-mapped file, so a restart keeps what was seen.

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

_hash64 = xxhash.xxh3_64_intdigest
_hash128 = xxhash.xxh3_128_intdigest
_MASK64 = (1 << 64) - 1
# Keys known to be seen, kept as strings in front of the bitmap: most links of a page were
# seen on the site's previous pages, and a set lookup is far cheaper than hashing the key
# and touching a random cache line of the bitmap. Bounded: emptied when full.
RECENT_MAX = 1 << 16
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


class BitmapSeenSet:
    """`bits`-bit bitmap in a memory-mapped file; K hash functions (K=1: larbin's hash set)."""

    def __init__(self, path: str | Path, bits: int, functions: int = 1) -> None:
        self.bits, self.k = bits, functions
        nbytes = (bits + 7) // 8
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != nbytes:
                os.ftruncate(fd, nbytes)  # sparse: untouched pages cost neither disk nor RAM
            self._map = mmap.mmap(fd, nbytes)
        finally:
            os.close(fd)
        self._recent: set[str] = set()  # only ever keys whose bits are all set

    def positions(self, key: str) -> list[int]:
        """Bit positions of a key (Kirsch-Mitzenmacher double hashing for K > 1)."""
        if self.k == 1:
            return [_hash64(key.encode()) % self.bits]
        h = _hash128(key.encode())
        h1, h2 = h & _MASK64, (h >> 64) | 1
        return [(h1 + i * h2) % self.bits for i in range(self.k)]

    def missing(self, keys: list[str]) -> list[str]:
        """The keys whose bits are not all set."""
        m, out, recent = self._map, [], self._recent
        if len(recent) > RECENT_MAX:
            recent.clear()
        keys = list(filterfalse(recent.__contains__, keys))  # a C loop: most keys are recent
        if self.k == 1:
            bits = self.bits
            for key in keys:
                p = _hash64(key.encode()) % bits
                if m[p >> 3] & (1 << (p & 7)):
                    if len(key) <= RECENT_KEY_MAX:
                        recent.add(key)
                else:
                    out.append(key)
            return out
        bits, k = self.bits, self.k
        for key in keys:
            # a seen key has every bit set; most links were seen, so test bit by bit and stop
            # at the first clear one rather than computing all K positions first
            h = _hash128(key.encode())
            h1, h2 = h & _MASK64, (h >> 64) | 1
            for i in range(k):
                p = (h1 + i * h2) % bits
                if not m[p >> 3] & (1 << (p & 7)):
                    out.append(key)
                    break
            else:
                if len(key) <= RECENT_KEY_MAX:
                    recent.add(key)
        return out

    def add(self, keys: Iterable[str]) -> None:
        """Set the bits of every key."""
        m = self._map
        for key in keys:
            for p in self.positions(key):
                m[p >> 3] |= 1 << (p & 7)

    def flush(self) -> None:
        """Write dirty pages to disk."""
        self._map.flush()

    def close(self) -> None:
        """Flush and unmap."""
        if not self._map.closed:
            self._map.flush()
            self._map.close()


def false_positive_rate(bits: int, functions: int, items: int) -> float:
    """Expected false-positive rate of a Bloom filter: (1 - e^(-kn/m))^k."""
    return (1.0 - math.exp(-functions * items / bits)) ** functions
