"""The crawl log and the done-record: a line for every job that reaches its final outcome.

Every job (a URL admitted to the crawl) gets exactly one final line, fetched or not: a fetch's
outcome (success, err40X, timeout...), or a drop without a request (forbiddenRobots,
maxPagesPerSite as outOfScope, a dead site's noDNS/deniedNetwork/tlsError). A job a 429/503
sends back to its site's queue gets its line when it finally ends. URLs refused before they
become jobs (urlDup, outOfScope, tooDeep, trap at input) are counted, not logged one by one.

Two files, written alike: lines gather in memory and go out with one `write()` each at the end
of the event-loop turn (a `call_soon` callback), so a `kill -9` loses at most the lines of the
turn it interrupts; nothing is fsynced on this path.

- The crawl log (`crawlLog`, optional): one JSON object a line for the operator (`t`, `url`,
  `kind`, `status`, `bytes`, `ms`, `type`, `depth`, `via`, and `note` when the kind does not
  say why: the robots.txt failure, the timeout's limit; with `recrawl on`, `next` on the line of
  every page scheduled again: when it is due). Whole lines only: a failed write is
  cut back to the last whole line. Reopened by name on SIGHUP (logrotate).
- The done-record (`stateDir/done`): the URLs finished since the last checkpoint. On restart
  they are the `skip` set: the checkpoint's jobs and the FIFOs' replay include them, and the
  reader does not fetch them again. A checkpoint empties the file (its cursors and saved jobs
  already exclude those URLs), keeping only the skips not met yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

from larbinpy.records import Job, JobKind
from larbinpy.stats import Outcome, counted

log = logging.getLogger("larbinpy.crawllog")

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND
# One crawl-log line: the JSON json.dumps(ensure_ascii=False) would write, made by one string
# format (a dict and the generic encoder cost several times more on the hot path). Strings go
# through json's own C escaper (quotes, backslashes, control characters; non-ASCII kept);
# `kind` is an Outcome name, plain ASCII; `t` has json's meaning of round(t, 3).
_LINE = ('{"t":%.3f,"url":%s,"kind":"%s","status":%s,"bytes":%d,"ms":%d,"type":%s,'
         '"depth":%d,"via":%s%s%s}\n')


def _line(job: Job, kind: Outcome, status: int | None, nbytes: int, ms: int,
          ctype: str | None, note: str | None = None, due: float | None = None) -> str:
    """The crawl-log line of one job's outcome (`note`, when given, says why in words;
    `due`: recrawl, when the page is due again, written as `next`)."""
    via = job.via
    return _LINE % (time.time(), encode_basestring(job.url), kind.value,
                    "null" if status is None else status, nbytes, ms,
                    encode_basestring(ctype) if ctype else "null", job.depth,
                    "null" if via is None else encode_basestring(via),
                    "" if note is None else ',"note":' + encode_basestring(note),
                    "" if due is None else f',"next":{due:.3f}')


class CrawlLog:
    """Final lines of jobs: the operator's crawl log (when `path` is set) and the done-record."""

    def __init__(self, path: Path | None, done_path: Path, resume: bool, *,
                 before_flush: Callable[[], None] | None = None,
                 on_record: Callable[[Job, Outcome, int | None], None] | None = None) -> None:
        """`resume`: read the done-record left by the previous run into `skip`."""
        self.path = path
        self.done_path = done_path
        self.skip: set[str] = _read_urls(done_path) if resume else set()
        self._log_fd = _open(path) if path is not None else -1
        # read and written: a checkpoint reads back what finished after its snapshot
        self._done_fd = os.open(done_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if not resume:
            os.ftruncate(self._done_fd, 0)
        self._lines: list[str] = []
        self._urls: list[str] = []
        self._scheduled = False
        self.write_errors = 0
        # run before the done-record is written: whatever a finished job left for later in
        # this turn (the parser's held pages: links to the FIFOs, pages to the outputs) must
        # be out first, or a kill between the two would lose it
        self.before_flush = before_flush
        # told every final outcome (job, kind, HTTP status), crawlLog set or not: the status
        # page's last failures (daemon.status.RecentFailures); must be cheap and not raise
        self.on_record = on_record
        # recrawl (stages/revisits.py): told every page's final outcome and what its fetch
        # observed, it schedules the page again and returns when it is due (None: not at all)
        self.scheduler: Callable[[Job, Outcome, Any], float | None] | None = None

    @property
    def pending(self) -> bool:
        """Are final lines waiting for the end of this turn?"""
        return self._scheduled

    def finished_before(self, url: str) -> bool:
        """Did this URL reach its outcome before a crash, after the last checkpoint? (Once:
        a URL met again after that is a new job.)"""
        if not self.skip or url not in self.skip:
            return False
        self.skip.discard(url)
        return True

    def record(self, job: Job, kind: Outcome, status: int | None = None, nbytes: int = 0,
               ms: int = 0, ctype: str | None = None, note: str | None = None,
               answer: Any = None) -> None:
        """The final outcome of one job (written at the end of this loop turn); `note` says
        why in words when the kind does not (a robots.txt that could not be read, which
        timeout ran out); `answer`: what the fetch observed, for the recrawl's scheduler
        (None for a job that ended without a request)."""
        if self.skip and self.finished_before(job.url):
            return  # its line was written before the crash (a replayed job dropped again)
        due = None
        if self.scheduler is not None and job.kind is not JobKind.SITEMAP:
            due = self.scheduler(job, kind, answer)  # recrawl: when it is due again
        if self.on_record is not None:
            self.on_record(job, kind, status)
        if self._log_fd >= 0:
            self._lines.append(_line(job, kind, status, nbytes, ms, ctype, note, due))
        self._urls.append(job.url + "\n")
        if not self._scheduled:
            self._scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a test, or after it): write now
                self.flush()

    def flush(self) -> None:
        """Write the gathered lines (one write per file)."""
        self._scheduled = False
        if self._urls and self.before_flush is not None:
            self.before_flush()
        if self._lines:
            self._write(self._log_fd, "".join(self._lines))
            self._lines.clear()
        if self._urls:
            self._write(self._done_fd, "".join(self._urls))
            self._urls.clear()

    def _write(self, fd: int, text: str) -> None:
        """Append whole lines; on an error, cut the file back to its last whole line."""
        data = text.encode("utf-8", "surrogateescape")
        written = 0
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                written += n
                view = view[n:]
        except OSError as exc:
            self.write_errors += 1
            with contextlib.suppress(OSError):
                # (the file is O_APPEND and ours alone: this call's bytes are its last ones,
                # so its length is asked only when a write failed, not before every write)
                os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_END) - written)
            if self.write_errors == 1 or self.write_errors % 1000 == 0:
                log.warning("crawl log lines lost (%s failed so far): %s",
                            counted(self.write_errors, "write"), exc)

    def mark(self) -> int:
        """A checkpoint's snapshot is being taken: write what is gathered; the done-record's
        length now (what finished before the snapshot)."""
        self.flush()
        try:
            return os.lseek(self._done_fd, 0, os.SEEK_END)
        except OSError:
            return 0

    def checkpointed(self, mark: int) -> None:
        """The checkpoint of `mark` is durable: the done-record keeps only the skips still to
        meet and what finished after the mark (the checkpoint may have been written later,
        after its outputs were synced, and does not cover those).

        The new record replaces the old by rename, so a kill at any moment leaves one whole
        record: the old one (a superset) or the new one."""
        try:
            size = os.fstat(self._done_fd).st_size
            after = os.pread(self._done_fd, size - mark, mark) if size > mark else b""
            keep = "".join(u + "\n" for u in self.skip).encode("utf-8", "surrogateescape")
            tmp = self.done_path.with_name(self.done_path.name + ".tmp")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as exc:  # the record stays as it is: longer, never missing a URL
            log.warning("the done-record was not trimmed at this checkpoint: %s", exc)
            return
        self._done_fd, old = fd, self._done_fd
        self._write(fd, (keep + after).decode("utf-8", "surrogateescape"))
        os.close(old)
        try:
            os.replace(tmp, self.done_path)
        except OSError as exc:  # the old record stands (a superset); appends go on in tmp
            log.warning("the done-record was not trimmed at this checkpoint: %s", exc)

    def reopen(self) -> None:
        """SIGHUP: write what is gathered, then reopen the crawl log by name (logrotate)."""
        self.flush()
        if self.path is not None:
            if self._log_fd >= 0:
                os.close(self._log_fd)
            try:
                self._log_fd = _open(self.path)
            except OSError as exc:
                self._log_fd = -1
                log.error("crawl log %s could not be reopened, lines are lost until the "
                          "next SIGHUP: %s", self.path, exc)

    def close(self) -> None:
        """Write what is gathered and close both files."""
        self.flush()
        for fd in (self._log_fd, self._done_fd):
            if fd >= 0:
                os.close(fd)
        self._log_fd = self._done_fd = -1


def _open(path: Path) -> int:
    """Open a log file for appending, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, _FLAGS, 0o644)


def _read_urls(path: Path) -> set[str]:
    """The whole lines of a done-record (a torn last line is ignored)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    text = data[:data.rfind(b"\n") + 1].decode("utf-8", "surrogateescape")
    return set(text.splitlines())
