"""The `userOutput module:callable` hook: a user's function called with every output page.

The hook sees a read-only `PageView`. A plain function runs on the event loop (keep it quick,
or make it async); an async function (or one returning an awaitable) runs as a task, at most
`HOOK_CONCURRENCY` at once: when that many are running, `Hook.busy` is set so fetching waits
(back-pressure) instead of pages piling up in memory. Any exception is logged and counted.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from larbinpy.net.headers import Headers
from larbinpy.records import Page
from larbinpy.stats import Stats

log = logging.getLogger("larbinpy.outputs")

HOOK_CONCURRENCY = 16  # async hook calls running at once before fetching waits


@dataclass(frozen=True, slots=True)
class PageView:
    """What a hook sees of a page: read-only (frozen, immutable bytes, tuple of links)."""

    url: str
    final_url: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    links: Sequence[str]
    depth: int
    content_type: str
    ip: str
    fetched_at: float
    elapsed: float

    @classmethod
    def of(cls, page: Page) -> PageView:
        """A read-only view of `page`."""
        return cls(
            url=page.job.url, final_url=page.url, status=page.status,
            headers=_read_only(page.headers),
            body=bytes(page.body), links=tuple(page.links), depth=page.job.depth,
            content_type=page.content_type, ip=page.ip, fetched_at=page.fetched_at,
            elapsed=page.elapsed,
        )


def _read_only(headers: Any) -> Mapping[str, str]:
    """Headers that cannot be changed (aiohttp's are already a read-only proxy; the plain-http
    client's give theirs)."""
    from multidict import CIMultiDict, CIMultiDictProxy  # (here: only a hook needs it)

    if isinstance(headers, Headers):
        return headers.multidict()
    if isinstance(headers, CIMultiDictProxy | MappingProxyType):
        return headers
    return CIMultiDictProxy(CIMultiDict(headers or {}))


def load_hook(spec: str) -> Callable[[PageView], object]:
    """The callable named by `userOutput module:callable`."""
    module, _, attr = spec.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"userOutput {spec} is not callable")
    return obj


class Hook:
    """Calls the user's hook; runs async ones as bounded tasks."""

    def __init__(
        self, func: Callable[[PageView], object], stats: Stats, on_change: Callable[[], None]
    ) -> None:
        self.func = func
        self.stats = stats
        self.on_change = on_change  # told when `busy` may have changed
        self.tasks: set[asyncio.Future[Any]] = set()
        self.calls = 0
        self.errors = 0

    @property
    def busy(self) -> bool:
        """True while HOOK_CONCURRENCY async calls are running: fetching should wait."""
        return len(self.tasks) >= HOOK_CONCURRENCY

    def call(self, page: Page) -> None:
        """Call the hook with a read-only view of `page`; never raises."""
        self.calls += 1
        try:
            result = self.func(PageView.of(page))
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self.tasks.add(task)
                task.add_done_callback(self._done)
        except Exception:  # a user's hook must never kill the crawl
            self._failed(page.url)

    def _done(self, task: asyncio.Future[Any]) -> None:
        """An async call ended: count its failure, if any, and maybe release fetching."""
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.errors += 1
            self.stats.output_errors += 1
            log.error("userOutput hook failed", exc_info=task.exception())
        self.on_change()

    def _failed(self, url: str) -> None:
        """Log and count a failed call."""
        self.errors += 1
        self.stats.output_errors += 1
        log.exception("userOutput hook failed for %s", url)

    async def drain(self, timeout: float) -> None:
        """Wait for running async calls (at most `timeout` s), then cancel what is left."""
        if self.tasks:
            _, pending = await asyncio.wait(set(self.tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                log.error("userOutput: %d hook calls still running at exit were cancelled",
                          len(pending))

    def cancel(self) -> None:
        """Cancel running async calls (at close without `drain`), saying how many."""
        if self.tasks:
            log.error("userOutput: %d hook calls cancelled at exit", len(self.tasks))
        for task in list(self.tasks):
            task.cancel()
