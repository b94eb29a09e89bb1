"""The recrawl schedule on disk: every fetched page's history and the time it is due again.

With `recrawl on`, the crawler `put`s every page it fetched (validators, digest, estimator
state, next due time) and `pop_due`s the pages whose time has come; `get` and `force` serve
`submit --force` and sitemap lastmod. Everything lives in `stateDir/schedule/`; memory is set
by the constants below, not by the number of pages.

Layout: a two-level timing wheel of append-only files of compressed record blocks.
- Fine buckets `n{b}.blk` hold the pages due in [b g, (b + 1) g) (g: the granularity); far
  buckets `f{k}.blk` the pages due in FAN fine buckets at once. A put goes to its far bucket
  unless that one was already spread out; when time reaches a far bucket it is read once and
  its records spread over its fine buckets (so a record is written at most twice, and puts
  far ahead go to few files: big blocks, good compression). A fine bucket is read once it has
  ended: pages come out at most one granularity late, never early, earliest bucket first.
- `index` (fpindex.FingerprintIndex): URL key -> fine bucket number (mod 2^24 - 1) of the
  page's current record (the bucket it is read from: its due time's, but for a copy made for
  a page long in flight). A record whose bucket is not the index's is stale (the page was put
  again since) and is skipped when read; a put that would land in the same bucket as the
  page's previous record moves one bucket later, so two records of a page never share one.
- `wheel`: the last far bucket spread out (and, while one is being spread, the sizes its fine
  files had before), written by rename.

Records: blocks of up to BLOCK_RECORDS pages: the URLs in one zlib stream, the rest in a
second (flags, times in ms as byte-shuffled int64 deltas, status, depth, priority, tag,
Last-Modified as an epoch when the text round-trips to the same string, else as text,
ETags, estimator state), then the raw 20-byte digests; a header with the record count, the
length and a CRC.

Crash contract (kill -9):
- a put is in memory until `flush()`: flush writes the blocks, then updates the index, so a
  kill in between leaves the page's previous record current (its new one stale);
- `position()` is the place of the oldest record popped and not yet put again (or dropped):
  reopening there pops again every page that was in flight, and skips those put since (their
  index entry moved on). The crawler saves it in its checkpoint, as DiskFrontier's cursors.
  A page in flight for more than FAN buckets is first given a copy of its record at the end
  of the last bucket read (`_rehome`), so the position, and the files kept, never reach back
  further than FAN buckets and a checkpoint interval, however long a visit waits;
- a torn last block (a write cut by the kill) is cut off on open; a far bucket cut while it
  was being spread out is spread again from its file (the fine files cut back first);
- files before the position go in `release(position)`, once the checkpoint is durable;
  `sync()` fsyncs everything for power loss.
"""

from __future__ import annotations

import bisect
import calendar
import contextlib
import functools
import json
import logging
import os
import re
import struct
import time
import zlib
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from larbinpy.frontier.diskqueue import _write_all
from larbinpy.frontier.fpindex import TOMBSTONE, FingerprintIndex, url_key
from larbinpy.frontier.state import StateError, fsync_dir

GRANULARITY = 60.0  # seconds a fine bucket spans: the most a page can come out late
FAN = 64  # fine buckets a far bucket spans
BLOCK_RECORDS = 1024  # records a block holds at most
BUFFER_RECORDS = 65536  # puts held in memory (all buckets) before they are written
# A far bucket's file is closed at this many records and, if its blocks are small (frequent
# flushes spread over many buckets), rewritten in whole blocks: each record at most once.
COMPACT_RECORDS = 4096
ZLEVEL = 6
MOD = TOMBSTONE  # index values are fine bucket numbers modulo this
Position = tuple[int, int, int]  # (fine bucket, byte offset of a block, record in it)

log = logging.getLogger("larbinpy.schedule")

_HEAD = struct.Struct("<HHII")  # magic, records, body bytes, crc32 of the body
_MAGIC = 0x5652
_LENS = struct.Struct("<II")  # compressed URL stream, compressed meta stream
_META = struct.Struct("<qIII")  # base due (ms), stats bytes, ETag bytes, LM text bytes
_INTS = 7  # int64 columns: due, due - fetched, fetched - captured, status, depth, prio, tag
_F_ETAG, _F_LM_EPOCH, _F_LM_TEXT, _F_ETAG_LM = 1, 2, 4, 8
_LM_MARK = "\x00"  # in a stored ETag: the Last-Modified epoch in hex was here (nginx's ETag)
_FILE = re.compile(r"([nf])(-?[0-9]+)(?:\.([0-9]+))?\.blk")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_IMF_DATE = re.compile(r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) (Jan|Feb|Mar|Apr|May|Jun|Jul"
                       r"|Aug|Sep|Oct|Nov|Dec) ([0-9]{4})")


@dataclass(slots=True)
class Visit:
    """One page's history as the schedule keeps it."""

    url: str
    due: float  # Unix time it is due again (kept to the millisecond)
    fetched_at: float = 0.0  # last fetch that got an answer (0: none)
    etag: str | None = None  # as the server sent it (echoed in If-None-Match)
    last_modified: str | None = None  # as sent (echoed in If-Modified-Since)
    digest: bytes = b""  # payload sha1 of the last capture (20 bytes; b"" none)
    captured_at: float = 0.0  # time of the capture that digest belongs to
    status: int = 0  # HTTP status of the last answer (0: none)
    depth: int = 0  # the job's remaining depth, priority and tag
    priority: int = 0
    tag: int = 0
    stats: bytes = b""  # the estimator's state (freshness.py), opaque here


@dataclass(slots=True)
class ScheduleFigures:
    """What the status page shows of the schedule (waiting counts include stale copies)."""

    scheduled: int  # pages
    due_now: int  # records due by now, not yet popped
    overdue: int  # of them, due more than one granularity ago
    max_lateness_s: float  # how late the oldest waiting one is (to a granularity)


# --- Last-Modified as an epoch ---


def lm_epoch(text: str) -> int | None:
    """The Unix time of an IMF-fixdate that formats back to exactly `text`, else None."""
    if len(text) != 29 or text[25:] != " GMT" or text[19] != ":" or text[22] != ":":
        return None
    day = _day_number(text[:16])
    hms = text[17:25]
    if day is None or not (hms[:2] + hms[3:5] + hms[6:]).isdigit():
        return None
    h, m, sec = int(hms[:2]), int(hms[3:5]), int(hms[6:])
    if h > 23 or m > 59 or sec > 59:
        return None
    return day * 86400 + h * 3600 + m * 60 + sec


@functools.lru_cache(maxsize=4096)
def _day_number(date: str) -> int | None:
    """Days since 1970 of "Tue, 01 Dec 2026" if it is written exactly as lm_text would."""
    m = _IMF_DATE.fullmatch(date)
    if not m:
        return None
    try:
        t = calendar.timegm((int(m.group(3)), _MONTHS.index(m.group(2)) + 1, int(m.group(1)),
                             0, 0, 0, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    day = t // 86400
    return day if _date_text(day) == date else None


@functools.lru_cache(maxsize=4096)
def _date_text(day: int) -> str:
    """ "Tue, 01 Dec 2026" for a day number."""
    t = time.gmtime(day * 86400)
    return f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year}"


def lm_text(epoch: int) -> str:
    """The IMF-fixdate of a Unix time."""
    day, sec = divmod(epoch, 86400)
    return f"{_date_text(day)} {sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d} GMT"


# --- blocks ---


def _url_of(visit: Visit) -> str:
    """Sort key of records in a block."""
    return visit.url


def _ms(t: float) -> int:
    """A time in whole milliseconds."""
    return round(t * 1000.0)


def _shuffle(data: bytes) -> bytes:
    """int64s byte-transposed (all first bytes, then all second bytes...): zlib then sees
    the runs of equal high bytes of small numbers."""
    return b"".join(data[i::8] for i in range(8))


def _unshuffle(data: bytes) -> bytes:
    """The inverse of _shuffle."""
    n, out = len(data) // 8, bytearray(len(data))
    for i in range(8):
        out[i::8] = data[i * n:(i + 1) * n]
    return bytes(out)


def _text(parts: list[str]) -> bytes:
    """Strings joined by newlines (none contains one: URLs and header values)."""
    return "\n".join(parts).encode("utf-8", "surrogateescape")


def _split(data: bytes, n: int) -> list[str]:
    """n strings from _text."""
    return data.decode("utf-8", "surrogateescape").split("\n") if n else []


def encode_block(visits: list[Visit]) -> bytes:
    """One block: header, compressed URLs, compressed rest, raw digests. Records are stored
    in URL order (a site's URLs side by side compress better)."""
    visits = sorted(visits, key=_url_of)
    n = len(visits)
    dues = [_ms(v.due) for v in visits]
    base = min(dues)
    flags, etags, lm_texts, epochs = bytearray(n), [], [], []
    ints = array("q", bytes(8 * _INTS * n))
    for i, v in enumerate(visits):
        fetched = _ms(v.fetched_at)
        ints[i] = dues[i] - base
        ints[n + i] = dues[i] - fetched
        ints[2 * n + i] = fetched - _ms(v.captured_at)
        ints[3 * n + i], ints[4 * n + i] = v.status, v.depth
        ints[5 * n + i], ints[6 * n + i] = v.priority, v.tag
        f, epoch = 0, None
        if v.last_modified is not None:
            epoch = lm_epoch(v.last_modified)
            if epoch is None:
                f |= _F_LM_TEXT
                lm_texts.append(v.last_modified)
            else:
                f |= _F_LM_EPOCH
                epochs.append(epoch)
        if v.etag is not None:
            f |= _F_ETAG
            etag = v.etag
            if epoch is not None and _LM_MARK not in etag:
                stamp = f"{epoch:x}"
                if stamp in etag:  # nginx: "mtime-size" in hex; the mtime is the LM
                    f |= _F_ETAG_LM
                    etag = etag.replace(stamp, _LM_MARK, 1)
            etags.append(etag)
        flags[i] = f
    ints.extend(epochs)
    stats = b"".join(v.stats for v in visits)
    etag_b, lm_b = _text(etags), _text(lm_texts)
    meta = b"".join((
        _META.pack(base, len(stats), len(etag_b), len(lm_b)), flags,
        bytes(len(v.stats) for v in visits), bytes(len(v.digest) for v in visits),
        stats, etag_b, lm_b, _shuffle(ints.tobytes())))
    urls = zlib.compress(_text([v.url for v in visits]), 9)
    metaz = zlib.compress(meta, ZLEVEL)
    body = b"".join((_LENS.pack(len(urls), len(metaz)), urls, metaz,
                     b"".join(v.digest for v in visits)))
    return _HEAD.pack(_MAGIC, n, len(body), zlib.crc32(body)) + body


def encode_visits(visits: list[Visit], site: bytes = b"") -> bytes:
    """Visits as bytes that travel (one block: a cluster hands pages over in it), followed by
    what their site learned (`site`, opaque here: the recrawl stage's site state)."""
    return encode_block(visits) + site


def decode_visits(data: bytes) -> tuple[list[Visit], bytes]:
    """The visits of `encode_visits` and the site's bytes after them; ValueError when the
    bytes do not begin with such a block."""
    if len(data) < _HEAD.size:
        raise ValueError("not a schedule block: too short")
    magic, n, length, crc = _HEAD.unpack_from(data)
    body = data[_HEAD.size:_HEAD.size + length]
    if magic != _MAGIC or len(body) != length or zlib.crc32(body) != crc:
        raise ValueError("not a schedule block: bad header or checksum")
    return decode_block(body, n), data[_HEAD.size + length:]


def block_urls(body: bytes, n: int) -> list[str]:
    """The URLs of a block body (no other field decoded)."""
    lu, _ = _LENS.unpack_from(body)
    return _split(zlib.decompress(body[8:8 + lu]), n)


def decode_block(body: bytes, n: int) -> list[Visit]:
    """The records of a block body."""
    lu, lm = _LENS.unpack_from(body)
    urls = _split(zlib.decompress(body[8:8 + lu]), n)
    meta = zlib.decompress(body[8 + lu:8 + lu + lm])
    digests = memoryview(body)[8 + lu + lm:]
    base, ls, le, ll = _META.unpack_from(meta)
    at = _META.size
    flags, slens, dlens = meta[at:at + n], meta[at + n:at + 2 * n], meta[at + 2 * n:at + 3 * n]
    at += 3 * n
    stats = meta[at:at + ls]
    n_etag = sum(1 for f in flags if f & _F_ETAG)
    n_text = sum(1 for f in flags if f & _F_LM_TEXT)
    etags = _split(meta[at + ls:at + ls + le], n_etag)
    lm_texts = _split(meta[at + ls + le:at + ls + le + ll], n_text)
    ints = array("q", _unshuffle(meta[at + ls + le + ll:]))
    out, si, di, ei, ti, pi = [], 0, 0, 0, 0, _INTS * n
    for i in range(n):
        f = flags[i]
        due = base + ints[i]
        fetched = due - ints[n + i]
        etag = lm = None
        if f & _F_LM_EPOCH:
            lm, pi = lm_text(ints[pi]), pi + 1
            if f & _F_ETAG_LM:
                etags[ei] = etags[ei].replace(_LM_MARK, f"{ints[pi - 1]:x}", 1)
        elif f & _F_LM_TEXT:
            lm, ti = lm_texts[ti], ti + 1
        if f & _F_ETAG:
            etag, ei = etags[ei], ei + 1
        out.append(Visit(urls[i], due / 1000, fetched / 1000, etag, lm,
                         bytes(digests[di:di + dlens[i]]), (fetched - ints[2 * n + i]) / 1000,
                         ints[3 * n + i], ints[4 * n + i], ints[5 * n + i], ints[6 * n + i],
                         stats[si:si + slens[i]]))
        si += slens[i]
        di += dlens[i]
    return out


# --- one bucket's file ---


class _Bucket:
    """A bucket's files (compacted ones, then the one appended to) and its pending puts."""

    __slots__ = ("blocks", "closed", "count", "path", "pending", "seq", "size", "stem")

    def __init__(self, directory: Path, stem: str, seq: int | None) -> None:
        self.stem, self.seq = stem, seq  # seq None: a single file (fine buckets)
        self.closed: list[tuple[Path, int, int]] = []  # compacted files: (path, bytes, records)
        self.path = directory / (f"{stem}.blk" if seq is None else f"{stem}.{seq}.blk")
        self.size = self.count = self.blocks = 0  # of the file appended to
        self.pending: list[Visit] = []

    def files(self) -> list[tuple[Path, int]]:
        """Every file with its bytes in use, oldest first."""
        return [(p, size) for p, size, _ in self.closed] + [(self.path, self.size)]

    def records(self) -> int:
        """Records written (stale ones included) and pending."""
        return sum(c for *_, c in self.closed) + self.count + len(self.pending)


def _blocks(files: list[tuple[Path, int]]) -> Iterator[tuple[int, bytes]]:
    """(records, body) of every block of these files, in order."""
    for path, size in files:
        if not size:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            off = 0
            while off < size:
                n, body, off = _read_block(fd, off, path)
                yield n, body
        finally:
            os.close(fd)


def _read_block(fd: int, off: int, path: Path) -> tuple[int, bytes, int]:
    """(records, body, offset of the next block) of the block at off."""
    head = os.pread(fd, _HEAD.size, off)
    magic, n, length, crc = _HEAD.unpack(head)
    body = os.pread(fd, length, off + _HEAD.size)
    if magic != _MAGIC or len(body) != length or zlib.crc32(body) != crc:
        raise StateError(f"{path}: damaged block at byte {off}; use --scratch")
    return n, body, off + _HEAD.size + length


def _scan(path: Path) -> tuple[int, int]:
    """(records, bytes) of a bucket file's whole blocks; a torn last block is cut off."""
    fd = os.open(path, os.O_RDWR)
    try:
        size, off, count = os.fstat(fd).st_size, 0, 0
        while off + _HEAD.size <= size:
            magic, n, length, crc = _HEAD.unpack(os.pread(fd, _HEAD.size, off))
            end = off + _HEAD.size + length
            if magic != _MAGIC:
                raise StateError(f"{path}: damaged block at byte {off}; use --scratch")
            if end > size or (end == size and zlib.crc32(os.pread(fd, length, off + _HEAD.size))
                              != crc):
                break
            off, count = end, count + n
        if off != size:
            log.info("%s: torn last block cut off (%d bytes)", path, size - off)
            os.ftruncate(fd, off)
        return count, off
    finally:
        os.close(fd)


# --- the schedule ---


class Schedule:
    """Pages by due time in a two-level timing wheel of block files, with an index by URL."""

    def __init__(self, directory: Path, saved: Position | None = None, *,
                 granularity: float = GRANULARITY, cache: int = 64 << 20,
                 buffer_records: int = BUFFER_RECORDS) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._buffer_max = buffer_records
        self._wheel = self.dir / "wheel"
        wheel = self._load_wheel(granularity)
        self._g = int(wheel["granularity_ms"])  # fine bucket width, ms
        self._near = int(wheel["near"])  # far buckets <= this one are spread out
        self.index = FingerprintIndex(self.dir / "index", cache)
        self._fine: dict[int, _Bucket] = {}
        self._far: dict[int, _Bucket] = {}
        self._open_files(wheel)
        self._order = sorted(self._fine)  # fine bucket numbers, for the reader
        self._pending = 0
        self._pending_new = 0  # pages among the pending puts that the index does not have
        # url -> (key, new value, old value or None): puts not yet written and indexed
        self._updates: dict[str, tuple[int, int, int | None]] = {}
        # url -> (value, position, record) of popped records not yet put again
        self._inflight: dict[str, tuple[int, Position, Visit]] = {}
        self._unsynced: set[Path] = set()
        self._spread_unsynced: list[list[Path]] = []  # files of far buckets spread since the
        self._spread_synced: list[list[Path]] = []  # last sync / whose copies are durable
        r, off, idx = saved or (min(self._order, default=0), 0, 0)
        self._r, self._off, self._skip = r, off, idx
        self._block: list[Visit] = []
        self._bi, self._boff = 0, off
        self._consumed = 0  # records of bucket r read so far

    # --- opening ---

    def _load_wheel(self, granularity: float) -> dict[str, Any]:
        """The wheel state (a new one when there is none); its granularity wins."""
        try:
            wheel: dict[str, Any] = json.loads(self._wheel.read_text())
        except FileNotFoundError:
            wheel = {"granularity_ms": max(1, _ms(granularity)), "near": -(1 << 40)}
            self._write_wheel(wheel)
            return wheel
        except (OSError, ValueError) as exc:
            raise StateError(f"{self._wheel}: unreadable ({exc}); use --scratch") from None
        if not isinstance(wheel, dict) or not {"granularity_ms", "near"} <= wheel.keys():
            raise StateError(f"{self._wheel}: not a schedule's wheel file; use --scratch")
        if wheel["granularity_ms"] != max(1, _ms(granularity)):
            log.info("%s: kept the saved granularity (%s ms)", self._wheel,
                     wheel["granularity_ms"])
        return wheel

    def _write_wheel(self, wheel: dict[str, Any]) -> None:
        """Replace the wheel file (kill-safe: a rename)."""
        tmp = self.dir / "wheel.tmp"
        tmp.write_text(json.dumps(wheel))
        os.replace(tmp, self._wheel)

    def _open_files(self, wheel: dict[str, Any]) -> None:
        """Find the bucket files, cut torn tails, undo a spreading cut short."""
        spreading = wheel.get("spreading")
        sizes = {int(b): s for b, s in wheel.get("sizes", {}).items()}
        far: dict[int, list[tuple[int, Path]]] = {}
        for entry in os.scandir(self.dir):
            if entry.name.endswith(".tmp"):  # a compaction cut short: the original is whole
                os.unlink(entry.path)
                continue
            m = _FILE.fullmatch(entry.name)
            if not m:
                continue
            num, path = int(m.group(2)), Path(entry.path)
            if m.group(1) == "f":
                if num <= self._near:  # spread out before a kill: done
                    path.unlink()
                else:
                    far.setdefault(num, []).append((int(m.group(3) or 0), path))
                continue
            if spreading is not None and num // FAN == spreading:
                if num not in sizes:  # made by the cut spreading: it is done again
                    path.unlink()
                    continue
                os.truncate(path, sizes[num])
            bucket = self._fine[num] = _Bucket(self.dir, f"n{num}", None)
            bucket.count, bucket.size = _scan(path)
        for k, parts in far.items():
            parts.sort()
            bucket = self._far[k] = _Bucket(self.dir, f"f{k}", parts[-1][0])
            for _, path in parts[:-1]:
                count, size = _scan(path)
                bucket.closed.append((path, size, count))
            bucket.count, bucket.size = _scan(parts[-1][1])
            bucket.blocks = bucket.count  # unknown: taken as small, compacted when full
        if spreading is not None:
            log.info("%s: spreading far bucket %s was cut short: done again", self.dir,
                     spreading)
            self._write_wheel({"granularity_ms": self._g, "near": self._near})

    # --- putting ---

    def __len__(self) -> int:
        return self.index.count + self._pending_new

    def put(self, visit: Visit) -> None:
        """Store (or replace) a page's history and due time; written at flush()."""
        self._put(visit, self._current_value(visit.url))

    def put_many(self, visits: Iterable[Visit]) -> None:
        """`put` each."""
        for v in visits:
            self.put(v)

    def _current_value(self, url: str) -> int | None:
        """The index value of the page's current record, written or pending (None: new)."""
        update = self._updates.get(url)
        if update is not None:
            return update[1]
        flying = self._inflight.get(url)
        if flying is not None:
            return flying[0]
        values = self.index.values(url_key(url))
        if not values:
            return None
        # A page put again without being popped, or another page with an equal key:
        # the URL in the record decides (rare; costs a read of that bucket).
        for value in values:
            if self._find(url, value) is not None:
                return value
        return None

    def _put(self, visit: Visit, old: int | None) -> None:
        """Queue the record in its bucket and its index update."""
        b = max(_ms(visit.due) // self._g, self._r)
        pending = self._updates.get(visit.url)
        index_old = pending[2] if pending is not None else old
        avoid = {old, index_old}
        while b % MOD in avoid:  # never two records of a page in one bucket
            b += 1
        if b * self._g > _ms(visit.due):
            visit = replace(visit, due=b * self._g / 1000)
        self._bucket(b).pending.append(visit)
        if pending is None and index_old is None:
            self._pending_new += 1
        self._updates[visit.url] = (url_key(visit.url), b % MOD, index_old)
        self._pending += 1
        if self._pending >= self._buffer_max:
            self.flush()

    def _bucket(self, b: int) -> _Bucket:
        """The bucket a record due in fine bucket b goes to now (fine or far)."""
        k = b // FAN
        if k <= self._near:
            bucket = self._fine.get(b)
            if bucket is None:
                bucket = self._fine[b] = _Bucket(self.dir, f"n{b}", None)
                bisect.insort(self._order, b)
            return bucket
        bucket = self._far.get(k)
        if bucket is None:
            bucket = self._far[k] = _Bucket(self.dir, f"f{k}", 0)
        return bucket

    def flush(self) -> None:
        """Write every pending record, then index it: from here a kill -9 keeps them."""
        for bucket in [*self._fine.values(), *self._far.values()]:
            if bucket.pending:
                self._write(bucket)
        assert not self._updates, "a pending put without its record"
        self._pending = self._pending_new = 0

    def _write(self, bucket: _Bucket) -> None:
        """Append a bucket's pending records as blocks (one write), then index the puts
        among them (a kill in between leaves the pages' previous records current)."""
        recs = bucket.pending
        blocks = [encode_block(recs[i:i + BLOCK_RECORDS])
                  for i in range(0, len(recs), BLOCK_RECORDS)]
        data = b"".join(blocks)
        fd = os.open(bucket.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _write_all(fd, data, bucket.size)
        finally:
            os.close(fd)
        bucket.size += len(data)
        bucket.count += len(recs)
        bucket.blocks += len(blocks)
        bucket.pending = []
        self._unsynced.add(bucket.path)
        for v in recs:
            update = self._updates.get(v.url)
            if update is not None and update[1] == _ms(v.due) // self._g % MOD:
                key, new, old = self._updates.pop(v.url)
                self.index.put(key, new, old)
                self._inflight.pop(v.url, None)
                self._pending -= 1
                self._pending_new -= int(old is None)
        if bucket.seq is not None and bucket.count >= COMPACT_RECORDS:
            self._close_file(bucket)

    def _close_file(self, bucket: _Bucket) -> None:
        """Close a far bucket's full file (rewritten in whole blocks if its are small) and
        start the next one. The rewrite replaces the file by a rename: a kill leaves either."""
        path, size, count = bucket.path, bucket.size, bucket.count
        if bucket.blocks * BLOCK_RECORDS > 2 * count:  # blocks under half full on average
            keep = [v for n, body in _blocks([(path, size)]) for v in decode_block(body, n)
                    if self.index.has(url_key(v.url), _ms(v.due) // self._g % MOD)]
            data = b"".join(encode_block(keep[i:i + BLOCK_RECORDS])
                            for i in range(0, len(keep), BLOCK_RECORDS))
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, data, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            size, count = len(data), len(keep)
        bucket.closed.append((path, size, count))
        assert bucket.seq is not None
        bucket.seq += 1
        bucket.path = self.dir / f"{bucket.stem}.{bucket.seq}.blk"
        bucket.size = bucket.count = bucket.blocks = 0

    # --- spreading a far bucket over its fine buckets ---

    def _spread_due(self, now_ms: int) -> None:
        """Spread every far bucket that time has reached."""
        limit = now_ms // (self._g * FAN)
        if self._near >= limit:
            return
        for k in sorted(k for k in self._far if k <= limit):
            self._spread(k)
        self._near = max(self._near, limit)
        self._write_wheel({"granularity_ms": self._g, "near": self._near})

    def _spread(self, k: int) -> None:
        """Move far bucket k's current records into its fine buckets."""
        far = self._far.pop(k)
        if far.pending:  # written (and indexed) first: the fine files get only moved records,
            self._write(far)  # which a spreading cut short can cut off and move again
        fine = range(k * FAN, (k + 1) * FAN)
        sizes = {b: self._fine[b].size for b in fine if b in self._fine}
        self._write_wheel({"granularity_ms": self._g, "near": self._near, "spreading": k,
                           "sizes": sizes})
        self._near = k  # records of k now belong to fine buckets
        for n, body in _blocks(far.files()):
            for v in decode_block(body, n):
                b = _ms(v.due) // self._g
                if not self.index.has(url_key(v.url), b % MOD):
                    continue  # a stale copy: dropped here
                if b < self._r:  # (the reader went past it: a put, re-indexed)
                    self._put(v, b % MOD)
                    continue
                self._move(v, b)
        for b in fine:
            bucket = self._fine.get(b)
            if bucket is not None and bucket.pending:
                self._write(bucket)
        self._write_wheel({"granularity_ms": self._g, "near": self._near})
        self._spread_unsynced.append([p for p, _ in far.files()])

    def _move(self, visit: Visit, b: int) -> None:
        """Queue a record in fine bucket b, writing the bucket's blocks as they fill."""
        bucket = self._bucket(b)
        bucket.pending.append(visit)
        if len(bucket.pending) >= BLOCK_RECORDS:
            self._write(bucket)

    # --- popping ---

    def pop_due(self, now: float, limit: int) -> list[Visit]:
        """Up to `limit` pages due by `now`, earliest bucket first (each bucket once ended)."""
        now_ms = int(now * 1000)
        self._spread_due(now_ms)
        out: list[Visit] = []
        while len(out) < limit:
            found = self._next(now_ms)
            if found is None:
                break
            visit, pos = found
            b = pos[0]  # the bucket it was read from: its due's, or a copy's (`_rehome`)
            url = visit.url
            if url in self._inflight:
                continue  # a copy already popped
            update = self._updates.get(url)
            if update is not None:  # put again since, not written yet: written now, so
                bucket = self._bucket_of(update[1])  # that a kill cannot lose both
                if bucket is not None and bucket.pending:
                    self._write(bucket)
                continue
            if not self.index.has(url_key(url), b % MOD):
                continue  # stale: the page was put again since
            self._inflight[url] = (b % MOD, pos, visit)
            out.append(visit)
        return out

    def _next(self, now_ms: int) -> tuple[Visit, Position] | None:
        """The next record of the ended buckets, with its position (None: none yet)."""
        while True:
            if self._bi < len(self._block):
                i = self._bi
                self._bi += 1
                self._consumed += 1
                return self._block[i], (self._r, self._boff, i)
            if (self._r + 1) * self._g > now_ms:
                return None  # the reader's bucket has not ended
            bucket = self._fine.get(self._r)
            if bucket is not None and self._off < bucket.size:
                self._load(bucket)
                continue
            if bucket is not None and bucket.pending:
                self._write(bucket)
                continue
            i = bisect.bisect_right(self._order, self._r)
            nxt = self._order[i] if i < len(self._order) else None
            target = now_ms // self._g
            new_r = target if nxt is None else min(nxt, target)
            if new_r <= self._r:
                return None
            self._r, self._off, self._skip, self._consumed = new_r, 0, 0, 0

    def _load(self, bucket: _Bucket) -> None:
        """Read the reader's next block (skipping records popped before a restart)."""
        fd = os.open(bucket.path, os.O_RDONLY)
        try:
            n, body, end = _read_block(fd, self._off, bucket.path)
        finally:
            os.close(fd)
        self._block, self._boff = decode_block(body, n), self._off
        self._bi, self._skip = self._skip, 0
        self._consumed += self._bi
        self._off = end

    def drop(self, url: str) -> bool:
        """Forget a page (popped or not); False if it was not scheduled."""
        update = self._updates.pop(url, None)
        if update is not None:  # the pending record stays unindexed: stale
            self._pending_new -= int(update[2] is None)
            value = update[2]
        else:
            value = self._current_value(url)
        self._inflight.pop(url, None)
        dropped = value is not None and self.index.drop(url_key(url), value)
        return dropped or update is not None

    # --- looking up ---

    def _bucket_of(self, value: int) -> _Bucket | None:
        """The bucket holding the records of the fine bucket an index value names (values
        repeat every MOD buckets: the first one at or after the reader's)."""
        for b in self._order[bisect.bisect_left(self._order, self._r):]:
            if b % MOD == value:
                return self._fine[b]
        for k in sorted(self._far):
            b = k * FAN + (value - k * FAN) % MOD
            if b < (k + 1) * FAN:
                return self._far[k]
        return None

    def _find(self, url: str, value: int) -> Visit | None:
        """The record of url in the bucket named by value (the newest copy), or None."""
        flying = self._inflight.get(url)
        if flying is not None and flying[0] == value:
            return flying[2]  # popped: the record as read (a copy `_rehome` made may differ)
        bucket = self._bucket_of(value)
        if bucket is None:
            return None
        found = None
        for v in bucket.pending:
            if v.url == url:
                found = v
        if found is not None:
            return found
        for n, body in _blocks(bucket.files()):
            urls = block_urls(body, n)
            if url in urls:
                found = decode_block(body, n)[len(urls) - 1 - urls[::-1].index(url)]
        return found

    def get(self, url: str) -> Visit | None:
        """The page's current history (None if it is not scheduled)."""
        update = self._updates.get(url)
        if update is not None:
            return self._find(url, update[1])
        value = self._current_value(url)
        return None if value is None else self._find(url, value)

    def force(self, url: str, now: float) -> bool:
        """Make a page due now (in the current bucket); False if it is not scheduled."""
        value = self._current_value(url)
        visit = None if value is None else self._find(url, value)
        if visit is None:
            return False
        self._put(replace(visit, due=min(visit.due, now)), value)
        return True

    def figures(self, now: float) -> ScheduleFigures:
        """Pages scheduled, records due and overdue, the oldest waiting one's lateness."""
        now_ms = int(now * 1000)
        due = overdue = 0
        oldest: int | None = None
        for b, bucket in self._fine.items():
            if b < self._r or b * self._g > now_ms:
                continue
            waiting = bucket.records() - (self._consumed if b == self._r else 0)
            if waiting <= 0:
                continue
            due += waiting
            if (b + 2) * self._g <= now_ms:
                overdue += waiting
            oldest = b if oldest is None else min(oldest, b)
        for k, bucket in self._far.items():
            b = k * FAN
            if b * self._g <= now_ms and bucket.records():
                due += bucket.records()
                oldest = b if oldest is None else min(oldest, b)
        late = max(0.0, (now_ms - oldest * self._g) / 1000) if oldest is not None else 0.0
        return ScheduleFigures(len(self), due, overdue, late)

    # --- checkpoint ---

    def position(self) -> Position:
        """Where a restart reads from: the oldest popped record not put again, else the reader.
        Pending puts are written first, so the pages they put again no longer hold it back;
        pages in flight since before the last FAN buckets are copied forward first
        (`_rehome`), so what a restart reads spans FAN buckets and a checkpointInterval, not
        the time a visit waited for its site."""
        self.flush()
        self._rehome()
        if self._bi < len(self._block):
            reader = self._r, self._boff, self._bi
        else:
            reader = self._r, self._off, self._skip
        return min([reader, *(pos for _, pos, _ in self._inflight.values())])

    def _rehome(self) -> None:
        """Give the pages popped before bucket r - FAN and still in flight a copy of their
        record at the end of bucket r - 1 (ended, read: nothing else is written there now),
        and make it their current record (the index names the bucket a record is read from,
        not its due time's) and their position: `release` may then delete the older files. A
        restart pops the copies at once, as it would have the originals. Without it, one
        visit that waited minutes for its site held every bucket file since, on disk and in
        memory. A page with a record in bucket r - 1 already (stale, or it would not be in
        flight) waits for the next checkpoint: two records of a page never share a bucket.
        The copies and the index are synced: the checkpoint about to be written names them."""
        home = self._r - 1
        if home // FAN > self._near:  # (bucket r - 1 must be a fine one)
            return
        old = [(url, flying) for url, flying in self._inflight.items()
               if flying[1][0] < home + 1 - FAN and flying[0] != home % MOD]
        if not old:
            return
        bucket = self._bucket(home)
        there = {u for n, body in _blocks(bucket.files()) for u in block_urls(body, n)}
        old = [(url, flying) for url, flying in old if url not in there]
        copies = [flying[2] for _, flying in old]
        blocks = [encode_block(copies[i:i + BLOCK_RECORDS])
                  for i in range(0, len(copies), BLOCK_RECORDS)]
        fd = os.open(bucket.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _write_all(fd, b"".join(blocks), bucket.size)
            os.fsync(fd)
        finally:
            os.close(fd)
        off = bucket.size
        for j, block in enumerate(blocks):
            for i, (url, (value, _, visit)) in enumerate(old[j * BLOCK_RECORDS:
                                                           (j + 1) * BLOCK_RECORDS]):
                self.index.put(url_key(url), home % MOD, value)
                self._inflight[url] = (home % MOD, (home, off, i), visit)
            off += len(block)
        bucket.size = off
        bucket.count += len(copies)
        bucket.blocks += len(blocks)
        self.index.sync()

    def sync(self) -> None:
        """Flush, then fsync every file written since the last sync (power loss)."""
        self.flush()
        for path in self._unsynced:
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        self._unsynced.clear()
        self.index.sync()
        fsync_dir(self.dir)
        self._spread_synced += self._spread_unsynced
        self._spread_unsynced = []

    def release(self, position: Position) -> None:
        """Delete what a restart from `position` (durably checkpointed) no longer reads."""
        r = min(position[0], self._r)
        while self._order and self._order[0] < r:
            b = self._order.pop(0)
            self._fine.pop(b).path.unlink(missing_ok=True)
        for paths in self._spread_synced:  # their records have durable fine copies
            for path in paths:
                path.unlink(missing_ok=True)
        self._spread_synced = []

    def close(self) -> None:
        """Flush and close (no fsync: call sync() first for power-loss safety)."""
        self.flush()
        self.index.close()
