"""The plain-HTTP client (`larbinpy/http1.py`) against real servers on loopback.

Each server here is a raw `asyncio.start_server` written for the test: it answers with exactly
the bytes the test wants (keep-alive, chunked, 1xx, HTTP/1.0 bodies, lies and garbage) and
records what it saw -- connections accepted, request heads, bytes it managed to send, when the
client hung up. Every assertion is on those records or on what `Http1Client` returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import struct
import sys
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from conftest import free_port, until

from larbinpy.net.body import BodyError, read_body
from larbinpy.net.http1 import FetchError, Http1Client, HttpVersion, Response, split_http_url

MiB = 1024 * 1024
HOST = "site.test"
LIMIT = 30.0  # a guard against a hung test (generous: a loaded machine is slow), never a measure


# --- the servers ---------------------------------------------------------------------------


class Peer:
    """The server's side of one accepted connection."""

    def __init__(self, server: RawServer, index: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server, self.index = server, index
        self.reader, self.writer = reader, writer
        self.requests: list[bytes] = []  # request heads read on this connection
        self.eof_at: float | None = None  # loop time the client's EOF (or reset) was seen

    async def request(self) -> bytes | None:
        """The next request head; None (and `eof_at` set) once the client closed."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.eof_at = asyncio.get_running_loop().time()
            return None
        self.requests.append(head)
        self.server.requests.append(head)
        return head

    async def wait_eof(self) -> None:
        """Until the client closes (any bytes it still sends are read and dropped)."""
        while await self.request() is not None:
            pass

    async def send(self, data: bytes) -> None:
        """Write, count, and wait until the kernel took most of it (ConnectionError once the
        client is gone). `sent` counts the bytes handed to the transport: an upper bound on
        what reached the client's socket."""
        self.writer.write(data)
        self.server.sent += len(data)
        await self.writer.drain()

    def reset(self) -> None:
        """Abort with a TCP RST."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # on, 0 s
        self.writer.transport.abort()


Handler = Callable[[Peer], Awaitable[None]]


class RawServer:
    """A listener on 127.0.0.1 running `handler` for each connection, recording it all."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0) -> None:
        self.handler, self.host, self.port = handler, host, port
        self.peers: list[Peer] = []
        self.requests: list[bytes] = []
        self.sent = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = Peer(self, len(self.peers), reader, writer)
        self.peers.append(peer)
        try:
            await self.handler(peer)
        except ConnectionError:
            pass  # the client left: what was sent is counted
        finally:
            writer.close()

    def blocked(self) -> bool:
        """Is a connection's writer backed up past its high-water mark (the peer not
        reading, the kernel's buffers full)?"""
        for peer in self.peers:
            transport = peer.writer.transport
            if transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]:
                return True
        return False

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for peer in self.peers:  # handlers see EOF or ConnectionError and end by themselves
            peer.writer.transport.abort()
        if self._tasks:
            _, stuck = await asyncio.wait(self._tasks, timeout=1.0)
            for task in stuck:  # (Python 3.11 logs a cancelled handler as an error)
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 1.0)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[RawServer]]]:
    """Factory: a started RawServer for a handler; every one stopped after the test."""
    servers: list[RawServer] = []

    async def start(handler: Handler, host: str = "127.0.0.1", port: int = 0) -> RawServer:
        server = RawServer(handler, host, port)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


async def resolve(host: str, port: int) -> list[str]:
    """Every name is 127.0.0.1."""
    return ["127.0.0.1"]


@pytest.fixture
async def make_client() -> AsyncIterator[Callable[..., Http1Client]]:
    """Factory: an Http1Client with the test's timeouts (overridable); closed after the test."""
    clients: list[Http1Client] = []

    def make(headers: dict[str, str] | None = None, resolver=resolve, **options: float
             ) -> Http1Client:
        opts = {"keepalive": 2.0, "connect_timeout": 2, "read_timeout": 1, "total_timeout": 5}
        client = Http1Client(headers or {"User-Agent": "t"}, resolver, **{**opts, **options})
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def replies(data: bytes) -> Handler:
    """A handler that reads one request, sends `data`, and waits for the client to hang up."""

    async def reply(peer: Peer) -> None:
        await peer.request()
        await peer.send(data)
        await peer.wait_eof()

    return reply


def ok(body: bytes = b"", *headers: str, status: str = "200 OK", version: str = "1.1") -> bytes:
    """A response with Content-Length (keep-alive unless a header says otherwise)."""
    lines = [f"HTTP/{version} {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def target_of(head: bytes) -> bytes:
    """The request target of a request head."""
    return head.split(b" ", 2)[1]


async def read_all(resp: Response) -> bytes:
    """The whole body (inside `async with`, as the reader does)."""
    async with resp:
        return b"".join([chunk async for chunk in resp.content.iter_any()])


async def failure(serve, make_client, handler: Handler, **options: float
                  ) -> tuple[str, RawServer]:
    """Fetch and read `/` from a server running `handler`: the FetchError kind ("" if none),
    and the server, for what it saw."""
    async with asyncio.timeout(LIMIT):
        server = await serve(handler)
        client = make_client(**options)
        try:
            await read_all(await client.get(HOST, server.port, "/"))
        except FetchError as exc:
            return exc.kind, server
    return "", server


async def fetch(client: Http1Client, port: int, target: str = "/", **kw: object
                ) -> tuple[Response, bytes]:
    """One GET and its whole body."""
    resp = await client.get(HOST, port, target, **kw)  # type: ignore[arg-type]
    return resp, await read_all(resp)


async def echo_target(peer: Peer) -> None:
    """Keep-alive server: each request answered 200 with its target as the body."""
    while (head := await peer.request()) is not None:
        await peer.send(ok(target_of(head), "Content-Type: text/plain"))


# --- keep-alive and the pool ---------------------------------------------------------------


async def test_sequential_gets_to_one_site_share_one_connection(serve, make_client):
    async with asyncio.timeout(LIMIT):
        server = await serve(echo_target)
        client = make_client()
        for i in range(5):
            resp, body = await fetch(client, server.port, f"/p{i}")
            assert (resp.status, body) == (200, f"/p{i}".encode())
        assert len(server.peers) == 1
        assert [target_of(h) for h in server.requests] == [f"/p{i}".encode() for i in range(5)]


async def test_a_read_response_is_freed_at_once_not_left_to_the_garbage_collector(
        serve, make_client):
    # a reference cycle per response would keep every page's body alive until the collector
    # ran: tens of megabytes between two collections in a fast crawl
    async with asyncio.timeout(LIMIT):
        server = await serve(echo_target)
        client = make_client()
        gc.collect()
        gc.disable()
        try:
            gone = []
            for i in range(20):
                resp = await client.get(HOST, server.port, f"/p{i}")
                assert await read_all(resp) == f"/p{i}".encode()
                gone.append(weakref.ref(resp))
                del resp
            assert [ref() for ref in gone] == [None] * 20
        finally:
            gc.enable()


async def test_request_carries_host_with_port_fixed_headers_and_extra_headers(
        serve, make_client):
    async with asyncio.timeout(LIMIT):
        server = await serve(echo_target)
        client = make_client({"User-Agent": "larbin-test", "Accept": "text/html"})
        resp, _ = await fetch(client, server.port, "/a?b=1", extra={"Cookie": "k=v; j=w"})
        head = server.requests[0].decode()
        lines = head.split("\r\n")
        assert lines[0] == "GET /a?b=1 HTTP/1.1"
        sent = dict(line.split(": ", 1) for line in lines[1:] if line)
        assert sent == {"Host": f"{HOST}:{server.port}", "User-Agent": "larbin-test",
                        "Accept": "text/html", "Cookie": "k=v; j=w"}
        info = resp.request_info.headers
        assert info["host"] == f"{HOST}:{server.port}"
        assert info["User-Agent"] == "larbin-test" and info["Accept"] == "text/html"
        assert info["cookie"] == "k=v; j=w"
        assert len(info) == 4


async def test_host_header_has_no_port_on_port_80(serve, make_client):
    async with asyncio.timeout(LIMIT):
        try:
            server = await serve(echo_target, host="127.0.0.37", port=80)
        except OSError as exc:  # not root, or port 80 taken on that address
            pytest.skip(f"cannot listen on 127.0.0.37:80: {exc}")

        async def resolve_37(host: str, port: int) -> list[str]:
            return ["127.0.0.37"]

        client = make_client(resolver=resolve_37)
        resp, body = await fetch(client, 80, "/x")
        assert body == b"/x"
        assert f"\r\nHost: {HOST}\r\n".encode() in server.requests[0]
        assert resp.request_info.headers["Host"] == HOST


async def test_pooled_connection_closed_by_server_while_idle_is_replaced(serve, make_client):
    async def answer_then_close(peer: Peer) -> None:
        head = await peer.request()
        assert head is not None
        await peer.send(ok(target_of(head)))  # keep-alive headers, then the server closes

    async with asyncio.timeout(LIMIT):
        server = await serve(answer_then_close)
        client = make_client()
        assert (await fetch(client, server.port, "/1"))[1] == b"/1"
        await until(lambda: not client.pool.idle, "the server's FIN dropping the idle connection")
        resp, body = await fetch(client, server.port, "/2")
        assert (resp.status, body) == (200, b"/2")
        assert len(server.peers) == 2


async def test_request_on_pooled_connection_the_server_drops_is_sent_again_on_a_new_one(
        serve, make_client):
    """The race the retry is for: the server closes the idle connection as the request
    arrives, without answering it."""

    async def one_answer_then_drop(peer: Peer) -> None:
        head = await peer.request()
        assert head is not None
        await peer.send(ok(target_of(head)))
        if peer.index == 0:
            await peer.request()  # the second request arrives: close without a word

    async with asyncio.timeout(LIMIT):
        server = await serve(one_answer_then_drop)
        client = make_client()
        assert (await fetch(client, server.port, "/1"))[1] == b"/1"
        resp, body = await fetch(client, server.port, "/2")
        assert (resp.status, body) == (200, b"/2")
        assert len(server.peers) == 2
        assert [target_of(h) for h in server.peers[0].requests] == [b"/1", b"/2"]
        assert [target_of(h) for h in server.peers[1].requests] == [b"/2"]


async def test_fresh_connection_closed_without_answer_is_early_stop_not_retried(
        serve, make_client):
    async def drop(peer: Peer) -> None:
        await peer.request()

    kind, server = await failure(serve, make_client, drop)
    assert kind == "earlyStop"
    assert len(server.peers) == 1


async def test_stale_retry_goes_to_a_new_connection_not_another_pooled_one(
        serve, make_client):
    async def one_answer_then_drop(peer: Peer) -> None:
        head = await peer.request()
        assert head is not None
        await peer.send(ok(target_of(head)))
        await peer.request()  # any later request: close without answering

    async with asyncio.timeout(LIMIT):
        server = await serve(one_answer_then_drop)
        client = make_client()
        # two at once: two connections, both pooled afterwards
        results = await asyncio.gather(*(fetch(client, server.port, f"/{i}") for i in (1, 2)))
        assert sorted(body for _, body in results) == [b"/1", b"/2"]
        assert len(server.peers) == 2
        resp, body = await fetch(client, server.port, "/3")
        assert (resp.status, body) == (200, b"/3")


async def test_connection_close_response_is_not_reused(serve, make_client):
    async def answer_close_but_stay_open(peer: Peer) -> None:
        head = await peer.request()
        assert head is not None
        await peer.send(ok(target_of(head), "Connection: close"))
        await peer.wait_eof()  # the server leaves it open: only the client may close it

    async with asyncio.timeout(LIMIT):
        server = await serve(answer_close_but_stay_open)
        client = make_client()
        for i in range(2):
            resp, body = await fetch(client, server.port, f"/{i}")
            assert (resp.status, body) == (200, f"/{i}".encode())
        assert len(server.peers) == 2
        assert [len(p.requests) for p in server.peers] == [1, 1]
        await until(lambda: server.peers[0].eof_at is not None)  # the client hung up


async def test_bytes_from_an_idle_pooled_connection_make_the_client_drop_it(
        serve, make_client):
    pooled = asyncio.Event()  # the client has read /1 and keeps its connection idle

    async def answer_then_babble(peer: Peer) -> None:
        head = await peer.request()
        assert head is not None
        await peer.send(ok(target_of(head)))
        if peer.index == 0:
            await pooled.wait()
            await peer.send(ok(b"nobody asked"))  # out of turn: cannot be trusted
        await peer.wait_eof()

    async with asyncio.timeout(LIMIT):
        server = await serve(answer_then_babble)
        client = make_client()
        await fetch(client, server.port, "/1")
        assert client.pool.idle
        pooled.set()
        await until(lambda: server.peers[0].eof_at is not None)  # the client hung up
        resp, body = await fetch(client, server.port, "/2")
        assert (resp.status, body) == (200, b"/2")
        assert len(server.peers) == 2


async def test_304_without_length_ends_at_its_head_and_keeps_the_connection(
        serve, make_client):
    async def not_modified(peer: Peer) -> None:
        while (head := await peer.request()) is not None:
            if target_of(head) == b"/old":
                await peer.send(b"HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n\r\n")
            else:
                await peer.send(ok(b"new"))

    async with asyncio.timeout(LIMIT):
        server = await serve(not_modified)
        client = make_client()
        resp, body = await fetch(client, server.port, "/old")
        assert (resp.status, body) == (304, b"")
        resp, body = await fetch(client, server.port, "/new")
        assert (resp.status, body) == (200, b"new")
        assert len(server.peers) == 1


async def answer_then_watch(peer: Peer) -> None:
    """Answer one request, then wait for the client to close the connection."""
    head = await peer.request()
    assert head is not None
    await peer.send(ok(b"x"))
    await peer.wait_eof()


async def test_idle_pooled_connection_is_closed_after_keepalive_seconds(serve, make_client):
    async with asyncio.timeout(LIMIT):
        server = await serve(answer_then_watch)
        client = make_client(keepalive=0.3)
        loop = asyncio.get_running_loop()
        await fetch(client, server.port)
        released = loop.time()
        await until(lambda: server.peers[0].eof_at is not None, "the client closing it")
        idle = server.peers[0].eof_at - released
        assert idle >= 0.25, idle  # kept `keepalive` seconds, then closed by the client
        assert not client.pool.idle


async def test_without_keepalive_the_connection_closes_after_each_answer(serve, make_client):
    """keepalive 0 (a waitDuration whose next turn is past KEEPALIVE_MAX): the client closes
    the connection once the answer is read and keeps nothing idle; the next GET connects anew."""
    async with asyncio.timeout(LIMIT):
        server = await serve(answer_then_watch)
        client = make_client(keepalive=0)
        await fetch(client, server.port)
        await until(lambda: server.peers[0].eof_at is not None, "the client closing it")
        assert not client.pool.idle
        await fetch(client, server.port)
        assert len(server.peers) == 2


def test_keepalive_lasts_until_the_sites_next_turn_or_not_at_all() -> None:
    from larbinpy.config import parse_config
    from larbinpy.net.fetcher import KEEPALIVE_MAX, keepalive_seconds

    def keep(wait: float) -> float:
        return keepalive_seconds(parse_config(f"waitDuration {wait}\n", "t.conf"))

    assert keep(0.25) == 2.25 and keep(KEEPALIVE_MAX - 2) == KEEPALIVE_MAX
    assert keep(60) == keep(KEEPALIVE_MAX - 1) == 0.0  # it would expire before the next turn


# --- reading responses ---------------------------------------------------------------------


async def test_body_without_length_is_read_to_eof(serve, make_client):
    parts = [bytes([65 + i]) * 100_000 for i in range(5)]

    async def http10(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        for part in parts:
            await peer.send(part)
            await asyncio.sleep(0.02)
        # the handler returns: the server closes, which ends the body

    async with asyncio.timeout(LIMIT):
        server = await serve(http10)
        client = make_client()
        resp, body = await fetch(client, server.port)
        assert resp.status == 200
        assert resp.version == HttpVersion(1, 0)
        assert resp.content_length is None
        assert body == b"".join(parts)


async def test_body_without_length_cut_by_a_reset_is_early_stop(serve, make_client):
    read_some = asyncio.Event()  # the client has the head and part of the body

    async def http10_reset(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 5000)
        await read_some.wait()
        peer.reset()

    async with asyncio.timeout(LIMIT):
        server = await serve(http10_reset)
        resp = await make_client().get(HOST, server.port, "/")
        with pytest.raises(FetchError) as err:
            async with resp:
                async for _ in resp.content.iter_any():
                    read_some.set()
    assert err.value.kind == "earlyStop"


async def test_chunked_body_is_dechunked_and_head_accessors_behave(serve, make_client):
    chunked = (b"HTTP/1.1 200 OK\r\nContent-TYPE: Text/HTML; Charset=UTF-8\r\n"
               b"transfer-encoding: chunked\r\nX-Mixed-Case: v1\r\nx-mixed-case: v2\r\n\r\n"
               b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")

    async def answers(peer: Peer) -> None:
        await peer.request()
        await peer.send(chunked)
        await peer.request()
        await peer.send(ok(b"abc", "Content-Type: image/PNG"))
        await peer.wait_eof()

    async with asyncio.timeout(LIMIT):
        server = await serve(answers)
        client = make_client()
        resp, body = await fetch(client, server.port)
        assert body == b"hello world"
        assert resp.raw_headers == (
            (b"Content-TYPE", b"Text/HTML; Charset=UTF-8"), (b"transfer-encoding", b"chunked"),
            (b"X-Mixed-Case", b"v1"), (b"x-mixed-case", b"v2"))
        assert resp.headers["content-type"] == "Text/HTML; Charset=UTF-8"
        assert resp.headers.getall("X-MIXED-CASE") == ["v1", "v2"]
        assert resp.content_type == "text/html"
        assert resp.content_length is None
        assert (resp.status, resp.reason) == (200, "OK")
        # the chunked response ended cleanly: the connection serves the next one
        resp, body = await fetch(client, server.port)
        assert body == b"abc"
        assert resp.content_type == "image/png"
        assert resp.content_length == 3
        assert len(server.peers) == 1


@pytest.mark.parametrize("at_once", [True, False], ids=["arrived-whole", "arriving"])
async def test_body_limits_are_the_same_whether_the_body_has_arrived_or_not(
        serve, make_client, at_once):
    # a body all in when it is read skips the chunk loop (`Response.whole_body`): the limits
    # must answer as they do while it arrives in pieces
    body = bytes(range(256)) * 40  # 10,240 bytes, chunked: no length to refuse it up front
    pieces = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def answers(peer: Peer) -> None:
        while await peer.request() is not None:
            if at_once:
                await peer.send(head + chunked)
                continue
            await peer.send(head)
            for i in range(0, len(chunked), 3000):
                await asyncio.sleep(0.01)
                await peer.send(chunked[i:i + 3000])

    async def read(limit: int, truncate: bool = False) -> bytes | str:
        resp = await client.get(HOST, server.port, "/")
        try:
            if at_once:
                await until(lambda: resp.complete, "the whole response")
            else:
                assert not resp.complete
            return (await read_body(resp, limit, truncate=truncate)).data
        except BodyError as exc:
            return exc.kind.name
        finally:
            resp.release()

    async with asyncio.timeout(LIMIT):
        server = await serve(answers)
        client = make_client()
        assert await read(len(body)) == body
        assert await read(len(body) - 1) == "tooBig"
        assert await read(4321, truncate=True) == body[:4321]


async def test_missing_content_type_is_octet_stream_and_missing_length_is_none(serve, make_client):
    async def answer(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\n")

    async with asyncio.timeout(LIMIT):
        server = await serve(answer)
        client = make_client()
        resp, body = await fetch(client, server.port)
        assert (resp.status, resp.reason, body) == (404, "Not Found", b"")
        assert resp.content_type == "application/octet-stream"
        assert resp.content_length is None


async def test_interim_100_continue_is_skipped(serve, make_client):
    async def continue_then_ok(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n")
        await asyncio.sleep(0.05)  # in two reads, then in one below
        await peer.send(ok(b"real", "X-Real: yes", status="200 Fine"))
        await peer.request()
        await peer.send(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"again"))
        await peer.wait_eof()

    async with asyncio.timeout(LIMIT):
        server = await serve(continue_then_ok)
        client = make_client()
        resp, body = await fetch(client, server.port)
        assert (resp.status, resp.reason, body) == (200, "Fine", b"real")
        assert resp.headers.get("X-Real") == "yes"
        assert "X-Interim" not in resp.headers
        resp, body = await fetch(client, server.port)
        assert (resp.status, body) == (200, b"again")
        assert len(server.peers) == 1


# --- failures and their kinds --------------------------------------------------------------


async def test_server_closing_before_content_length_is_early_stop(serve, make_client):
    async def truncated(peer: Peer) -> None:
        await peer.request()
        await peer.send(ok(b"x" * 10_000)[:-9_000])

    async with asyncio.timeout(LIMIT):
        server = await serve(truncated)
        client = make_client()
        resp = await client.get(HOST, server.port, "/")
        assert resp.content_length == 10_000
        got = bytearray()
        with pytest.raises(FetchError) as err:
            async with resp:
                async for chunk in resp.content.iter_any():
                    got += chunk
        assert err.value.kind == "earlyStop"
        assert bytes(got) == b"x" * 1000


async def test_malformed_status_line_is_bad_http(serve, make_client):
    oops = replies(b"HTTP/1.1 OOPS\r\n\r\n<html>")

    kind, server = await failure(serve, make_client, oops)
    assert kind == "badHttp"
    await until(lambda: server.peers[0].eof_at is not None)  # and it hung up


async def test_broken_chunked_encoding_is_bad_http(serve, make_client):
    bad_chunks = replies(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"5\r\n<html\r\nZZZ\r\nnot a chunk\r\n0\r\n\r\n")

    kind, server = await failure(serve, make_client, bad_chunks)
    assert kind == "badHttp"


async def test_megabyte_header_line_is_bad_http(serve, make_client):
    long_header = replies(b"HTTP/1.1 200 OK\r\nX-Huge: " + b"h" * MiB + b"\r\n"
                          b"Content-Length: 6\r\n\r\n<html>")

    kind, server = await failure(serve, make_client, long_header)
    assert kind == "badHttp"


async def test_header_line_is_cut_off_once_the_head_passes_64k(serve, make_client):
    block = b"h" * (64 * 1024)

    async def endless_header(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nX-Huge: ")
        while peer.server.sent < 16 * MiB:  # bounded so the test stays cheap when it fails
            await peer.send(block)
        await peer.send(b"\r\nContent-Length: 0\r\n\r\n")
        await peer.wait_eof()

    kind, server = await failure(serve, make_client, endless_header)
    assert kind == "badHttp"
    # a 64 KiB head limit, plus what the socket buffers held when the client hung up
    assert server.sent < 8 * MiB, server.sent


async def test_too_many_headers_is_bad_http(serve, make_client):
    async def many(peer: Peer) -> None:
        await peer.request()
        lines = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
        await peer.send(b"HTTP/1.1 200 OK\r\n" + lines + b"Content-Length: 0\r\n\r\n")
        await peer.wait_eof()

    kind, server = await failure(serve, make_client, many)
    assert kind == "badHttp"


async def test_nothing_listening_is_no_connection(make_client):
    async with asyncio.timeout(LIMIT):
        client = make_client()
        with pytest.raises(FetchError) as err:
            await client.get(HOST, free_port(), "/")
        assert err.value.kind == "noConnection"


async def test_next_address_is_tried_when_the_first_refuses(serve, make_client):
    async with asyncio.timeout(LIMIT):
        server = await serve(echo_target)

        async def two_addresses(host: str, port: int) -> list[str]:
            return ["127.0.0.38", "127.0.0.1"]  # nothing listens on the first

        client = make_client(resolver=two_addresses)
        resp, body = await fetch(client, server.port, "/x")
        assert (resp.status, body) == (200, b"/x")
        assert resp.connection.transport.get_extra_info("peername")[0] == "127.0.0.1"


async def test_connect_that_never_completes_is_timeout_after_connect_timeout(make_client):
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # never accepted; the backlog filled so that new SYNs are dropped
        for _ in range(2):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(listener.getsockname())
            fillers.append(filler)
        async with asyncio.timeout(LIMIT):
            # no total timeout to speak of: only the connect timeout can end this fetch
            client = make_client(connect_timeout=0.5, total_timeout=3600)
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(FetchError) as err:
                await client.get(HOST, listener.getsockname()[1], "/")
            elapsed = loop.time() - start
            assert err.value.kind == "timeout"
            assert elapsed >= 0.45, elapsed  # not before the connect timeout
    finally:
        for sock in (listener, *fillers):
            sock.close()


async def test_resolver_failure_kind_propagates(make_client):
    async def no_dns(host: str, port: int) -> list[str]:
        raise FetchError("noDNS")

    async def no_address(host: str, port: int) -> list[str]:
        return []

    async with asyncio.timeout(LIMIT):
        for resolver in (no_dns, no_address):
            client = make_client(resolver=resolver)
            with pytest.raises(FetchError) as err:
                await client.get(HOST, 80, "/")
            assert err.value.kind == "noDNS"


async def test_server_that_never_answers_is_timeout_after_read_timeout(serve, make_client):
    async def silent(peer: Peer) -> None:
        await peer.request()
        await peer.wait_eof()

    async with asyncio.timeout(LIMIT):
        server = await serve(silent)
        # no total timeout to speak of: only the read timeout can end this fetch
        client = make_client(read_timeout=1, total_timeout=3600)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(FetchError) as err:
            await client.get(HOST, server.port, "/")
        elapsed = loop.time() - start
        assert err.value.kind == "timeout"
        assert elapsed >= 0.9, elapsed  # not before the read timeout
        await until(lambda: server.peers[0].eof_at is not None)  # the client hung up


async def test_drip_feed_is_timeout_at_the_total_timeout(serve, make_client):
    async def drip(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n")
        while True:  # one byte every 0.3 s: never a read timeout
            await peer.send(b"x")
            await asyncio.sleep(0.3)

    async with asyncio.timeout(LIMIT):
        server = await serve(drip)
        client = make_client(read_timeout=1, total_timeout=1.5)
        loop = asyncio.get_running_loop()
        start = loop.time()
        resp = await client.get(HOST, server.port, "/")
        got = bytearray()
        with pytest.raises(FetchError) as err:
            async with resp:
                async for chunk in resp.content.iter_any():
                    got += chunk
        elapsed = loop.time() - start
        assert err.value.kind == "timeout"
        # the drip outlived the read timeout: the endless body was ended by the total one
        assert elapsed >= 1.4, elapsed
        assert len(got) >= 2  # bytes did come through meanwhile


async def test_timeout_of_a_body_without_length_is_not_taken_for_its_end(serve, make_client):
    async def drip(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n")
        while True:
            await peer.send(b"x")
            await asyncio.sleep(0.3)

    async with asyncio.timeout(LIMIT):
        server = await serve(drip)
        client = make_client(read_timeout=1, total_timeout=1.5)
        resp = await client.get(HOST, server.port, "/")
        got = bytearray()
        with pytest.raises(FetchError) as err:
            async with resp:
                async for chunk in resp.content.iter_any():
                    if not got:
                        await asyncio.sleep(2.0)  # busy (the bandwidth limiter) as time runs out
                    got += chunk
        assert err.value.kind == "timeout"


# --- flow control --------------------------------------------------------------------------


def streaming(total: int) -> Handler:
    """A server sending `total` bytes of body (with Content-Length) as fast as it may."""
    block = b"z" * (64 * 1024)

    async def handler(peer: Peer) -> None:
        await peer.request()
        await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        left = total
        while left > 0:
            await peer.send(block[:left])
            left -= len(block)
        await peer.wait_eof()

    return handler


async def test_unread_body_pauses_the_socket_so_the_server_blocks(serve, make_client):
    total = 20 * MiB
    async with asyncio.timeout(LIMIT):
        server = await serve(streaming(total))
        client = make_client(read_timeout=2, total_timeout=6)
        resp = await client.get(HOST, server.port, "/")
        # read nothing: the client stops reading its socket, the kernel's buffers fill, and
        # the server's writes back up past its transport's high-water mark (drain() waits)
        await until(lambda: resp._conn.paused and server.blocked(), "the server blocked")
        # 256 KiB in the client's buffer, plus the two sockets' buffers (tcp_rmem and
        # tcp_wmem: a few MB on Linux), plus the server's transport buffer
        held = server.sent
        assert held < 8 * MiB, held
        # reading resumes the socket: the whole body arrives
        got = 0
        async with resp:
            async for chunk in resp.content.iter_any():
                got += len(chunk)
        assert got == total


async def test_a_slow_reader_on_a_paused_connection_is_not_a_read_timeout(serve, make_client):
    total = 4 * MiB
    async with asyncio.timeout(LIMIT):
        server = await serve(streaming(total))
        client = make_client(read_timeout=1, total_timeout=6)
        resp = await client.get(HOST, server.port, "/")
        got = 0
        async with resp:
            async for chunk in resp.content.iter_any():
                if not got:
                    await asyncio.sleep(1.5)  # as `limiter.take()` may, in body.py
                got += len(chunk)
        assert got == total


# --- URLs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "expected"), [
    ("http://h/", ("h", 80, "/")),
    ("http://h:8080/a?b", ("h", 8080, "/a?b")),
    ("http://h", ("h", 80, "/")),
    ("http://h:8080", ("h", 8080, "/")),
    ("http://www.example.com/a/b.html?x=1&y=%20", ("www.example.com", 80, "/a/b.html?x=1&y=%20")),
    ("https://h/", None),
    ("ftp://h/", None),
    ("HTTP://h/", None),
    ("http://user:pw@h/", None),
    ("http://user@h:81/", None),
    ("http://[::1]/", None),
    ("http://[::1]:8080/a", None),
    ("http://h:port/", None),
])
def test_split_http_url(url: str, expected: tuple[str, int, str] | None):
    assert split_http_url(url) == expected


# --- found by review: regressions -----------------------------------------------------------


async def test_bytes_after_a_complete_response_do_not_change_it_and_the_connection_is_dropped(
        serve, make_client):
    async def tail(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5"
                            b"\r\n\r\nhello" + b"HTTP/1.1 404\r\n\r\n<a href=/x>tail</a>")

    async with asyncio.timeout(LIMIT):
        server = await serve(tail)
        client = make_client()
        resp, body = await fetch(client, server.port, "/")
        assert (resp.status, body, resp.headers["Content-Length"]) == (200, b"hello", "5")
        await fetch(client, server.port, "/again")
        assert len(server.peers) == 2  # the first connection was not trusted again


async def test_unasked_protocol_switch_is_bad_http(serve, make_client):
    switch = replies(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
                     b"Connection: Upgrade\r\n\r\n")

    kind, _ = await failure(serve, make_client, switch)
    assert kind == "badHttp"


async def test_cookie_bytes_go_back_exactly_as_they_came(serve, make_client):
    async def cookie(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
                            b"Set-Cookie: name=Jos\xc3\xa9; Path=/\r\n\r\n")  # UTF-8 bytes

    async with asyncio.timeout(LIMIT):
        server = await serve(cookie)
        client = make_client()
        resp, _ = await fetch(client, server.port, "/")
        value = resp.headers["Set-Cookie"].split(";")[0]  # as cookies.py keeps it
        await fetch(client, server.port, "/2", extra={"Cookie": value})
        assert b"\r\nCookie: name=Jos\xc3\xa9\r\n" in server.requests[1]


async def test_total_timeout_counts_from_the_start_of_the_fetch(serve, make_client):
    async def silent(peer: Peer) -> None:
        await peer.request()
        await peer.wait_eof()

    async def slow_resolver(host: str, port: int) -> list[str]:
        await asyncio.sleep(1.2)  # longer than the whole fetch may take
        return ["127.0.0.1"]

    async with asyncio.timeout(LIMIT):
        server = await serve(silent)
        client = make_client(resolver=slow_resolver, read_timeout=5, total_timeout=1.0)
        with pytest.raises(FetchError) as err:
            await client.get(HOST, server.port, "/")
        assert err.value.kind == "timeout"
        assert server.peers == []  # resolving spent the time: no fresh timeout to connect in


async def test_connection_released_while_paused_for_flow_control_serves_the_next_page(
        serve, make_client):
    async def pages(peer: Peer) -> None:
        while (head := await peer.request()) is not None:
            await peer.send(ok(target_of(head)))

    async with asyncio.timeout(LIMIT):
        server = await serve(pages)
        client = make_client(read_timeout=0.5)
        resp = await client.get(HOST, server.port, "/unread.pdf")
        await until(lambda: resp.complete)
        resp._conn.pause()  # what a large unread body does (the reader skips unwanted types)
        async with resp:
            pass
        resp2, body = await fetch(client, server.port, "/next.html")
        assert (resp2.status, body) == (200, b"/next.html")
        assert len(server.peers) == 1  # on the pooled connection, read again


def test_a_timeout_due_within_a_millisecond_survives_a_paused_read_on_uvloop() -> None:
    """uvloop's call_at hands back a plain Handle (no when()) for a time under 0.5 ms away; a
    read resumed then must still end as a counted timeout, not as an AttributeError."""
    if sys.platform == "win32":
        pytest.skip("uvloop is not a dependency on Windows (pyproject.toml)")
    import uvloop  # a dependency everywhere else: missing, the test fails

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000000\r\n\r\n" + b"x" * 700_000)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)

    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    async def main() -> str:
        server = await asyncio.start_server(stall, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = Http1Client({}, resolve, keepalive=5, connect_timeout=2, read_timeout=5,
                             total_timeout=5)
        try:
            resp = await client.get("127.0.0.1", port, "/")
            chunks = resp.content.iter_any().__aiter__()
            await chunks.__anext__()
            await until(lambda: resp._conn.paused)  # more than 256 KiB unread: paused
            loop = asyncio.get_running_loop()
            resp._conn.start_timer(loop.time() + 0.0002, 5)  # the deadline, 0.2 ms away
            try:
                async for _ in chunks:  # resumes reading, re-arming the timer
                    pass
            except FetchError as exc:
                return exc.kind
            return "complete"
        finally:
            client.pool.close()
            server.close()

    assert uvloop.run(main()) == "timeout"
