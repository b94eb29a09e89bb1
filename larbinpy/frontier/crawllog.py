"""The crawl log and the done-record: a line for every job that reaches its final outcome.

Every job (a URL admitted to the crawl) gets exactly one final line, fetched or not: a fetch's
outcome (success, err40X, timeout...), or a drop without a request (forbiddenRobots,
maxPagesPerSite as outOfScope, a dead site's noDNS/deniedNetwork/tlsError). A job a 429/503
sends back to its site's queue gets its line when it finally ends. URLs refused before they
become jobs (urlDup, outOfScope, tooDeep, trap at input) are counted, not logged one by one.

Both subscribe to `endings.Endings` (one event a job's final outcome). Two files, written
alike (`LineFile`): lines gather in memory and go out with one `write()` each in the end of the
loop turn's `CRAWL_LOG` phase (`turn.py`: after the turn's pages were parsed and output and
their due times scheduled), so a `kill -9` loses at most the lines of the turn it interrupts;
nothing is fsynced on this path.

- The crawl log (`crawlLog`, optional): one JSON object a line for the operator (`t`, `url`,
  `kind`, `status`, `bytes`, `ms`, `type`, `depth`, `via`, and `note` when the kind does not
  say why: the robots.txt failure, the timeout's limit; with `recrawl on`, `next` on the line of
  every page scheduled again: when it is due, and `new` on a revisit's whose page gave URLs
  never seen before: how many). Whole lines only: a failed write is
  cut back to the last whole line. Reopened by name on SIGHUP (logrotate).
- The done-record (`stateDir/done`): the URLs finished since the last checkpoint. On restart
  they are the `skip` set: the checkpoint's jobs and the FIFOs' replay include them, and the
  reader does not fetch them again. A checkpoint empties the file (its cursors and saved jobs
  already exclude those URLs), keeping only the skips not met yet.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from json.encoder import encode_basestring
from pathlib import Path

from larbinpy.frontier.durable import Store
from larbinpy.frontier.endings import Ended
from larbinpy.records import JobKind
from larbinpy.stats import counted
from larbinpy.turn import Phase, TurnEnd

log = logging.getLogger("larbinpy.crawllog")

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND
# One crawl-log line: the JSON json.dumps(ensure_ascii=False) would write, made by one string
# format (a dict and the generic encoder cost several times more on the hot path). Strings go
# through json's own C escaper (quotes, backslashes, control characters; non-ASCII kept);
# `kind` is an Outcome name, plain ASCII; `t` has json's meaning of round(t, 3).
_LINE = ('{"t":%.3f,"url":%s,"kind":"%s","status":%s,"bytes":%d,"ms":%d,"type":%s,'
         '"depth":%d,"via":%s%s}\n')


def _line(e: Ended) -> str:
    """The crawl-log line of one job's outcome (`note`, when given, says why in words; with
    recrawl, `next` when the page is due again, and `new` the URLs never seen before a
    revisit's page gave; `requisite` marks what a page (`via`) needed to render)."""
    job, status, ctype, note, due = e.job, e.status, e.ctype, e.note, e.due
    via = job.via
    extra = "" if note is None else ',"note":' + encode_basestring(note)
    if job.kind is JobKind.REQUISITE:
        extra += ',"requisite":true'
    if due is not None:
        extra += f',"next":{due:.3f}'
        if job.found and job.kind is JobKind.REVISIT:
            extra += f',"new":{job.found}'
    return _LINE % (time.time(), encode_basestring(job.url), e.kind.value,
                    "null" if status is None else status, e.nbytes, e.ms,
                    encode_basestring(ctype) if ctype else "null", job.depth,
                    "null" if via is None else encode_basestring(via), extra)


class LineFile(Store):
    """An append-only file of whole lines, gathered during a loop turn and written with one
    `write()` at its end (the `CRAWL_LOG` phase); a failed write is cut back to the last whole
    line and counted."""

    what = "log"  # the file, in the log's words

    def __init__(self, fd: int, turn: TurnEnd) -> None:
        self._fd = fd
        self._lines: list[str] = []
        self.turn = turn
        self.write_errors = 0
        turn.on(Phase.CRAWL_LOG, self.flush)

    def add(self, line: str) -> None:
        """One whole line (ending in a newline), written at the end of this turn."""
        self._lines.append(line)
        self.turn.due()

    def flush(self) -> None:
        """Write the gathered lines (one write)."""
        if self._lines:
            text = "".join(self._lines)
            self._lines.clear()
            self._write(self._fd, text)

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
                log.warning("%s lines lost (%s failed so far): %s", self.what,
                            counted(self.write_errors, "write"), exc)

    def close(self) -> None:
        """Write what is gathered and close the file."""
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1


class CrawlLog(LineFile):
    """The operator's crawl log (`crawlLog`): one JSON line a job's final outcome."""

    what = "crawl log"

    def __init__(self, path: Path, turn: TurnEnd) -> None:
        self.path = path
        super().__init__(_open(path), turn)
        # the turn's outcomes, made into lines in the CRAWL_LOG phase: by then the recrawl has
        # set their `due` and the parser what their pages discovered
        self._ended: list[Ended] = []

    def ended(self, e: Ended) -> None:
        """A job's final outcome (an `Endings` subscriber): its line, at the end of the turn."""
        self._ended.append(e)
        self.turn.due()

    def flush(self) -> None:
        """The turn's lines, written (one write)."""
        if self._ended:
            ended, self._ended = self._ended, []
            self._lines.extend(_line(e) for e in ended)
        super().flush()

    def reopen(self) -> None:
        """SIGHUP: write what is gathered, then reopen the crawl log by name (logrotate)."""
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
        try:
            self._fd = _open(self.path)
        except OSError as exc:
            self._fd = -1
            log.error("crawl log %s could not be reopened, lines are lost until the "
                      "next SIGHUP: %s", self.path, exc)

    def _write(self, fd: int, text: str) -> None:
        """(Nothing while the file could not be reopened.)"""
        if fd >= 0:
            super()._write(fd, text)


class DoneRecord(LineFile):
    """The URLs finished since the last checkpoint (`stateDir/done`), and, after a restart,
    the `skip` set they make. A store of the checkpoint (`Durable`): its position is its
    length when the checkpoint's snapshot is taken."""

    what = "done-record"

    def __init__(self, path: Path, resume: bool, turn: TurnEnd) -> None:
        """`resume`: read the done-record left by the previous run into `skip`."""
        self.path = path
        self.skip: set[str] = _read_urls(path) if resume else set()
        # read and written: a checkpoint reads back what finished after its snapshot
        super().__init__(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644), turn)
        if not resume:
            os.ftruncate(self._fd, 0)

    def ended(self, e: Ended) -> None:
        """A job's final outcome (an `Endings` subscriber): its URL; not a revisit's. The
        schedule decides revisits (a restart pops again only what was in flight), and a
        revisit's URL here would make a restart swallow that page's next outcome: its site's
        revisit never released, the site was fed no revisit again. So the record holds what
        the first pass finished since the last checkpoint, whatever the revisits."""
        if e.job.kind is not JobKind.REVISIT:
            self.add(e.job.url + "\n")

    def take_skip(self, url: str) -> bool:
        """Did this URL reach its outcome before a crash, after the last checkpoint? If so it
        is taken out of `skip` (once: a URL met again after that is a new job)."""
        if not self.skip or url not in self.skip:
            return False
        self.skip.discard(url)
        return True

    def sync(self) -> None:
        """(Not fsynced: a checkpoint keeps what it covers; see `release`.)"""

    def position(self) -> int:
        """The checkpoint's snapshot is being taken: the record's length now (what finished
        before the snapshot; `flush` ran first)."""
        try:
            return os.lseek(self._fd, 0, os.SEEK_END)
        except OSError:
            return 0

    def release(self, mark: int) -> None:
        """The checkpoint of `mark` is durable: the record keeps only the skips still to meet
        and what finished after the mark (the checkpoint may have been written later, after
        its outputs were synced, and does not cover those).

        The new record replaces the old by rename, so a kill at any moment leaves one whole
        record: the old one (a superset) or the new one."""
        try:
            size = os.fstat(self._fd).st_size
            after = os.pread(self._fd, size - mark, mark) if size > mark else b""
            keep = "".join(u + "\n" for u in self.skip).encode("utf-8", "surrogateescape")
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as exc:  # the record stays as it is: longer, never missing a URL
            log.warning("the done-record was not trimmed at this checkpoint: %s", exc)
            return
        self._fd, old = fd, self._fd
        self._write(fd, (keep + after).decode("utf-8", "surrogateescape"))
        os.close(old)
        try:
            os.replace(tmp, self.path)
        except OSError as exc:  # the old record stands (a superset); appends go on in tmp
            log.warning("the done-record was not trimmed at this checkpoint: %s", exc)


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
