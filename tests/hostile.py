"""A hostile web server on loopback, on raw asyncio streams: every way a server can misbehave.

aiohttp.web always speaks correct HTTP; a crawler must also survive servers that drip one byte
a second, never accept, send a bad status line, lie about Content-Length, break chunked encoding,
reset mid-body, send a 1 MB header line or 10,000 headers, stream 200 MB, or serve a compression
bomb. Each host name is one `Trap` (a coroutine writing whatever it likes on the socket), each
on its own loopback IP so that per-IP politeness never serializes one trap behind another.
Every request is recorded as a `HostileHit` with the bytes the trap managed to send, so tests
can check that the crawler cut it off. Used by tests/test_hostile.py (and handy for benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import os
import socket
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import brotli

from larbinpy.demo.dnsserver import DnsServer
from larbinpy.demo.web import bind_same_port

MAX_REQUEST_HEAD = 64 * 1024  # a request head longer than this is not a crawler's
CHUNK = 64 * 1024
MiB = 1024 * 1024


@dataclass
class HostileHit:
    """One request as the hostile server saw it (times are time.monotonic())."""

    host: str
    path: str
    start: float
    end: float = 0.0
    sent: int = 0  # bytes the trap wrote before it finished or the client went away


class Conn:
    """The trap's side of one connection: write helpers that count and survive a gone client."""

    def __init__(self, writer: asyncio.StreamWriter, hit: HostileHit) -> None:
        self.writer, self.hit = writer, hit

    async def send(self, data: bytes) -> None:
        """Write and wait until the kernel took it (raises ConnectionError once the client left)."""
        self.writer.write(data)
        self.hit.sent += len(data)
        await self.writer.drain()

    def reset(self) -> None:
        """Abort the connection with a TCP RST (SO_LINGER 0)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


Trap = Callable[[Conn, str], Awaitable[None]]  # (connection, request path) -> None


def head(status: str = "200 OK", ctype: str = "text/html", **headers: str | int) -> bytes:
    """A response head; keyword names use '_' for '-' (Content_Length=3)."""
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {ctype}", "Connection: close"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# --- the traps -----------------------------------------------------------------------------


def raw(data: bytes) -> Trap:
    """Send exactly these bytes, then close."""

    async def trap(conn: Conn, path: str) -> None:
        await conn.send(data)

    return trap


def page(body: bytes | str, ctype: str = "text/html", status: str = "200 OK") -> Trap:
    """A well-formed page (a canary on the hostile server)."""
    data = body.encode() if isinstance(body, str) else body
    return raw(head(status, ctype, Content_Length=len(data)) + data)


def drip(every: float, chunk: bytes = b"<p>x</p>\n", forever: bool = True) -> Trap:
    """Headers, then `chunk` every `every` seconds, for ever: a slow-drip server."""

    async def trap(conn: Conn, path: str) -> None:
        await conn.send(head())
        while forever:
            await conn.send(chunk)
            await asyncio.sleep(every)

    return trap


def stall(after_head: bool = False) -> Trap:
    """Never answer (or answer the head, then nothing): only a read timeout ends it."""

    async def trap(conn: Conn, path: str) -> None:
        if after_head:
            await conn.send(head())
        await asyncio.sleep(3600)

    return trap


def endless(ctype: str = "text/html", total: int = 200 * MiB, length: bool = False,
            binary: bool = False) -> Trap:
    """`total` bytes of body (text or random binary), with or without Content-Length."""
    block = os.urandom(CHUNK) if binary else (b"<p>" + b"a" * 60 + b"</p>\n") * (CHUNK // 68)

    async def trap(conn: Conn, path: str) -> None:
        extra = {"Content_Length": total} if length else {}
        await conn.send(head(ctype=ctype, **extra))
        left = total
        while left > 0:
            await conn.send(block[:left])
            left -= len(block)

    return trap


@functools.cache
def bomb_bytes(encoding: str, size: int) -> bytes:
    """`size` bytes of spaces compressed with gzip, deflate (zlib) or br; built once."""
    zeros = b" " * MiB
    if encoding == "br":
        comp = brotli.Compressor(quality=1)
        return b"".join(comp.process(zeros) for _ in range(size // MiB)) + comp.finish()
    wbits = zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS
    z = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join(z.compress(zeros) for _ in range(size // MiB)) + z.flush()


def bomb(encoding: str, size: int = 256 * MiB) -> Trap:
    """A compression bomb: `size` bytes of spaces, a thousand times smaller on the wire.

    Building one takes a second of CPU: call `bomb_bytes` before serving (it is cached), or the
    first request blocks the server's event loop that long.
    """

    async def trap(conn: Conn, path: str) -> None:
        data = bomb_bytes(encoding, size)
        await conn.send(head(Content_Encoding=encoding, Content_Length=len(data)))
        for i in range(0, len(data), CHUNK):
            await conn.send(data[i : i + CHUNK])

    return trap


def truncated() -> Trap:
    """Content-Length promises more than is sent, then the server closes."""
    return raw(head(Content_Length=10_000) + b"<html>only a little</html>")


def reset_mid_body() -> Trap:
    """Half a body, then a TCP reset."""

    async def trap(conn: Conn, path: str) -> None:
        await conn.send(head(Content_Length=100_000) + b"<html>" + b"x" * 20_000)
        await asyncio.sleep(0.05)
        conn.reset()

    return trap


def bad_chunked() -> Trap:
    """A chunked body whose chunk size is not hexadecimal."""
    body = b"5\r\n<html\r\nZZZ\r\nnot a chunk\r\n0\r\n\r\n"
    return raw(head(Transfer_Encoding="chunked") + body)


def endless_framing(start: bytes, filler: bytes, every: float = 0.0) -> Trap:
    """A chunked head, `start`, then `filler` for ever (every `every` seconds, or as fast as the
    client reads): chunk framing that never carries a byte of content."""

    async def trap(conn: Conn, path: str) -> None:
        await conn.send(head(Transfer_Encoding="chunked") + start)
        block = filler if every else filler * (CHUNK // len(filler))
        while True:
            await conn.send(block)
            if every:
                await asyncio.sleep(every)

    return trap


def chunk_extension(every: float = 0.0) -> Trap:
    """`1;aaaa...` for ever: a chunk extension that never ends."""
    return endless_framing(b"1;", b"a", every)


def chunk_size_zeros() -> Trap:
    """`0000...` for ever: a chunk size that never ends (its value stays 0)."""
    return endless_framing(b"", b"0")


def long_header(size: int = MiB) -> Trap:
    """A header line of `size` bytes."""
    return raw(head(X_Huge="h" * size, Content_Length=6) + b"<html>")


def many_headers(n: int = 10_000) -> Trap:
    """`n` header lines."""
    lines = b"".join(b"X-H%d: v\r\n" % i for i in range(n))
    return raw(head(Content_Length=6)[:-2] + lines + b"\r\n<html>")


def gzip_page(body: bytes) -> Trap:
    """A small gzip-encoded page (not a bomb)."""
    data = gzip.compress(body)
    return raw(head(Content_Encoding="gzip", Content_Length=len(data)) + data)


# --- the server ----------------------------------------------------------------------------


@dataclass
class HostileSite:
    """One host name, the loopback IP it lives on, and its trap (robots.txt answers 404)."""

    host: str
    ip: str
    trap: Trap
    robots: Trap | None = None  # None: robots.txt is a quick 404
    paths: dict[str, Trap] = field(default_factory=dict)  # per-path traps, before `trap`


_NOT_FOUND = raw(head("404 Not Found", Content_Length=0))


class HostileServer:
    """Raw asyncio HTTP/1.1 listener on every site IP at one port, plus stalled listeners."""

    def __init__(self, sites: list[HostileSite], stalled_ips: list[str] = ()) -> None:
        self.sites = {s.host: s for s in sites}
        self.stalled_ips = list(stalled_ips)
        self.port = 0
        self.hits: list[HostileHit] = []
        self._servers: list[asyncio.Server] = []
        self._stalled: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def dns_records(self) -> dict[str, list[str]]:
        """host -> [ip], for the DNS server."""
        return {s.host: [s.ip] for s in self.sites.values()}

    def url(self, host: str, path: str = "/") -> str:
        """Absolute URL of a path on a hostile host."""
        return f"http://{host}:{self.port}{path}"

    def crawl_conf(self, tmp: object, dns_address: str, extra: str = "") -> str:
        """larbin.conf for a crawl of every site's start page: state and outputs under `tmp`,
        the given DNS server, no output, twenty connections, then `extra`."""
        return (f"stateDir {tmp}/state\nsaveDir {tmp}/save\ndnsServers {dns_address}\n"
                "allowNetworks 127.0.0.0/8 end\nhttpPort 0\ninputPort 0\nwaitDuration 0\n"
                "pagesConnexions 20\noutput none\nexitAtEnd\nforbiddenExtensions .zip end\n"
                + extra + "".join(f"startUrl {self.url(s)}\n" for s in self.sites))

    def hits_for(self, host: str) -> list[HostileHit]:
        """Requests made to one host, robots.txt included."""
        return [h for h in self.hits if h.host == host]

    async def start(self) -> None:
        """Listen on every site IP (one port), and set up the stalled listeners."""
        ips = list(dict.fromkeys(s.ip for s in self.sites.values())) or ["127.0.0.1"]
        socks = bind_same_port(ips + self.stalled_ips)
        self.port = socks[0].getsockname()[1]
        for sock in socks[: len(ips)]:
            self._servers.append(await asyncio.start_server(self._serve, sock=sock))
        for sock in socks[len(ips) :]:
            self._stall(sock)

    def _stall(self, sock: socket.socket) -> None:
        """A listener that never accepts, its backlog filled so that new SYNs are dropped."""
        sock.listen(0)
        self._stalled.append(sock)
        # With backlog 0 the kernel queues one handshake; fill it (and one more for slack)
        for _ in range(2):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(sock.getsockname())
            self._stalled.append(filler)

    async def stop(self) -> None:
        """Close listeners, stalled sockets and every connection still open."""
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        for sock in self._stalled:
            sock.close()
        self._servers.clear()
        self._stalled.clear()

    @contextlib.asynccontextmanager
    async def with_dns(self, extra: dict[str, list[str]] | None = None
                       ) -> AsyncIterator[DnsServer]:
        """The server started, and a DNS server naming its sites (and `extra`); both stopped
        after."""
        await self.start()
        dns = DnsServer({**self.dns_records, **(extra or {})})
        await dns.start()
        try:
            yield dns
        finally:
            await self.stop()
            await dns.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: read one request head, run the trap, close."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            request = await _read_head(reader)
            if request is None:
                return
            host, path = request
            hit = HostileHit(host, path, time.monotonic())
            self.hits.append(hit)
            try:
                await _until_hangup(self._trap_for(host, path)(Conn(writer, hit), path), reader)
            except (ConnectionError, OSError):
                pass  # the crawler hung up on the trap: what we want
            except asyncio.CancelledError:
                pass  # stop() ends traps that never end by themselves
            finally:
                hit.end = time.monotonic()
        finally:
            self._tasks.discard(task)
            writer.close()

    def _trap_for(self, host: str, path: str) -> Trap:
        """The trap that serves host + path."""
        site = self.sites.get(host)
        if site is None:
            return _NOT_FOUND
        if path in site.paths:
            return site.paths[path]
        if path == "/robots.txt":
            return site.robots or _NOT_FOUND
        return site.trap


async def _until_hangup(trap: Awaitable[None], reader: asyncio.StreamReader) -> None:
    """Run a trap until it ends or the client hangs up (a stalled trap never writes, so it
    would not notice otherwise): `HostileHit.end` then says when the crawler gave up."""
    trap_task = asyncio.ensure_future(trap)
    eof_task = asyncio.ensure_future(_drain_until_eof(reader))
    try:
        await asyncio.wait({trap_task, eof_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (trap_task, eof_task):
            task.cancel()
        await asyncio.gather(trap_task, eof_task, return_exceptions=True)
    if trap_task.done() and not trap_task.cancelled() and trap_task.exception():
        raise trap_task.exception()  # type: ignore[misc]


async def _drain_until_eof(reader: asyncio.StreamReader) -> None:
    """Read and discard whatever the client sends, until it closes the connection."""
    with contextlib.suppress(ConnectionError, OSError):
        while await reader.read(CHUNK):
            pass


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    """(host, path) of a request head, or None if the client sent nothing sensible."""
    try:
        data = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    if len(data) > MAX_REQUEST_HEAD:
        return None
    lines = data.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    host = ""
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "host":
            host = value.strip().lower().rsplit(":", 1)[0]
    return (host, parts[1]) if len(parts) == 3 else None
