"""CDXJ indexes of the WARC files `output warc` writes: pywb's format, the lines `cdxj-indexer`
writes with its default fields, built as the records are written instead of by reading the
files again.

Each `response` or `revisit` record gives one line: its SURT key, its 14-digit timestamp and a
JSON object of `url`, `mime`, `status`, `digest`, `length`, `offset` and `filename`, in that
order, each field only when cdxj-indexer would write it (a 304's revisit without HTTP headers
has no status). The WARC writer knows each record's offset and gzip member's length when it
appends it, so `WarcIndex.add` makes the line then (a SURT key, a JSON dump: ~40 µs) and
appends it to an unsorted side file `NAME.cdxj.open`. When the WARC file is closed the side file
is sorted into `NAME.cdxj` beside `NAME.warc.gz` in a worker thread (`Sorter`): an external
merge sort in chunks of `SORT_CHUNK` bytes, at most `MERGE_FAN` runs merged at once, so its
memory and descriptors are constants whatever the file's size (the index of one file is
about 300 bytes a record). The chunk is small on purpose: its lines are Python strings, each
a small object of the interpreter's allocator, whose 1 MiB arenas stay mapped while any
object in them lives: with 4 MiB chunks a daemon's heap swung by up to 4 MB at every WARC
file's close (docs/architecture.md, the long-lived structures).

`index_warc` indexes a WARC file by reading it, with cdxj-indexer itself: for a file whose side
file was lost (a write error, a kill between the WARC's close and the sort) and for
`larbinpy wacz` when a WARC file has no index beside it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import IO, Any

import surt
from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser
from warcio.timeutils import iso_date_to_timestamp

log = logging.getLogger("larbinpy.outputs")

# bytes of lines sorted in memory at once: with the strings' headers, within one arena of the
# interpreter's allocator (a chunk's sort holds the GIL, so a small one is short too)
SORT_CHUNK = 512 << 10
MERGE_FAN = 64  # sorted runs merged at once (files open); more are merged in rounds
INDEX_SUFFIX = ".cdxj"
# cdxj-indexer's CDXJIndexer.RE_SPACE: a media type ends at a `;` or a space. (cdxj_indexer
# itself is imported only to read a file: it brings multipart and py3amf, which a crawl's
# memory need not carry; docs/benchmarks.md has the RSS figures)
MEDIA_TYPE_END = re.compile(r"[;\s]")
# what warcio's reader takes for an HTTP status line (cdxj-indexer does not verify it)
HTTP_PARSER = StatusAndHeadersParser(["HTTP/1.0", "HTTP/1.1"], verify=False)


def index_name(warc: Path) -> Path:
    """`NAME.cdxj` beside `NAME.warc.gz` (or `NAME.warc`)."""
    name = warc.name
    for ext in (".warc.gz", ".warc"):
        if name.endswith(ext):
            return warc.with_name(name[: -len(ext)] + INDEX_SUFFIX)
    return warc.with_name(name + INDEX_SUFFIX)


def surt_key(url: str) -> str:
    """The SURT sort key of a URL, as cdxj-indexer makes it (the URL itself if surt fails)."""
    try:
        key: str = surt.surt(url)
    except Exception:  # noqa: BLE001 - cdxj-indexer falls back to the URL on any error
        return url
    return key


def parse_http(block: bytes | None) -> StatusAndHeaders | None:
    """A record's HTTP status line and headers as warcio's reader parses them (None: none)."""
    if not block:
        return None
    try:
        http: StatusAndHeaders = HTTP_PARSER.parse(BytesIO(block))
    except EOFError:
        return None
    return http


@dataclass(frozen=True)
class Entry:
    """What the index needs of one record, before it knows where in which file it lands."""

    url: str  # WARC-Target-URI
    date: str  # WARC-Date
    rec_type: str  # response or revisit
    digest: str | None  # WARC-Payload-Digest
    http: StatusAndHeaders | None  # the record's HTTP headers, as parsed by warcio's reader
    length: int  # bytes of the record's gzip member

    def fields(self, offset: int, filename: str) -> dict[str, str]:
        """The JSON object of the line: cdxj-indexer's default fields, in its order."""
        out = {"url": self.url}
        mime = self._mime()
        if mime is not None:
            out["mime"] = mime
        if self.http:
            out["status"] = self.http.get_statuscode()
        if self.digest is not None:
            out["digest"] = self.digest
        out["length"] = str(self.length)
        out["offset"] = str(offset)
        out["filename"] = filename
        return out

    def _mime(self) -> str | None:
        """`warc/revisit`, or the response's media type without its parameters."""
        if self.rec_type == "revisit":
            return "warc/revisit"
        value = self.http.get_header("content-type") if self.http else None
        if value:
            value = MEDIA_TYPE_END.split(value, 1)[0].strip()
        return value

    def line(self, offset: int, filename: str) -> str:
        """The CDXJ line of this record at `offset` in `filename`, newline included."""
        return (f"{surt_key(self.url)} {iso_date_to_timestamp(self.date)} "
                f"{json.dumps(self.fields(offset, filename))}\n")


class WarcIndex:
    """The index of one WARC file being written: unsorted lines in `NAME.cdxj.open`."""

    def __init__(self, warc_name: str, folder: Path) -> None:
        self.filename = warc_name  # the final name of the WARC file (the lines' `filename`)
        self.path = index_name(folder / warc_name).with_suffix(".cdxj.open")
        self.file: IO[str] | None = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        self.lines = 0
        self.broken = False  # a write failed: the WARC file is indexed by reading it instead

    def add(self, entry: Entry, offset: int) -> None:
        """The line of a record just appended at `offset`; never raises (the record is
        written: a failure here only means indexing the file by reading it later)."""
        if self.file is None:
            return
        try:
            self.file.write(entry.line(offset, self.filename))
            self.lines += 1
        except (OSError, ValueError) as exc:  # ValueError: surt or JSON refused the record
            log.error("CDXJ index of %s: %s; the file will be indexed by reading it",
                      self.filename, exc)
            self.broken = True
            self._close_file()

    def _close_file(self) -> None:
        """Close the side file, ignoring a failed flush (then the index is broken)."""
        if self.file is None:
            return
        try:
            self.file.close()
        except OSError as exc:
            log.error("CDXJ index of %s: %s; the file will be indexed by reading it",
                      self.filename, exc)
            self.broken = True
        self.file = None

    def finish(self) -> Path:
        """Close the side file (before the sort); its path."""
        self._close_file()
        return self.path

    def discard(self) -> None:
        """Drop the side file (its WARC file was never closed)."""
        self._close_file()
        with contextlib.suppress(OSError):
            self.path.unlink()


def sort_lines(lines: Iterable[str], out: IO[str], scratch: Path,
               chunk: int = SORT_CHUNK, fan: int = MERGE_FAN) -> int:
    """Write `lines` sorted into `out`, identical neighbours once (as cdxj-indexer's
    SortingWriter does); runs of `chunk` bytes are sorted in memory and spilled to files
    `scratch.N`, merged at the end, `fan` at a time (more in rounds, each writing one longer
    run). The number of lines written."""
    runs: list[Path] = []
    names = (scratch.with_name(f"{scratch.name}.{n}") for n in itertools.count())
    buffer: list[str] = []
    size = 0
    try:
        for line in lines:
            buffer.append(line)
            size += len(line)
            if size >= chunk:
                runs.append(_spill(buffer, next(names)))
                buffer, size = [], 0
        buffer.sort()
        if not runs:
            return _write_unique(buffer, out)
        if buffer:
            runs.append(_spill(buffer, next(names)))
            buffer = []
        while len(runs) > fan:  # a round: the oldest `fan` runs into one
            group, runs = runs[:fan], runs[fan:]
            runs.append(next(names))  # (listed first: removed below if the merge fails)
            _merge(group, runs[-1])
        with contextlib.ExitStack() as stack:
            files = [stack.enter_context(open(r, encoding="utf-8")) for r in runs]
            return _write_unique(heapq.merge(*files), out)
    finally:
        for r in runs:
            with contextlib.suppress(OSError):
                r.unlink()


def _spill(buffer: list[str], path: Path) -> Path:
    """One sorted run on disk."""
    buffer.sort()
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(buffer)
    return path


def _merge(runs: list[Path], path: Path) -> None:
    """Sorted runs merged into one at `path` (duplicates kept: the last merge drops them);
    the runs deleted."""
    try:
        with contextlib.ExitStack() as stack, open(path, "w", encoding="utf-8") as f:
            files = [stack.enter_context(open(r, encoding="utf-8")) for r in runs]
            f.writelines(heapq.merge(*files))
    finally:
        for r in runs:
            with contextlib.suppress(OSError):
                r.unlink()


def _write_unique(lines: Iterable[str], out: IO[str]) -> int:
    """Write sorted lines, skipping a line equal to the one before."""
    last = None
    count = 0
    for line in lines:
        if line != last:
            out.write(line)
            count += 1
        last = line
    return count


def index_warc(warc: Path, out: IO[str]) -> None:
    """Index a WARC file by reading it, with cdxj-indexer (sorted, its default fields)."""
    from cdxj_indexer.main import CDXJIndexer

    CDXJIndexer(out, [str(warc)], sort=True).process_all()


def write_index(target: Path, fill: Any) -> None:
    """Write an index file atomically: `fill(file)` into `target.tmp`, fsync, rename."""
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(OSError):
        fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a side file, in the order written."""
    with open(path, encoding="utf-8") as f:
        yield from f


class Sorter:
    """Makes `NAME.cdxj` of each closed WARC file in one worker thread, off the event loop."""

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self.failed = 0  # indexes that could not be written (logged)

    def submit(self, warc: Path, index: WarcIndex) -> None:
        """Sort `index`'s side file into the index of `warc` (or read `warc` if it is
        broken)."""
        side = index.finish()
        if index.broken:  # the lines written are not all: read the file instead
            with contextlib.suppress(OSError):
                side.unlink()
            self.index(warc)
        else:
            self._run(self._make, warc, side)

    def index(self, warc: Path) -> None:
        """Index a closed WARC file by reading it (it has no side file)."""
        self._run(self._make, warc, None)

    def _run(self, *job: Any) -> None:
        """A job for the worker thread, started at the first."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cdxj")
        self.pool.submit(*job)

    def _make(self, warc: Path, side: Path | None) -> None:
        """In the worker: the index of `warc`, from its side file or (None) by reading it; a
        failure is logged, never raised."""
        target = index_name(warc)
        try:
            if side is None:
                write_index(target, lambda f: index_warc(warc, f))
            else:
                write_index(target, lambda f: sort_lines(read_lines(side), f,
                                                         side.with_suffix(".sort")))
        except Exception as exc:  # noqa: BLE001 - an index failure must never stop the crawl
            self.failed += 1
            log.error("could not write the CDXJ index %s: %s", target, exc)
        finally:
            if side is not None:
                with contextlib.suppress(OSError):
                    side.unlink()

    def wait(self) -> None:
        """Let every submitted index be written (at close), then stop the worker."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
