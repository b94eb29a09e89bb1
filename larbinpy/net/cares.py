"""c-ares (pycares) on the crawl's own event loop: the DNS stage's resolver (`LoopResolver`).

The DNS stage (`stages/dns.py`) makes one at its first query, so pycares (~15 ms of CPU to
import: its cffi library and its dataclasses) is loaded only by a crawl that resolves a host:
a daemon started without seeds waits for them without it.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import pycares

# c-ares's errors of a query no server answered (the stage asks such a host again later)
UNANSWERED = (pycares.errno.ARES_ETIMEOUT, pycares.errno.ARES_ECONNREFUSED)
_QUERY_TYPES = {"A": pycares.QUERY_TYPE_A, "AAAA": pycares.QUERY_TYPE_AAAA}


class DnsError(Exception):
    """A query failed: `args` are c-ares's error number and its words (pycares.errno)."""


class LoopResolver:
    """c-ares (pycares) with its sockets watched by the crawl's event loop, not by a thread.

    pycares 5 (and aiodns 4 over it) runs c-ares on c-ares's own event thread unless given a
    `sock_state_cb`, each answer then handed back with `call_soon_threadsafe`: a second thread
    taking the GIL and waking the loop through its self-pipe, a cost the crawl pays for every
    host (docs/benchmarks.md). Here c-ares tells which sockets it waits on (`sock_state_cb`,
    pycares's public API), the loop watches them and calls `process_fd`, and a timer lets
    c-ares notice its own timeouts: one thread, as larbin. What it gives up: c-ares rereads
    /etc/resolv.conf on a change only with its thread; a long crawl reads it once, when the
    DNS stage makes the channel at its first query (`dnsServers` names servers explicitly).

    c-ares's own query cache is off: this stage has its cache (bounded, `MAX_CACHE`), and
    c-ares's keeps every answer for its TTL, about 1.3 kB each, which a broad crawl meeting a
    thousand hosts a second would grow to hundreds of MB (docs/benchmarks.md, "Broad crawls").
    pycares 5 has no parameter for it, so the channel is made with `_NoQueryCache`.
    """

    def __init__(self, nameservers: list[str] | None, timeout: float, tries: int) -> None:
        """A channel asking `nameservers` (the system's when None), `tries` times `timeout` s."""
        self._loop = asyncio.get_running_loop()
        self._readers: set[int] = set()
        self._writers: set[int] = set()
        self._timer: asyncio.TimerHandle | None = None
        weak_self = weakref.ref(self)  # the channel holds the callback: no cycle through it

        def sock_state(fd: int, readable: bool, writable: bool) -> None:
            this = weak_self()
            if this is not None:
                this._sock_state(fd, readable, writable)

        module = vars(pycares)
        lib = module["_lib"]
        module["_lib"] = _NoQueryCache(lib)  # what Channel() calls, for this call only
        try:
            self._channel = pycares.Channel(sock_state_cb=sock_state, timeout=timeout,
                                            tries=tries, servers=nameservers or None)
        finally:
            module["_lib"] = lib

    def query_dns(self, host: str, qtype: str) -> asyncio.Future[pycares.DNSResult]:
        """Ask for `host`'s records of `qtype` ("A", "AAAA"); DnsError if the query fails."""
        fut: asyncio.Future[pycares.DNSResult] = self._loop.create_future()

        def answered(result: pycares.DNSResult, error: int | None) -> None:
            if fut.done():  # cancelled by its waiter meanwhile
                return
            if error is not None:
                fut.set_exception(DnsError(error, pycares.errno.strerror(error)))
            else:
                fut.set_result(result)

        try:
            self._channel.query(host, _QUERY_TYPES[qtype], callback=answered)
        except pycares.AresError as exc:
            fut.set_exception(DnsError(*exc.args))
        return fut

    def _sock_state(self, fd: int, readable: bool, writable: bool) -> None:
        """c-ares now waits on fd for reading and/or writing, or no longer uses it."""
        process = self._channel.process_fd
        if readable:
            self._loop.add_reader(fd, process, fd, pycares.ARES_SOCKET_BAD)
            self._readers.add(fd)
        elif fd in self._readers:
            self._loop.remove_reader(fd)
            self._readers.discard(fd)
        if writable:
            self._loop.add_writer(fd, process, pycares.ARES_SOCKET_BAD, fd)
            self._writers.add(fd)
        elif fd in self._writers:
            self._loop.remove_writer(fd)
            self._writers.discard(fd)
        if not (self._readers or self._writers):
            if self._timer is not None:  # nothing in flight: nothing can time out
                self._timer.cancel()
                self._timer = None
        elif self._timer is None:
            self._start_timer()

    def _start_timer(self) -> None:
        """Wake c-ares when its next timeout is due (at most a second from now)."""
        delay: float = self._channel.timeout(1.0)  # type: ignore[no-untyped-call]  # unannotated
        self._timer = self._loop.call_later(max(delay, 0.01), self._on_timer)

    def _on_timer(self) -> None:
        """Let c-ares handle its timeouts (a try given up, the next one sent)."""
        self._timer = None
        if self._readers or self._writers:
            self._channel.process_fd(pycares.ARES_SOCKET_BAD, pycares.ARES_SOCKET_BAD)
            if self._timer is None and (self._readers or self._writers):
                self._start_timer()

    async def close(self) -> None:
        """Cancel the queries in flight, take the sockets off the loop, free the channel."""
        self._channel.cancel()  # their callbacks run now, with ARES_ECANCELLED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for fd in self._readers:
            self._loop.remove_reader(fd)
        for fd in self._writers:
            self._loop.remove_writer(fd)
        self._readers.clear()
        self._writers.clear()
        self._channel.close()


ARES_OPT_QUERY_CACHE = 1 << 21  # ares.h (c-ares >= 1.23); pycares 5 does not export it


class _NoQueryCache:
    """pycares's C library as `pycares.Channel()` sees it while it makes a channel: the same,
    but `ares_init_options` turns c-ares's query cache off (`qcache_max_ttl` 0). pycares's
    `_lib` is private: pyproject pins pycares 5, and tests/test_broad.py fails when c-ares
    keeps answers of its own again."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def __getattr__(self, name: str) -> Any:
        """Everything else is the library's."""
        return getattr(self._lib, name)

    def ares_init_options(self, channel: Any, options: Any, optmask: int) -> int:
        """c-ares's channel init, with the query cache option set to off."""
        options.qcache_max_ttl = 0
        code: int = self._lib.ares_init_options(channel, options, optmask | ARES_OPT_QUERY_CACHE)
        return code
