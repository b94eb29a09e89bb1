"""The reader's fetch path for plain `http://`: HTTP/1.1 GETs on asyncio protocols, pooled.

Why not aiohttp's `ClientSession` here: it does far more per request than a crawler needs
(request and response objects, trace hooks, cookie and redirect machinery, several timers),
and that overhead is a sizeable share of a whole page's CPU (docs/benchmarks.md). A crawler
needs one GET with fixed headers, llhttp (through httptools) to parse the answer, a keep-alive
pool per site, and the body handed over in chunks so `body.py` keeps its limits. The
`Response` below has the attribute names of the aiohttp response the stages already read
(`status`, `headers`, `content.iter_any()`, ...): both are a `response.Response`, which mypy
checks.

HTTPS and anything through a proxy stay on aiohttp (`fetcher.py` chooses); plain `http://`
robots.txt fetches come here too, so their keep-alive connection serves the site's first pages.
Every failure is a `FetchError` carrying the outcome kind the reader counts.

Every byte read counts: a response's raw bytes (head, chunk framing, trailers, body) come out
of one budget, its body's limit plus FRAMING_ALLOWANCE, and `minRate` is measured on them
over the fetch's life (`Response.limit_reading`, which `body.read_body` calls). So a server
sending an endless chunk extension or endless zeros in a chunk size, which carry no content,
is cut off as tooBig within its budget, or as timeout when it sends them slowly.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, NamedTuple, TypeVar, cast

import httptools

from larbinpy.net.headers import Headers
from larbinpy.stats import Outcome

if TYPE_CHECKING:
    from multidict import CIMultiDictProxy

log = logging.getLogger("larbinpy.net")
T = TypeVar("T")

# A connect refused for want of local resources (descriptors, socket buffers, memory) says
# nothing about the server: the connect waits for them to come back instead of counting the
# page unreachable. The fetch stays bounded by its total timeout and is cancelled at a stop.
SHORT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
SHORT_WAIT_FIRST, SHORT_WAIT_MAX = 0.05, 1.0  # seconds between attempts (doubling)
WARN_EVERY = 10.0


class Shortage:
    """How many connects had to wait for local resources (both clients)."""

    waits = 0
    warned = -WARN_EVERY


async def patiently(connect: Callable[[float], Awaitable[T]]) -> tuple[T, float]:
    """`connect(waited)`, tried again while it fails for want of local resources (see
    SHORT_ERRNOS); its result and the seconds spent waiting for them (`waited` so far)."""
    delay, waited = SHORT_WAIT_FIRST, 0.0
    while True:
        try:
            return await connect(waited), waited
        except OSError as exc:
            if exc.errno not in SHORT_ERRNOS:
                raise
            Shortage.waits += 1
            if time.monotonic() - Shortage.warned >= WARN_EVERY:
                Shortage.warned = time.monotonic()
                log.warning("cannot open a connection (%s): waiting for descriptors", exc)
        await asyncio.sleep(delay)
        waited += delay
        delay = min(delay * 2, SHORT_WAIT_MAX)

MAX_HEAD = 64 * 1024  # bytes of status line + headers; more is not a web server's answer
MAX_HEADERS = 128  # aiohttp's limit too
HIGH_WATER = 256 * 1024  # unread body bytes buffered before the socket is paused
# Bytes a response may take beyond its body's limit: the head, chunk sizes and extensions,
# trailers (a body in chunks of a few KiB frames itself in well under this)
FRAMING_ALLOWANCE = MAX_HEAD + 64 * 1024
RATE_CHECK_EVERY = 1.0  # seconds between minRate checks of a response being read
# A timeout found by the timer is confirmed this much later: after the event loop was held up
# (a long parse, a loaded machine), its timers run before the bytes that arrived meanwhile
# are read, so the first look can miss them
CONFIRM_AFTER = 0.05


class HttpVersion(NamedTuple):
    """A response's HTTP version, as aiohttp's `HttpVersion` (`resp.version`)."""

    major: int
    minor: int


HTTP_11 = HttpVersion(1, 1)
_VERSIONS = {"1.1": HTTP_11, "1.0": HttpVersion(1, 0)}  # llhttp's get_http_version(): made once


class FetchError(Exception):
    """A fetch failed: `kind` is the outcome to count; for a timeout, `timeout` names the limit
    that ran out (timeoutConnect, timeoutRead, timeoutTotal or minRate)."""

    def __init__(self, kind: Outcome, timeout: str | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.timeout = timeout


class _Stale(Exception):
    """A pooled connection closed before answering: the request is sent again, fresh."""


Resolve = Callable[[str, int], Awaitable[list[str]]]  # (host, port) -> IPs, or raises FetchError


class _RequestInfo:
    """What was sent, as aiohttp names it (`request_info.headers`), for archival outputs."""

    __slots__ = ("_items", "_headers")

    def __init__(self, items: list[tuple[str, str]]) -> None:
        self._items = items
        self._headers: CIMultiDictProxy[str] | None = None

    @property
    def headers(self) -> CIMultiDictProxy[str]:
        """The request headers (built on first use: only WARC asks)."""
        if self._headers is None:
            from multidict import CIMultiDict, CIMultiDictProxy

            self._headers = CIMultiDictProxy(CIMultiDict(self._items))
        return self._headers


class _Via:
    """`response.connection.transport`, as on an aiohttp response (for the peer address)."""

    __slots__ = ("transport",)

    def __init__(self, transport: asyncio.Transport | None) -> None:
        self.transport = transport


class Response:
    """One response: head known, body arriving in chunks (`content.iter_any()`)."""

    __slots__ = ("_conn", "request_info", "connection", "status", "reason", "version",
                 "raw_headers", "_head_items", "_headers", "_content_type", "_chunks",
                 "_buffered", "head_done", "complete", "error", "got_bytes", "eof_ends_body",
                 "keep_alive", "_waiter", "received", "started", "budget", "min_rate",
                 "rate_grace", "cut_at_budget", "__weakref__")

    def __init__(self, conn: Connection, request: _RequestInfo) -> None:
        self._conn = conn
        self.request_info = request
        self.connection = conn.via
        self.status = 0
        self.reason = ""
        self.version = HTTP_11
        self.raw_headers: tuple[tuple[bytes, bytes], ...] = ()
        self._head_items: list[tuple[bytes, bytes]] = []
        self._headers: Headers | None = None
        self._content_type: str | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self.head_done = False
        self.complete = False
        self.error: FetchError | _Stale | None = None
        self.got_bytes = False
        self.eof_ends_body = False  # no Content-Length, not chunked: the body ends at EOF
        self.keep_alive = False  # may the connection serve another request after this one?
        self._waiter: asyncio.Future[None] | None = None
        self.received = 0  # raw bytes of this response so far, head and framing included
        self.started = conn.pool.loop.time()  # when the request was sent
        self.budget: int | None = None  # most raw bytes it may take (None: head limits only)
        self.min_rate = 0.0  # bytes/s over the fetch's life, after `rate_grace` seconds
        self.rate_grace = 0.0
        self.cut_at_budget = False  # over the budget: the body ends (else tooBig)

    @property
    def content(self) -> Response:
        """aiohttp's StreamReader interface (`iter_any()`): the response itself. A property, not
        an attribute: `self.content = self` would make every response a reference cycle, its
        body freed only by the garbage collector instead of when the reader drops it."""
        return self

    @property
    def headers(self) -> Headers:
        """The response headers, read as aiohttp's (`headers.py`: decoded as asked for)."""
        if self._headers is None:
            self._headers = Headers(self.raw_headers)
        return self._headers

    @property
    def content_type(self) -> str:
        """The media type, lower-case, without parameters (aiohttp's default when absent)."""
        if self._content_type is None:  # the reader asks twice a page
            value = self.headers.get("Content-Type", "")
            self._content_type = (value.partition(";")[0].strip().lower()
                                  or "application/octet-stream")
        return self._content_type

    @property
    def content_length(self) -> int | None:
        """Content-Length as announced (None when absent or not a number)."""
        value = self.headers.get("Content-Length")
        return int(value) if value is not None and value.strip().isdigit() else None

    async def __aenter__(self) -> Response:
        """The response is usable as `async with` (as an aiohttp response is)."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Give the connection back to the pool, or close it."""
        self.release()

    def release(self) -> None:
        """`__aexit__` without a coroutine: the reader's hot path calls it in a `finally`."""
        self._conn.release(self)

    async def iter_any(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; FetchError if the body cannot be read to its end."""
        while True:
            if self._chunks:
                chunk = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(
                    self._chunks)
                self._chunks.clear()
                self._buffered = 0
                self._conn.resume()
                yield chunk
            elif self.error is not None:
                raise self.error if isinstance(self.error, FetchError) else FetchError(
                    Outcome.earlyStop)
            elif self.complete:
                return
            else:
                await self._wait()

    def whole_body(self) -> bytes | None:
        """The whole body, when it is all in and nothing went wrong (read without a loop or a
        coroutine: most pages have arrived by the time their head is looked at); None while
        it is not: `iter_any()` reads it then."""
        if not self.complete or self.error is not None:
            return None
        chunks = self._chunks
        body = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        self._conn.resume()
        return body

    def limit_reading(self, body_limit: int, min_rate: float = 0.0, grace: float = 0.0,
                      truncate: bool = False) -> None:
        """Bound the whole response, not only its content: at most `body_limit` plus
        FRAMING_ALLOWANCE raw bytes (tooBig beyond, or the body ends there if `truncate`),
        arriving at `min_rate` bytes/s or faster once `grace` seconds have passed since the
        request (timeout if slower)."""
        self.budget = body_limit + FRAMING_ALLOWANCE
        self.min_rate, self.rate_grace = min_rate, grace
        self.cut_at_budget = truncate
        self._conn.watch(self)

    def over_rate(self, now: float) -> bool:
        """Is the response, past its grace period, arriving slower than minRate?"""
        elapsed = now - self.started
        return (self.min_rate > 0 and elapsed > self.rate_grace
                and self.received / elapsed < self.min_rate)

    async def wait_head(self) -> None:
        """Until the status line and headers are in (raises what went wrong instead)."""
        while not self.head_done:
            if self.error is not None:
                raise self.error
            await self._wait()

    def _wait(self) -> asyncio.Future[None]:
        """A future the connection resolves on its next event."""
        self._waiter = self._conn.pool.loop.create_future()
        return self._waiter

    def _wake(self) -> None:
        """Something happened: wake whoever waits."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- the connection's parser calls these ---

    def on_body(self, chunk: bytes) -> None:
        """A piece of the body (de-chunked by the parser)."""
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered > HIGH_WATER:
            self._conn.pause()
        self._wake()

    def fail(self, error: FetchError | _Stale) -> None:
        """The exchange broke: the reader gets `error` at its next read."""
        if not self.complete and self.error is None:
            self.error = error
        self._wake()


class _Closed:
    """Stands in for the parser of a closed connection."""

    def feed_data(self, data: bytes) -> None:
        """Nothing is parsed after the end."""


_CLOSED = _Closed()


class Connection(asyncio.Protocol):
    """One keep-alive TCP connection and its llhttp parser; serves one response at a time."""

    def __init__(self, pool: Pool, key: tuple[str, int]) -> None:
        self.pool, self.key = pool, key
        self.transport: asyncio.Transport | None = None
        self.via = _Via(None)  # what its responses give as `connection` (its transport)
        self.parser: httptools.HttpResponseParser | _Closed = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.closed = False
        self.paused = False
        self.head_bytes = 0
        self.idle_timer: asyncio.TimerHandle | None = None
        self.pooled = False  # idle in the pool since idle_since
        self.idle_since = 0.0
        self.last_io = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.timer_due = 0.0
        self.deadline = self.read_timeout = 0.0
        self.reused = False
        self.head_seen = 0  # raw bytes received before the head was complete
        self.suspect = False  # the timer found the exchange late: confirmed at its next look

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Connected."""
        self.transport = transport  # type: ignore[assignment]  # a stream's: an asyncio.Transport
        self.via = _Via(self.transport)

    def data_received(self, data: bytes) -> None:
        """Bytes from the server: into the parser (which calls the on_* methods below)."""
        resp = self.response
        if resp is None:  # nothing asked: a server talking out of turn cannot be trusted
            self.close()
            return
        resp.got_bytes = True
        self.last_io = self.pool.loop.time()
        resp.received += len(data)
        if resp.budget is not None and resp.received > resp.budget:
            # refused before parsing: bytes that carry no content must not cost CPU either
            self.over_budget(resp)
            return
        if not resp.head_done:
            # llhttp keeps an unfinished header line to itself until it ends: count raw bytes
            self.head_seen += len(data)
        try:
            self.parser.feed_data(data)
            if not resp.head_done and self.head_seen > MAX_HEAD:
                raise FetchError(Outcome.badHttp)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade, FetchError):
            # malformed, oversized (our callbacks refuse), bytes after the response ended, or
            # a protocol switch (101) nobody asked for
            resp.fail(FetchError(Outcome.badHttp))
            self.close()

    def stop(self, resp: Response, kind: Outcome, timeout: str | None = None) -> None:
        """End the exchange: the reader gets `kind` (and which limit ran out), the socket
        closes."""
        resp.fail(FetchError(kind, timeout))
        self.close()

    def over_budget(self, resp: Response) -> None:
        """`resp` took more bytes than its budget: tooBig, or its body ends here if it may be
        cut (what arrived stays readable; the connection cannot serve another request)."""
        if not resp.cut_at_budget:
            self.stop(resp, Outcome.tooBig)
            return
        resp.keep_alive = False
        resp.complete = True
        resp._wake()
        self.close()

    def watch(self, resp: Response) -> None:
        """`resp` got its limits: check them now, and its rate from time to time."""
        if resp.complete or resp.error is not None:
            return
        if resp.budget is not None and resp.received > resp.budget:
            self.over_budget(resp)
        elif resp.min_rate:
            self._arm(min(self.deadline, self.pool.loop.time() + RATE_CHECK_EVERY))

    def connection_lost(self, exc: Exception | None) -> None:
        """The server closed (or we did)."""
        self.closed = True
        self.pool.forget(self)
        self._stop_timer()
        # the parser holds us for its callbacks: break that cycle now, or closed connections
        # pile up until a full garbage collection (thousands of them in a crawl of many sites)
        self.parser = _CLOSED
        resp = self.response
        if resp is None or resp.complete:
            return
        if resp.head_done and resp.eof_ends_body and exc is None and resp.error is None:
            self.on_message_complete()  # HTTP/1.0 style: the body is everything until EOF
        elif not resp.got_bytes and self.reused:
            resp.fail(_Stale())
        elif not resp.got_bytes and exc is not None:
            # reset before a word: as aiohttp counts it
            resp.fail(FetchError(Outcome.noConnection))
        else:
            resp.fail(FetchError(Outcome.earlyStop))

    def pause_writing(self) -> None:
        """A request is one small write: nothing to pause."""

    # --- parser callbacks ---

    def on_message_begin(self) -> None:
        """A response starts: bytes after the one asked for are not an answer to anything."""
        resp = self.response
        if resp is not None and resp.complete:
            raise FetchError(Outcome.badHttp)  # stops the parser; data_received closes the socket

    def on_status(self, status: bytes) -> None:
        """The reason phrase."""
        resp = self._head_of_response(len(status))
        resp.reason += status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header line (`_head_of_response`'s checks, written out: a page has a dozen)."""
        resp = self.response
        assert resp is not None
        self.head_bytes += len(name) + len(value) + 4
        items = resp._head_items
        if self.head_bytes > MAX_HEAD or resp.complete or len(items) >= MAX_HEADERS:
            raise FetchError(Outcome.badHttp)
        items.append((name, value))

    def on_headers_complete(self) -> None:
        """The head is in: the reader may look at it."""
        resp = self.response
        assert resp is not None
        parser = cast(httptools.HttpResponseParser, self.parser)  # its callback: not _CLOSED
        status = parser.get_status_code()
        if status < 200:  # 1xx: an interim answer, the real one follows
            resp._head_items.clear()
            resp.reason = ""
            return
        resp.status = status
        version = parser.get_http_version()
        resp.version = _VERSIONS.get(version) or (
            HttpVersion(int(version[0]), int(version[2])) if len(version) == 3 else HTTP_11)
        resp.raw_headers = tuple(resp._head_items)
        headers = resp.headers
        resp.keep_alive = parser.should_keep_alive()  # (llhttp forgets it once the body ends)
        resp.eof_ends_body = ("Content-Length" not in headers
                              and "chunked" not in headers.get("Transfer-Encoding", "").lower())
        resp.head_done = True
        resp._wake()

    def on_body(self, chunk: bytes) -> None:
        """A piece of the body."""
        assert self.response is not None
        self.response.on_body(chunk)

    def on_message_complete(self) -> None:
        """The whole response is in."""
        resp = self.response
        assert resp is not None
        if not resp.head_done:
            return  # the end of a 1xx
        resp.complete = True  # no timeout from now on (the timer sees it and stops)
        resp._wake()

    def _head_of_response(self, n: int) -> Response:
        """The response a head line belongs to, `n` more head bytes counted; FetchError (which
        stops the parser) when the head is over MAX_HEAD -- a megabyte header line must not
        become a megabyte string -- or when the response had already ended."""
        resp = self.response
        assert resp is not None
        self.head_bytes += n
        if self.head_bytes > MAX_HEAD or resp.complete:
            raise FetchError(Outcome.badHttp)
        return resp

    # --- one exchange ---

    def send(self, request: bytes, info: _RequestInfo, reused: bool) -> Response:
        """Write the request; the response it will receive."""
        assert self.transport is not None
        self.reused = reused
        self.head_bytes = self.head_seen = 0
        self.suspect = False
        self.response = resp = Response(self, info)
        self.transport.write(request)
        return resp

    def start_timer(self, deadline: float, read: float) -> None:
        """The timeouts: the fetch ends by `deadline`, and waits at most `read` between reads."""
        now = self.pool.loop.time()
        self.deadline, self.read_timeout, self.last_io = deadline, read, now
        self._arm(min(deadline, now + read))

    def _arm(self, due: float) -> None:
        """Make sure the timer fires by `due`.

        One timer per connection, kept across requests: a pending one due no later is left
        alone (when it fires it re-checks and re-arms), so a keep-alive connection does not
        create and cancel a timer for every page.
        """
        # (the due time is kept here: for a time under 0.5 ms away uvloop's call_at returns a
        # plain Handle, which has no when())
        if self.timer is None or self.timer_due > due:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.timer_due = self.pool.loop.call_at(due, self._check_time), due

    def _check_time(self) -> None:
        """The timer fired: time out, or wait on (data arrived since it was set)."""
        self.timer = None
        resp = self.response
        if resp is None or resp.complete or self.closed:
            return  # no exchange to time: the next one arms the timer again
        # while we pause reading, the server is not slow: only the total timeout runs
        now = self.pool.loop.time()
        due = self.deadline if self.paused else min(self.deadline,
                                                     self.last_io + self.read_timeout)
        if now >= due or (not self.paused and resp.over_rate(now)):
            if self.suspect:
                limit = ("minRate" if now < due else "timeoutTotal" if now >= self.deadline
                         else "timeoutRead")
                self.stop(resp, Outcome.timeout, limit)
                return
            self.suspect = True  # the loop reads the socket before the timer looks again
            self._arm(now + CONFIRM_AFTER)
            return
        self.suspect = False
        if resp.min_rate and not self.paused:
            due = min(due, now + RATE_CHECK_EVERY)
        self._arm(due)

    def _stop_timer(self) -> None:
        """The connection closed: no more timeouts."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def release(self, resp: Response) -> None:
        """The reader is done with `resp`: pool the connection if it can serve another."""
        self.response = None
        if (resp.complete and resp.error is None and not self.closed
                and self.transport is not None and not self.transport.is_closing()
                and resp.keep_alive and self.pool.keepalive > 0):
            self.resume()  # paused over an unread body: the next answer must be read
            self.pool.put(self)
        else:
            self.close()

    def pause(self) -> None:
        """Too much body unread: stop reading the socket for now."""
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        """The reader caught up."""
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()
            self.last_io = now = self.pool.loop.time()  # the read timeout starts again now
            if self.response is not None and not self.response.complete:
                self._arm(min(self.deadline, now + self.read_timeout))

    def close(self) -> None:
        """Close the socket (its pool forgets it on connection_lost)."""
        self._stop_timer()
        if self.transport is not None:
            self.transport.close()


class Pool:
    """Idle keep-alive connections per (host, port), each closed after `keepalive` seconds."""

    def __init__(self, keepalive: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.keepalive = keepalive
        self.idle: dict[tuple[str, int], list[Connection]] = {}

    def take(self, key: tuple[str, int]) -> Connection | None:
        """An idle connection to `key`, if one is still open."""
        conns = self.idle.get(key)
        while conns:
            conn = conns.pop()
            if not conns:
                del self.idle[key]
            conn.pooled = False  # its idle timer, when it fires, finds it busy and stops
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
            conns = self.idle.get(key)
        return None

    def put(self, conn: Connection) -> None:
        """Keep `conn` for the site's next request."""
        self.idle.setdefault(conn.key, []).append(conn)
        conn.pooled, conn.idle_since = True, self.loop.time()
        if conn.idle_timer is None:  # kept across requests, like the exchange timer
            conn.idle_timer = self.loop.call_at(conn.idle_since + self.keepalive,
                                                self._expire, conn)

    def _expire(self, conn: Connection) -> None:
        """A connection's idle timer fired: close it if it stayed idle `keepalive` seconds."""
        conn.idle_timer = None
        if not conn.pooled or conn.closed:
            return  # busy (put() arms the timer again) or gone
        due = conn.idle_since + self.keepalive
        if self.loop.time() >= due:
            conn.close()
        else:
            conn.idle_timer = self.loop.call_at(due, self._expire, conn)

    def forget(self, conn: Connection) -> None:
        """`conn` closed: out of the pool."""
        if conn.idle_timer is not None:
            conn.idle_timer.cancel()
            conn.idle_timer = None
        conns = self.idle.get(conn.key)
        if conns and conn in conns:
            conns.remove(conn)
            if not conns:
                del self.idle[conn.key]

    def close(self) -> None:
        """Close every idle connection."""
        for conns in list(self.idle.values()):
            for conn in list(conns):
                conn.close()
        self.idle.clear()


class Http1Client:
    """GET over plain HTTP/1.1 with keep-alive; `get()` returns a `Response` to read."""

    def __init__(self, headers: dict[str, str], resolve: Resolve, *, keepalive: float,
                 connect_timeout: float, read_timeout: float, total_timeout: float) -> None:
        self.fixed = list(headers.items())
        # header bytes as they came (cookies are decoded with surrogates, like response headers)
        self.fixed_bytes = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode(
            "utf-8", "surrogateescape")
        self.resolve = resolve
        self.keepalive = keepalive
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.total_timeout = total_timeout
        self._pool: Pool | None = None

    @property
    def pool(self) -> Pool:
        """The connection pool (made on the running loop at first use)."""
        if self._pool is None:
            self._pool = Pool(self.keepalive)
        return self._pool

    async def get(self, host: str, port: int, target: str,
                  extra: dict[str, str] | None = None) -> Response:
        """Send `GET target` to host:port; the response once its head is in."""
        authority = host if port == 80 else f"{host}:{port}"
        request, info = self._request(authority, target, extra)
        key = (host, port)
        deadline = self.pool.loop.time() + self.total_timeout  # connecting and a retry included
        for attempt in range(2):
            conn = self.pool.take(key) if attempt == 0 else None  # a retry: a new connection
            reused = conn is not None
            if conn is None:
                conn, deadline = await self._connect(host, port, deadline)
            resp = conn.send(request, info, reused)
            conn.start_timer(deadline, self.read_timeout)
            try:
                await resp.wait_head()
            except _Stale:
                conn.close()
                if attempt == 0:
                    continue  # the server had closed it while idle: once more on a new one
                raise FetchError(Outcome.earlyStop) from None
            except BaseException:
                conn.close()
                raise
            return resp
        raise AssertionError("unreachable")

    def _request(self, authority: str, target: str,
                 extra: dict[str, str] | None) -> tuple[bytes, _RequestInfo]:
        """The request bytes, and what was sent for the archives."""
        head = f"GET {target} HTTP/1.1\r\nHost: {authority}\r\n"
        items = [("Host", authority), *self.fixed]
        if extra:
            items += extra.items()
            head += "".join(f"{k}: {v}\r\n" for k, v in extra.items())
        return (head.encode("utf-8", "surrogateescape") + self.fixed_bytes + b"\r\n",
                _RequestInfo(items))

    async def _connect(self, host: str, port: int,
                       deadline: float) -> tuple[Connection, float]:
        """A new connection to the first address of `host` that answers (by `deadline`), and
        the deadline moved by the time spent waiting for local resources (not the server's)."""
        ips = await self.resolve(host, port)
        limit = None  # which timeout ended the last attempt
        for ip in ips:
            try:
                (_, conn), waited = await patiently(
                    lambda waited, ip=ip: self._open(host, port, ip, deadline + waited))  # type: ignore[misc]  # untyped default
                return conn, deadline + waited
            except TimeoutError:
                last = Outcome.timeout
                limit = ("timeoutTotal" if self.pool.loop.time() >= deadline
                         else "timeoutConnect")
            except OSError:
                last, limit = Outcome.noConnection, None
        raise FetchError(last if ips else Outcome.noDNS, limit)

    async def _open(self, host: str, port: int, ip: str,
                    deadline: float) -> tuple[asyncio.BaseTransport, Connection]:
        """One connection attempt to `ip`, bounded by the connect timeout and `deadline`."""
        left = deadline - self.pool.loop.time()
        if left <= 0:
            raise TimeoutError
        async with asyncio.timeout(min(self.connect_timeout, left)):
            return await self.pool.loop.create_connection(
                lambda: Connection(self.pool, (host, port)), ip, port)

    def close(self) -> None:
        """Close pooled connections."""
        if self._pool is not None:
            self._pool.close()


def split_http_url(url: str) -> tuple[str, int, str] | None:
    """(host, port, path+query) of a canonical `http://` URL; None for any other."""
    if not url.startswith("http://"):
        return None
    rest = url[7:]
    slash = rest.find("/")
    authority, target = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in authority or authority.startswith("["):
        return None  # userinfo, IPv6 literals: the general client handles them
    host, _, port = authority.partition(":")
    if not port:
        return host, 80, target
    return (host, int(port), target) if port.isdigit() else None

