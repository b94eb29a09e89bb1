"""The schedule's index: URL fingerprint -> the wheel bucket holding the page's current record.

`schedule.Schedule` looks a page up here on every put (is it known? where is its record?) and
for every record it pops (is this record the page's current one, or a stale copy left by a
later put?). It is `fptable.FingerprintTable`'s file of 2 KiB hash buckets of 256 uint64 slots,
with each slot split in two: the high 40 bits are the key (bits 24..63 of the URL's 64-bit
fingerprint, never 0), the low 24 bits the value. A key lives in hash bucket `key % buckets`,
from slot `(key >> 32) % 256` on (linear probing inside the bucket), so a doubling can rehash
from the slots alone. Values are updated in place; a slot is never emptied (a dropped page
keeps its slot with the value TOMBSTONE), so probing stays valid. Because of that, a put can
use the slots a lookup of its key found (`lookup`'s hint: the schedule looks a page up when it
is put and writes its entry at the next flush, other puts in between) as long as the slot it
chooses holds what it held and no doubling came: one probe a put, not two.

Two pages whose keys are equal (about N^2 / 2^41 pairs among N pages: 0.5 at 1M, 45 at 10M)
share every slot holding that key: `values` returns them all and the caller tells the pages
apart by the URL in their records.
"""

from __future__ import annotations

import os
from array import array
from pathlib import Path

import xxhash

from larbinpy.frontier.fptable import (
    _ORDER,
    BUCKET_BYTES,
    RESIZE_CHUNK,
    SLOTS,
    WINDOW,
    FingerprintTable,
)
from larbinpy.frontier.state import fsync_dir

VALUE_BITS = 24
VALUE_MASK = (1 << VALUE_BITS) - 1
TOMBSTONE = VALUE_MASK  # a dropped page's slot (values in use are below it)
# Of all slots, before doubling (FingerprintTable's 0.7 would double a 100M-page index at 75%
# load to 21 bytes a page). About 1 bucket in 200 is full at this load: it overflows into the
# next one, which costs a bucket read more for its keys.
MAX_LOAD = 0.85
# What a lookup saw, for the put that follows it (`lookup`, `put`): the bucket count, the
# slots holding the key (byte offset, value) and the offset of the first free slot after them
Hint = tuple[int, list[tuple[int, int]], int]
_KEY_AT = 3 if _ORDER == "little" else 0  # where a slot's 5 key bytes start
_FREE = bytes(8)  # a free slot


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
        # The window's bytes are searched with bytes.find, in C: the first free slot (8 zero
        # bytes at a slot's start), and the key (the top 5 bytes of a slot)
        data = self._window_bytes(start + 8 * home, home)
        at = data.find(_FREE)
        while at % 8 and at >= 0:  # zeros across two slots: go on from the next slot
            at = data.find(_FREE, at // 8 * 8 + 8)
        free = at // 8 if at >= 0 else -1
        found = []
        pattern = (key << VALUE_BITS).to_bytes(8, _ORDER)[_KEY_AT:][:5]
        at = data.find(pattern)
        while at >= 0:
            i = at // 8
            if at % 8 == _KEY_AT and (free < 0 or i < free):
                slot = int.from_bytes(data[8 * i:8 * i + 8], _ORDER)
                found.append((start + 8 * (home + i), slot & VALUE_MASK))
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

    def _window_bytes(self, at: int, home: int) -> bytes:
        """The bytes of the slots from `home` on: WINDOW of them, fewer at the bucket's end."""
        size = 8 * min(WINDOW, SLOTS - home)
        if self._reads_mapped:
            assert self._map is not None  # reads are mapped only while the table is
            return self._map[at:at + size]
        data = os.pread(self._fd, size, at)
        if len(data) != size:
            raise OSError(f"{self.path}: short read at {at}: the table was cut")
        return data

    def values(self, key: int) -> list[int]:
        """The values stored under key (usually none or one; tombstones left out)."""
        return [v for _, v in self._find(key)[0] if v != TOMBSTONE]

    def lookup(self, key: int) -> tuple[list[int], Hint]:
        """`values(key)`, and where they were: a later `put` of key given this hint stores
        without probing again while the slots it chose hold what they held."""
        found, free = self._find(key)
        return [v for _, v in found if v != TOMBSTONE], (self.buckets, found, free)

    def has(self, key: int, value: int) -> bool:
        """Whether key is stored with this value."""
        return value in self.values(key)

    def put(self, key: int, value: int, old: int | None = None, hint: Hint | None = None,
            ) -> None:
        """Store key -> value: in the slot holding key -> old (or a tombstone of key), else a
        new slot (a second page with an equal key gets its own). With the `hint` of a lookup
        of key since, its slots are used if the one chosen still holds what it held: slots
        are never emptied and keys never change in them, so then the probe would find the
        same ones (no doubling since: the bucket count is the same)."""
        if hint is not None and hint[0] == self.buckets:
            found, free = hint[1], hint[2]
            at, was = self._choose(key, found, free, old) if found else (free, 0)
            if self._slot(at) == was:
                self._put_at(key, value, at, was)
                return
        found, free = self._find(key)
        at, was = self._choose(key, found, free, old)
        self._put_at(key, value, at, was)

    @staticmethod
    def _choose(key: int, found: list[tuple[int, int]], free: int, old: int | None,
                ) -> tuple[int, int]:
        """(offset, slot there now) where key -> new goes, given the slots holding key."""
        for at, v in found:
            if v == old or (v == TOMBSTONE and old is None):
                return at, (key << VALUE_BITS) | v
        return free, 0

    def _put_at(self, key: int, value: int, at: int, was: int) -> None:
        """Store key -> value at offset `at`, whose slot holds `was` (0: a free slot)."""
        self._store((key << VALUE_BITS) | value, at)
        if was == 0 or was & VALUE_MASK == TOMBSTONE:
            self.count += 1
            if was == 0 and self.count > MAX_LOAD * SLOTS * self.buckets:
                self._double()

    def _slot(self, at: int) -> int:
        """The slot at a byte offset."""
        if self._reads_mapped:
            assert self._map is not None  # reads are mapped only while the table is
            return int.from_bytes(self._map[at:at + 8], _ORDER)
        return int.from_bytes(os.pread(self._fd, 8, at), _ORDER)

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
