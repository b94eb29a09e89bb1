"""Where fetched pages go: the outputs named by `output` lines in larbin.conf.

Each output is one module of this package named like its `output` value (`save.py`,
`mirror.py`, `warc.py`, `links.py`), with a `make(cfg)` function returning an object behind the
`Output` interface: adding an output adds a module and nothing else here (`files.py`,
`hook.py`, `cdxj.py`, the WARC files' indexes, and `wacz.py`, `larbinpy wacz`, are helpers).
`Outputs` fans a page out to every configured one, applies `specificSearch` / `contentTypes`
(larbin's SPECIFICSEARCH: output only these) and calls the `userOutput` hook (`hook.py`).

Failures never stop the crawl. A write refused by the storage (disk full, saveDir not
writable, no file descriptor or memory left) keeps the page in a backlog, pauses the crawl
(`ready` turns false, `wait_ready()` blocks fetching) and retries every `retry_interval` seconds
until it succeeds; any other failure is logged and counted. A page is never both missing and
unreported: it is written, waits in a backlog (whose jobs the checkpoint saves, so a crash
fetches them again), or is counted in `lost` (a failure retrying cannot fix, or still refused
at close).

At a checkpoint, `flush()` makes every output's writes durable (fsync of files and folders)
before the checkpoint records positions past the pages: a power loss cannot take a page the
checkpoint says was done. Archival outputs (`Archive`, e.g. `warc.py`) get every
exchange, any status, plus robots.txt fetches and noDup duplicates; the others only 2xx pages.

`page_from_response` is the one place a response becomes a `Page` (the reader's pages, and the
robots.txt exchanges the robots stage hands to the archives).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from larbinpy.config import Config
from larbinpy.frontier.durable import Store
from larbinpy.links.scope import url_extension
from larbinpy.net.body import Body
from larbinpy.outputs.files import Unsynced, is_storage_error
from larbinpy.outputs.hook import Hook, PageView, load_hook
from larbinpy.records import Job, Page
from larbinpy.stats import Stats

if TYPE_CHECKING:
    from larbinpy.net.response import Response

__all__ = ["Archive", "Output", "Outputs", "PageView", "load_hook", "make_output",
           "page_from_response"]

log = logging.getLogger("larbinpy.outputs")

RETRY_INTERVAL = 5.0  # seconds between two attempts to write a backlog while paused


class Output(Protocol):
    """One destination for fetched pages (2xx ones, unless it is an `Archive`)."""

    def write(self, page: Page) -> None:
        """Store one response; raise OSError when the storage refuses it."""
        ...

    def flush(self) -> None:
        """Make everything written so far durable, files and folders (called at each
        checkpoint); raise OSError when it cannot."""
        ...

    def close(self) -> None:
        """Flush and release files."""
        ...


@runtime_checkable
class Archive(Output, Protocol):
    """An archival output: every exchange (any status, with `raw_body` and the request's
    headers), plus the exchanges that are not pages of the crawl."""

    def record_robots(self, page: Page) -> None:
        """A robots.txt exchange (or a sitemap's), whatever the filters say; raise OSError when
        the storage refuses it."""
        ...

    def record_duplicate(self, page: Page) -> None:
        """A page noDup found with a body already seen (a revisit); raise OSError when the
        storage refuses it."""
        ...


Step = Callable[[Page], None]  # one output's method for one page (`write`, `record_*`)


def make_output(name: str, cfg: Config) -> Output:
    """The output called `name`: module `larbinpy.outputs.<name>`, its `make(cfg)`."""
    if not name.isidentifier() or name in ("files", "hook", "cdxj", "wacz"):
        raise ValueError(f"output {name} is not available")
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError:
        raise ValueError(f"output {name} is not available") from None
    if not hasattr(module, "make"):
        raise ValueError(f"output {name} is not available")
    output: Output = module.make(cfg)
    return output


def page_from_response(job: Job, resp: Response, body: Body, started: float,
                       ip: str = "") -> Page:
    """One exchange (an aiohttp or `http1` response, its body read into `body`) as a Page.

    `started`: `time.monotonic()` when the request was sent; `ip`: the address to name when
    the connection does not say which one answered. The request's headers go with the raw
    body (`body.raw`, kept only when an archive wants the exchange as sent and received).
    """
    transport = resp.connection.transport if resp.connection else None
    peer = transport.get_extra_info("peername") if transport else None
    version = resp.version
    return Page(
        job=job, url=job.url, status=resp.status, headers=resp.headers, body=body.data,
        content_type=resp.content_type, ip=peer[0] if peer else ip, fetched_at=time.time(),
        elapsed=time.monotonic() - started, raw_body=body.raw, raw_headers=resp.raw_headers,
        http_version=f"HTTP/{version.major}.{version.minor}" if version else "HTTP/1.1",
        reason=resp.reason or "",
        request_headers=resp.request_info.headers if body.raw is not None else None,
    )


@dataclass
class Taken:
    """Files one output wrote, handed over to be made durable in a worker thread."""

    owner: Unsynced  # the output's record, to give the files back to if the sync fails
    part: Unsynced  # what the thread syncs (and empties as it goes)
    backup: Unsynced  # an untouched copy of it

    def sync(self) -> None:
        """Fsync the files and folders (in a worker thread)."""
        self.part.sync()


def _name(out: object) -> str:
    """An output's name for logs and the status page."""
    return getattr(out, "name", type(out).__name__)


class Outputs(Store):
    """Every configured output, behind the filters, with pause-and-retry on storage errors."""

    def __init__(self, cfg: Config, stats: Stats) -> None:
        self.stats = stats
        self.outputs = [make_output(name, cfg) for name in cfg.effective_outputs()]
        self.hook = (
            Hook(load_hook(cfg.user_output), stats, self._update) if cfg.user_output else None
        )
        self.extensions = frozenset(cfg.specific_search)
        self.types = frozenset(cfg.content_types)
        # (index, output) of the archival ones: every exchange as received, raw body included
        self.archives = [(i, o) for i, o in enumerate(self.outputs) if isinstance(o, Archive)]
        self.keep_raw = bool(self.archives)
        # per output, (its method, page) not done yet because its storage refused them
        self.backlogs: list[deque[tuple[Step, Page]]] = [deque() for _ in self.outputs]
        self.paused_reason: str | None = None
        self.retry_interval = RETRY_INTERVAL
        self.errors = 0  # failures that dropped a page from one output (logged)
        self.pauses = 0
        self.lost = 0  # pages an output never stored: dropped on error, or in a backlog at close
        self._ready = asyncio.Event()
        self._ready.set()
        self._retry_handle: asyncio.TimerHandle | None = None

    # --- what goes where ---

    def wanted(self, page: Page) -> bool:
        """SPECIFICSEARCH: with specificSearch/contentTypes set, output only those pages."""
        if not (self.extensions or self.types):
            return True
        return page.content_type in self.types or url_extension(page.url) in self.extensions

    def write(self, page: Page) -> None:
        """Hand a page to every output that wants it, and to the hook; never raises."""
        if not self.wanted(page):
            return
        # a revisit that found the copy kept (recrawl) is only an archive's record of it
        ok = 200 <= page.status < 300 and page.revisit is None
        targets = enumerate(self.outputs) if ok else self.archives  # archives: any status
        for i, out in targets:
            self._deliver(i, out.write, page)
        if ok and self.hook is not None:
            self.hook.call(page)
        self._update()

    def record_robots(self, page: Page) -> None:
        """A robots.txt exchange: to the archival outputs only, whatever the filters say."""
        for i, archive in self.archives:
            self._deliver(i, archive.record_robots, page)
        self._update()

    def record_duplicate(self, page: Page) -> None:
        """A page noDup found with a body already seen: archival outputs record a revisit."""
        if self.wanted(page):
            for i, archive in self.archives:
                self._deliver(i, archive.record_duplicate, page)
            self._update()

    def _deliver(self, i: int, step: Step, page: Page) -> None:
        """One page to output `i` (`step` is one of its methods), behind its backlog (order is
        kept)."""
        if self.backlogs[i]:
            self.backlogs[i].append((step, page))
            return
        try:
            step(page)
        except Exception as exc:  # noqa: BLE001 - an output failure must never kill the crawl
            if not is_storage_error(exc):
                self._dropped(i, page, exc)
                return
            self.backlogs[i].append((step, page))
            self._pause(i, exc)

    def _dropped(self, i: int, page: Page, exc: BaseException) -> None:
        """A failure that retrying cannot fix (bad URL for a file name...): log and count."""
        self.errors += 1
        self.lost += 1
        self.stats.output_errors += 1
        log.error("output %s could not store %s: %s", _name(self.outputs[i]), page.url, exc)

    # --- pause and resume ---

    def _pause(self, i: int, exc: BaseException) -> None:
        """The storage refused a write: pause fetching, retry later."""
        reason = f"output {_name(self.outputs[i])}: {exc}"
        if self.paused_reason is None:
            self.pauses += 1
            log.error("%s -- fetching paused until it can write again", reason)
        self.paused_reason = reason
        self._schedule_retry()

    def _schedule_retry(self) -> None:
        """Retry the backlogs in `retry_interval` seconds (when an event loop runs)."""
        if self._retry_handle is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (direct use): the caller calls retry() itself
        self._retry_handle = loop.call_later(self.retry_interval, self._retry_timer)

    def _retry_timer(self) -> None:
        """The retry timer fired."""
        self._retry_handle = None
        self.retry()

    def retry(self) -> bool:
        """Write the backlogs in order; True (and fetching resumes) when all are written."""
        for i, backlog in enumerate(self.backlogs):
            while backlog:
                step, page = backlog[0]
                try:
                    step(page)
                except Exception as exc:  # noqa: BLE001
                    if is_storage_error(exc):
                        self._pause(i, exc)
                        return False
                    self._dropped(i, page, exc)
                backlog.popleft()
        if self.paused_reason is not None:
            log.warning("outputs can write again (%s): fetching resumed", self.paused_reason)
            self.paused_reason = None
        self._update()
        return True

    def _update(self) -> None:
        """Recompute `ready` and wake or block `wait_ready()`."""
        if self.ready:
            self._ready.set()
        else:
            self._ready.clear()

    @property
    def ready(self) -> bool:
        """May fetching go on? False while a storage refuses writes or the hook is saturated."""
        return self.paused_reason is None and not (self.hook is not None and self.hook.busy)

    async def wait_ready(self) -> None:
        """Return as soon as fetching may go on (back-pressure point for the fetch path)."""
        while not self.ready:
            self._ready.clear()
            await self._ready.wait()

    def pending_jobs(self) -> list[Job]:
        """Jobs of the fetched pages still in a backlog: a checkpoint saves them, so a crash
        fetches them again rather than losing them unreported."""
        jobs = {id(page.job): page.job for backlog in self.backlogs for step, page in backlog
                if step.__name__ != "record_robots"}  # robots.txt is no job of the queues
        return list(jobs.values())

    def backlog(self) -> int:
        """Pages waiting for a storage to accept them."""
        return sum(len(b) for b in self.backlogs)

    def status(self) -> dict[str, Any]:
        """Figures for the status page and status.json."""
        hook = self.hook
        return {
            "outputs": [_name(o) for o in self.outputs],
            "paused": self.paused_reason is not None,
            "paused_reason": self.paused_reason,
            "pauses": self.pauses,
            "backlog": self.backlog(),
            "errors": self.errors,
            "lost": self.lost,
            "hook": None if hook is None else {
                "calls": hook.calls, "errors": hook.errors, "running": len(hook.tasks),
                "busy": hook.busy,
            },
        }

    # --- checkpoints and the end ---

    def flush(self) -> None:
        """Make every output durable (checkpoint time). A storage error pauses, like a failed
        write, and is raised once every output was tried: the checkpoint must not go on."""
        if self.paused_reason is not None:
            self.retry()
        failed: OSError | None = None
        for i, out in enumerate(self.outputs):
            try:
                out.flush()
            except Exception as exc:  # noqa: BLE001
                if is_storage_error(exc):
                    self._pause(i, exc)
                    failed = failed or exc
                else:
                    log.error("output %s could not flush: %s", _name(out), exc)
        self._update()
        if failed is not None:
            raise failed

    def take_unsynced(self) -> list[Taken]:
        """What the outputs that track their files (`unsynced`) wrote so far, taken to be
        fsynced off the event loop (`Taken.sync` in a worker thread)."""
        taken = []
        for out in self.outputs:
            owner = getattr(out, "unsynced", None)
            if isinstance(owner, Unsynced) and owner:
                part = owner.take()
                taken.append(Taken(owner, part, part.copy()))
        return taken

    @staticmethod
    def give_back(taken: list[Taken]) -> None:
        """A background sync of `take_unsynced()` did not complete: the next flush redoes it."""
        for t in taken:
            t.owner.merge(t.backup)

    async def drain(self, timeout: float = 30.0) -> None:
        """Before close: let running async hook calls finish, try the backlogs once more."""
        if self.hook is not None:
            await self.hook.drain(timeout)
        if self.backlog():
            self.retry()

    def close(self) -> None:
        """Close every output; pages still refused by their storage are reported as lost."""
        if self.backlog():
            self.retry()
        for i, backlog in enumerate(self.backlogs):
            if backlog:
                self.lost += len(backlog)
                log.error("output %s: %d fetched pages could not be written (%s) and are lost",
                          _name(self.outputs[i]), len(backlog), self.paused_reason)
                backlog.clear()
        if self._retry_handle is not None:
            self._retry_handle.cancel()
            self._retry_handle = None
        if self.hook is not None:
            self.hook.cancel()
        for out in self.outputs:
            try:
                out.close()
            except Exception as exc:  # noqa: BLE001
                log.error("output %s could not close: %s", _name(out), exc)
