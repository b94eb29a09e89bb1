"""The schedule's index: URL fingerprint -> the wheel bucket holding the page's current record.

`schedule.Schedule` looks a page up here on every put (is it known? where is its record?) and
for every record it pops (is this record the page's current one, or a stale copy left by a
later put?). It is `fptable.FingerprintTable`'s file of 2 KiB hash buckets of 256 uint64 slots,
with each slot split in two: the high 40 bits are the key (bits 24..63 of the URL's 64-bit
fingerprint, never 0), the low 24 bits the value. A key lives in hash bucket `key % buckets`,
from slot `(key >> 32) % 256` on (linear probing inside the bucket), so a doubling can rehash
from the slots alone. Values are updated in place; a slot is never emptied (a dropped page
keeps its slot with the value TOMBSTONE), so probing stays valid.

Two pages whose keys are equal (about N^2 / 2^41 pairs among N pages: 0.5 at 1M, 45 at 10M)
share every slot holding that key: `values` returns them all and the caller tells the pages
apart by the URL in their records.
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path

import xxhash

from larbinpy.frontier.fptable import _ORDER, BUCKET_BYTES, RESIZE_CHUNK, SLOTS, FingerprintTable
from larbinpy.frontier.state import fsync_dir

VALUE_BITS = 24
VALUE_MASK = (1 << VALUE_BITS) - 1
TOMBSTONE = VALUE_MASK  # a dropped page's slot (values in use are below it)
# Of all slots, before doubling (FingerprintTable's 0.7 would double a 100M-page index at 75%
# load to 21 bytes a page). About 1 bucket in 200 is full at this load: it overflows into the
# next one, which costs a bucket read more for its keys.
MAX_LOAD = 0.85
_KEY_AT = 3 if _ORDER == "little" else 0  # where a slot's 5 key bytes start


def url_key(url: str) -> int:
    """The 40-bit, non-zero key of a URL."""
    return (xxhash.xxh3_64_intdigest(url.encode("utf-8", "surrogateescape")) >> 24) or 1


class FingerprintIndex(FingerprintTable):
    """Keys (40 bits) to values (24 bits) in FingerprintTable's bucket file."""

    def _find(self, key: int) -> tuple[list[tuple[int, int]], int]:
        """([(byte offset, value)] of the slots holding key, the offset of the first free slot
        after its home slot)."""
        home = (key >> 32) % SLOTS
        b = key % self.buckets
        start = b * BUCKET_BYTES
        window = self._read_window(start + 8 * home, home)
        free = window.index(0) if 0 in window else -1
        found = []
        # The key is the top 5 bytes of a slot: found with bytes.find, in C.
        data, pattern = window.tobytes(), (key << VALUE_BITS).to_bytes(8, _ORDER)[_KEY_AT:][:5]
        at = data.find(pattern)
        while at >= 0:
            i = at // 8
            if at % 8 == _KEY_AT and (free < 0 or i < free):
                found.append((start + 8 * (home + i), window[i] & VALUE_MASK))
            at = data.find(pattern, at + 1)
        if free >= 0:  # a key sits between its home slot and the first free one
            return found, start + 8 * (home + free)
        found, i = [], home  # rare: past the window
        whole = self._whole(b)
        for _ in range(SLOTS):
            slot = whole[i]
            if slot == 0:
                return found, start + 8 * i
            if slot >> VALUE_BITS == key:
                found.append((start + 8 * i, slot & VALUE_MASK))
            i = (i + 1) % SLOTS
        # A full bucket (about 1 in 200 near MAX_LOAD) overflows into the next ones.
        for n in range(1, self.buckets):
            start = (b + n) % self.buckets * BUCKET_BYTES
            for i, slot in enumerate(self._whole((b + n) % self.buckets)):
                if slot == 0:
                    return found, start + 8 * i
                if slot >> VALUE_BITS == key:
                    found.append((start + 8 * i, slot & VALUE_MASK))
        raise AssertionError("index full")  # the load limit keeps free slots

    def values(self, key: int) -> list[int]:
        """The values stored under key (usually none or one; tombstones left out)."""
        return [v for _, v in self._find(key)[0] if v != TOMBSTONE]

    def has(self, key: int, value: int) -> bool:
        """Whether key is stored with this value."""
        return value in self.values(key)

    def put(self, key: int, value: int, old: int | None = None) -> None:
        """Store key -> value: in the slot holding key -> old (or a tombstone of key), else a
        new slot (a second page with an equal key gets its own)."""
        found, free = self._find(key)
        for at, v in found:
            if v == old or (v == TOMBSTONE and old is None):
                self._store((key << VALUE_BITS) | value, at)
                if v == TOMBSTONE:
                    self.count += 1
                return
        self._store((key << VALUE_BITS) | value, free)
        self.count += 1
        if self.count > MAX_LOAD * SLOTS * self.buckets:
            self._double()

    def drop(self, key: int, value: int) -> bool:
        """Mark the slot key -> value dropped; False if there is none."""
        for at, v in self._find(key)[0]:
            if v == value:
                self._store((key << VALUE_BITS) | TOMBSTONE, at)
                self.count -= 1
                return True
        return False

    def _double(self) -> None:
        """Rehash into twice the buckets, from the keys in the slots (tombstones dropped)."""
        nb, tmp, strays = self.buckets, Path(f"{self.path}.new"), []
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, 2 * nb * BUCKET_BYTES)
            for start in range(0, nb, RESIZE_CHUNK):
                data = os.pread(self._fd, RESIZE_CHUNK * BUCKET_BYTES, start * BUCKET_BYTES)
                every = memoryview(data).cast("Q").tolist()
                lo, hi = array("Q"), array("Q")
                for i in range(0, len(every), SLOTS):
                    b = start + i // SLOTS
                    live = [s for s in every[i:i + SLOTS] if s and s & VALUE_MASK != TOMBSTONE]
                    strays += [s for s in live if (s >> VALUE_BITS) % nb != b]  # overflowed
                    live = [s for s in live if (s >> VALUE_BITS) % nb == b]
                    lo.extend(_rebuild([s for s in live if not (s >> VALUE_BITS) & nb], strays))
                    hi.extend(_rebuild([s for s in live if (s >> VALUE_BITS) & nb], strays))
                os.pwrite(fd, lo.tobytes(), start * BUCKET_BYTES)
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
        for s in strays:  # keys that had overflowed into a neighbour: placed again
            self._store(s, self._find(s >> VALUE_BITS)[1])


def _rebuild(slots_in: list[int], strays: list[int]) -> list[int]:
    """A bucket's slots holding these slot values, each from its key's home slot (those that
    do not fit go to `strays`)."""
    slots = [0] * SLOTS
    if len(slots_in) > SLOTS:
        strays += slots_in[SLOTS:]
        slots_in = slots_in[:SLOTS]
    for s in slots_in:
        i = ((s >> VALUE_BITS) >> 32) % SLOTS
        while slots[i]:
            i = (i + 1) % SLOTS
        slots[i] = s
    return slots
