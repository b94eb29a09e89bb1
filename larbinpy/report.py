"""`larbinpy report CRAWL_LOG`: a crawl log summed up, as Heritrix's end-of-crawl reports do:
by outcome kind, HTTP status, content type and host, with the totals.

Not part of the crawl: it reads a crawl log (`crawlLog`, one JSON object a line:
`frontier/crawllog.py`), plain or gzipped (logrotate's), once, front to back. Memory is bounded
whatever the log's size (a 10 GB log included):

- a line is read up to MAX_LINE bytes; a longer one is skipped (counted unreadable);
- each table is a frequent-items sketch (Apache DataSketches, a Misra-Gries summary) of at most
  0.75 x 2^lg counters (`LG_HOSTS` for the host tables, `LG_OTHERS` for the others): its counts
  are exact while the table has fewer distinct keys, else each is within a stated error
  (at most 3.5 / 2^lg of the weight counted; the report says how much it is) and only the
  keys that surely count more than it are shown;
- the number of hosts is a HyperLogLog estimate (2^LG_DISTINCT registers, ~1.6% error);
- keys are cut to MAX_KEY characters.

A file none of whose first PROBE_LINES lines is a crawl-log line is not a crawl log: exit 2,
as for a file that cannot be read.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from datasketches import frequent_items_error_type, frequent_strings_sketch, hll_sketch

from larbinpy.stats import FAILURE_KINDS

MAX_LINE = 1 << 20  # bytes of a line read at most; a crawl-log line is a few hundred
PROBE_LINES = 100  # lines read before a file with no crawl-log line is refused
MAX_KEY = 200  # characters of a key (host, content type...) kept
LG_HOSTS = 13  # the host tables: 6,144 counters each (~2 MB of keys at most)
LG_OTHERS = 10  # statuses, content types, kinds: 768 counters each
LG_DISTINCT = 12  # HyperLogLog registers for the number of hosts
TOP = 20  # rows of each host table by default
_FAILURES = frozenset(k.value for k in FAILURE_KINDS)
_NO_FALSE_NEGATIVES = frequent_items_error_type.NO_FALSE_NEGATIVES
_NO_FALSE_POSITIVES = frequent_items_error_type.NO_FALSE_POSITIVES


class NotACrawlLog(Exception):
    """The file is missing, unreadable, or not a crawl log: the message says which."""


@dataclass
class Table:
    """Counts by key in bounded memory (a frequent-items sketch per column): `add` weights,
    `rows` the largest by the first column."""

    lg: int
    columns: tuple[str, ...]
    sketches: list[frequent_strings_sketch] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sketches = [frequent_strings_sketch(self.lg) for _ in self.columns]

    def add(self, key: str, *weights: int) -> None:
        """Add `weights` (one a column, in order) to `key`'s counts."""
        for sketch, weight in zip(self.sketches, weights, strict=True):
            if weight > 0:
                sketch.update(key, weight)

    def rows(self, n: int | None = None, more: Table | None = None) -> list[dict[str, Any]]:
        """The keys with the largest first column, each with every column's estimate (and
        those of the `more` table's columns it lacks): every key while the counts are exact,
        else only those that surely count more than the error (a log of a million hosts of a
        URL each has none to show)."""
        first = self.sketches[0]
        keys = [item[0] for item in first.get_frequent_items(_NO_FALSE_POSITIVES)]
        keys.sort(key=lambda k: (-first.get_estimate(k), k))
        rows = [{"key": k, **self.estimates(k)} for k in keys[:n]]
        if more is not None:
            for row in rows:
                row.update({c: v for c, v in more.estimates(row["key"]).items() if c not in row})
        return rows

    def estimates(self, key: str) -> dict[str, int]:
        """Every column's count of `key` (0 for a key the table does not hold)."""
        return {c: s.get_estimate(key) for c, s in zip(self.columns, self.sketches, strict=True)}

    def error(self) -> dict[str, int]:
        """The most any count of each column may be off by (0: exact)."""
        return {c: _max_error(s) for c, s in zip(self.columns, self.sketches, strict=True)}


def _max_error(sketch: frequent_strings_sketch) -> int:
    """The sketch's bound on the error of any count (the same for every key)."""
    items = sketch.get_frequent_items(_NO_FALSE_NEGATIVES, 0)
    if not items:
        return 0
    _, estimate, lower, upper = items[0]
    return int(upper - lower)


@dataclass
class Summary:
    """A crawl log summed up."""

    path: str
    lines: int = 0  # crawl-log lines counted
    unreadable: int = 0  # lines that are not crawl-log lines (torn, foreign, too long)
    bytes: int = 0
    failures: int = 0
    first_t: float | None = None
    last_t: float | None = None
    kinds: Table = field(default_factory=lambda: Table(LG_OTHERS, ("urls", "bytes")))
    statuses: Table = field(default_factory=lambda: Table(LG_OTHERS, ("urls",)))
    types: Table = field(default_factory=lambda: Table(LG_OTHERS, ("urls", "bytes")))
    hosts: Table = field(default_factory=lambda: Table(LG_HOSTS, ("urls", "bytes",
                                                                  "failures")))
    failing: Table = field(default_factory=lambda: Table(LG_HOSTS, ("failures",)))
    distinct: hll_sketch = field(default_factory=lambda: hll_sketch(LG_DISTINCT))

    def add(self, record: dict[str, Any]) -> None:
        """One crawl-log line."""
        url, kind = record["url"], record["kind"][:MAX_KEY]
        nbytes = record.get("bytes")
        nbytes = nbytes if isinstance(nbytes, int) and nbytes > 0 else 0
        failed = int(kind in _FAILURES)
        self.lines += 1
        self.bytes += nbytes
        self.failures += failed
        t = record.get("t")
        if isinstance(t, (int, float)):
            self.first_t = t if self.first_t is None else min(self.first_t, t)
            self.last_t = t if self.last_t is None else max(self.last_t, t)
        host = host_of(url)
        self.distinct.update(host)
        self.kinds.add(kind, 1, nbytes)
        status = record.get("status")
        self.statuses.add(str(status) if isinstance(status, int) else "none", 1)
        ctype = record.get("type")
        self.types.add(ctype[:MAX_KEY] if isinstance(ctype, str) else "none", 1, nbytes)
        self.hosts.add(host, 1, nbytes, failed)
        if failed:
            self.failing.add(host, 1)


def host_of(url: str) -> str:
    """host[:port] of a crawl-log URL (lowercase, without user info), cut to MAX_KEY."""
    netloc = url.partition("//")[2].partition("/")[0]
    return netloc.rpartition("@")[2].lower()[:MAX_KEY] or "(none)"


def _open(path: str) -> IO[bytes]:
    """The file, gunzipped when it is gzip; NotACrawlLog when it cannot be opened."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 (returned open: the caller closes it)
    except OSError as exc:
        raise NotACrawlLog(f"{path}: {exc.strerror or exc}") from None
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]  # (a binary IO)
    return raw


def _lines(f: IO[bytes]) -> Iterator[bytes | None]:
    """The file's lines, each at most MAX_LINE bytes; None for a longer one (skipped to its
    end without holding it)."""
    while line := f.readline(MAX_LINE):
        if len(line) == MAX_LINE and not line.endswith(b"\n"):
            while (rest := f.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield line


def _record(line: bytes | None) -> dict[str, Any] | None:
    """A crawl-log line's object (`url` and `kind` strings), else None."""
    if line is None:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if (isinstance(record, dict) and isinstance(record.get("url"), str)
            and isinstance(record.get("kind"), str)):
        return record
    return None


def summarize(path: str) -> Summary:
    """Read the crawl log at `path` once; NotACrawlLog when it is missing, unreadable or not
    a crawl log."""
    summary = Summary(path)
    try:
        with _open(path) as f:
            for line in _lines(f):
                record = _record(line)
                if record is None:
                    if line is not None and not line.strip():
                        continue  # an empty line says nothing
                    summary.unreadable += 1
                    if summary.lines == 0 and summary.unreadable >= PROBE_LINES:
                        break
                    continue
                summary.add(record)
    except (OSError, EOFError) as exc:  # a directory, a torn gzip...
        raise NotACrawlLog(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    if summary.lines == 0 and summary.unreadable:
        raise NotACrawlLog(
            f"{path} is not a crawl log: none of its first {summary.unreadable} lines is a "
            "crawl-log line (a JSON object with url and kind, as crawlLog writes)")
    return summary


def as_json(s: Summary, top: int) -> dict[str, Any]:
    """The report as one JSON object."""
    return {
        "crawl_log": s.path, "lines": s.lines, "unreadable_lines": s.unreadable,
        "bytes": s.bytes, "failures": s.failures, "first_t": s.first_t, "last_t": s.last_t,
        "hosts_estimated": round(s.distinct.get_estimate()),
        "by_kind": s.kinds.rows(), "by_status": s.statuses.rows(),
        "by_content_type": s.types.rows(), "hosts_by_urls": s.hosts.rows(top),
        "hosts_by_failures": s.failing.rows(top, s.hosts),
        # the most any count of a table may be off by (0: exact)
        "errors": {"by_kind": s.kinds.error(), "by_status": s.statuses.error(),
                   "by_content_type": s.types.error(), "hosts_by_urls": s.hosts.error(),
                   "hosts_by_failures": s.failing.error()},
    }


def _when(t: float | None) -> str:
    """A Unix time in UTC."""
    return "?" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _table(title: str, rows: list[dict[str, Any]], total: int, *tables: Table) -> list[str]:
    """A table as text: its title (and how exact its counts are), a header, one line a key,
    its share of `total` by the first column."""
    errors = {c: e for t in tables for c, e in t.error().items() if e}
    exact = "exact" if not errors else "each count within " + ", ".join(
        f"{e:,} {c}" for c, e in errors.items())
    columns = [c for c in rows[0] if c != "key"] if rows else list(tables[0].columns)
    width = max([len(r["key"]) for r in rows] + [4])
    out = [f"{title} ({exact})",
           f"  {'':<{width}}  " + "  ".join(f"{c:>13}" for c in columns) + "   share"]
    if not rows and total:
        out.append("  (none counts more than the error: no key stands out)")
    for r in rows:
        share = r[columns[0]] / total if total else 0.0
        out.append(f"  {r['key']:<{width}}  " + "  ".join(f"{r[c]:>13,}" for c in columns)
                   + f"  {share:6.1%}")
    return [*out, ""]


def as_text(s: Summary, top: int) -> str:
    """The report for a terminal."""
    lines = [f"crawl log {s.path}: {s.lines:,} lines from {_when(s.first_t)} to "
             f"{_when(s.last_t)}" + (f" ({s.unreadable:,} unreadable lines skipped)"
                                     if s.unreadable else ""),
             f"{s.lines:,} URLs, {s.bytes:,} bytes, {s.failures:,} failures, about "
             f"{round(s.distinct.get_estimate()):,} hosts", ""]
    lines += _table("By outcome kind", s.kinds.rows(), s.lines, s.kinds)
    lines += _table("By HTTP status", s.statuses.rows(), s.lines, s.statuses)
    lines += _table("By content type", s.types.rows(), s.lines, s.types)
    lines += _table(f"Hosts with the most URLs (top {top})", s.hosts.rows(top), s.lines,
                    s.hosts)
    lines += _table(f"Hosts with the most failures (top {top})", s.failing.rows(top, s.hosts),
                    s.failures, s.failing, s.hosts)
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """`larbinpy report CRAWL_LOG [--top N] [--json]`."""
    p = argparse.ArgumentParser(
        prog="larbinpy report",
        description="Sum up a crawl log (crawlLog; gzipped too) by outcome kind, HTTP status, "
        "content type and host, in bounded memory whatever its size; exit 2 when the file is "
        "missing or not a crawl log.")
    p.add_argument("crawl_log", metavar="CRAWL_LOG", help="the crawl log to read")
    p.add_argument("--top", type=int, default=TOP, metavar="N",
                   help=f"rows of each host table [{TOP}]")
    p.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    return p


def main(argv: list[str]) -> int:
    """Entry point of `larbinpy report`."""
    args = parser().parse_args(argv)
    if args.top < 1:
        print("larbinpy report: --top must be at least 1", file=sys.stderr)
        return 2
    try:
        summary = summarize(args.crawl_log)
    except NotACrawlLog as exc:
        print(f"larbinpy report: {exc}", file=sys.stderr)
        return 2
    text = (json.dumps(as_json(summary, args.top), indent=1) if args.json
            else as_text(summary, args.top))
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has all it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
