"""Process set-up shared by the daemon and the benchmark: logging (text or JSON lines), event
loop, allocator, collector, and the check that an optional extra (`pip install
'larbinpy[EXTRA]'`) is there.

Every stage runs on the one loop this module starts (uvloop when installed, else asyncio's own).
Before it starts, glibc's allocator is told to keep some freed heap: lexbor builds a tree of about
25 bytes per byte of HTML and frees it a page later, and with glibc's defaults each page's tree
grows the heap with brk and trims it back, so the kernel zero-fills fresh pages for every page
parsed. With a 16 MiB pad the tree reuses the same heap pages page after page, which makes
parsing and the crawl's system time markedly cheaper (docs/benchmarks.md). It is a constant, not
a key: the memory it costs is 16 MiB once, whatever the crawl's size.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["HEAP_PAD", "MMAP_THRESHOLD", "JsonFormatter", "logs_are_json", "missing_extra",
           "run_loop", "setup_logging", "tune_allocator", "tune_gc"]

HEAP_PAD = 16 * 1024 * 1024
MMAP_THRESHOLD = 1024 * 1024
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # mallopt numbers, <malloc.h>
_tuned = False


def setup_logging(verbosity: int, log_file: str | None = None, log_format: str = "text") -> None:
    """Logs to stderr (or logFile): WARNING with -q, INFO by default, DEBUG with -v; as text
    lines, or one JSON object a line with `log_format` json (logFormat)."""
    level = logging.DEBUG if verbosity > 0 else logging.INFO if verbosity == 0 else logging.WARNING
    handler: logging.Handler
    if log_file:
        from logging.handlers import WatchedFileHandler  # (here: it costs a start-up ~10 ms)

        # WatchedFileHandler reopens the file when logrotate moved it; SIGHUP forces it too
        handler = WatchedFileHandler(log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        sys.excepthook = _log_uncaught  # a crash's traceback is a JSON line too
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class JsonFormatter(logging.Formatter):
    """`logFormat json`: a record as one JSON object on one line (json.dumps escapes newlines
    and, ASCII-only, any character the stream could not encode)."""

    def format(self, record: logging.LogRecord) -> str:
        """{"time", "level", "logger", "message"}, plus "exception" and "stack" when present."""
        import datetime
        import json

        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        entry = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry)


def logs_are_json() -> bool:
    """Whether setup_logging made every log line a JSON object (logFormat json)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def logs_to_file() -> bool:
    """Whether setup_logging sent the log to a file (logFile) rather than to stderr."""
    return any(isinstance(h, logging.FileHandler) for h in logging.getLogger().handlers)


def _log_uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """sys.excepthook with JSON logs: the uncaught exception as a CRITICAL record."""
    logging.getLogger("larbinpy").critical("uncaught exception", exc_info=(kind, exc, tb))


def missing_extra(what: str, module: str, extra: str) -> str | None:
    """None when `module` is installed, else a one-line message: `what` needs it, and
    `pip install 'larbinpy[extra]'` brings it (the crawler's own dependencies do not)."""
    import importlib.util  # (here: only the commands needing an extra ask)

    if importlib.util.find_spec(module) is not None:
        return None
    return f"{what} needs {module}, which is not installed: pip install 'larbinpy[{extra}]'"


def tune_allocator() -> bool:
    """Ask glibc malloc to keep HEAP_PAD of freed heap instead of trimming it; True if done."""
    global _tuned
    if _tuned:
        return True
    if _libc_name() != "glibc":
        return False  # musl, macOS: their allocators have no such knobs
    import ctypes

    # glibc is in the process already: its symbols are the program's (CDLL(None) is dlopen of
    # the program itself; ctypes.util.find_library would run ldconfig to name the same file)
    libc = ctypes.CDLL(None)
    # The trim threshold must exceed the pad, or free() would hand the pad straight back.
    # Setting them turns off glibc's sliding mmap threshold, so it is set too: blocks of 1 MiB
    # and more (a huge page's tree) are mapped apart and go back to the system when freed.
    _tuned = all(libc.mallopt(param, value) == 1 for param, value in (
        (_M_TOP_PAD, HEAP_PAD), (_M_TRIM_THRESHOLD, 2 * HEAP_PAD),
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD)))
    return _tuned


def _libc_name() -> str:
    """'glibc' under glibc (what platform.libc_ver() names first, without importing platform
    and reading the interpreter's binary when the C library does not say)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")[0]
    except (AttributeError, ValueError, OSError):  # not glibc (macOS has no such name)
        import platform

        return platform.libc_ver()[0]


def tune_gc() -> None:
    """Fewer garbage collections: a crawl allocates many short-lived objects per page and
    keeps few cycles, so the default gen-0 threshold (700) makes the collector run per page.

    What exists now (modules, config, stages) lives as long as the process: it is frozen out
    of every later collection. The young generations are collected first: what start-up left
    unreachable is there, since the modules' own garbage is collected as they are imported
    (gen 0 and 1 collections run as they go). A full collection would walk the ~50,000
    objects of the modules again to find nothing, and cost a start-up 10-20 ms."""
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)


T = TypeVar("T")  # what the coroutine run_loop runs returns


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a fresh uvloop loop when installed, else on asyncio's own loop."""
    tune_allocator()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


_early_stop = False  # a SIGTERM came before the crawler's loop had its own handler


def catch_early_sigterm() -> None:
    """From process start, a SIGTERM is remembered instead of killing the process: a service
    manager may stop the daemon while it is still starting, and that stop must be as clean as
    any other (the crawler asks `early_sigterm` when its loop takes the signal over)."""
    import signal

    def remember(signum: int, frame: object) -> None:
        global _early_stop
        _early_stop = True

    signal.signal(signal.SIGTERM, remember)


def early_sigterm() -> bool:
    """Did a SIGTERM come during start-up (see `catch_early_sigterm`)?"""
    return _early_stop
