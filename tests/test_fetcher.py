"""The Fetcher (`larbinpy/net/fetcher.py`) against real servers on loopback: which client
serves which URL, and each failure counted as the same outcome whichever client met it.

The servers are raw `asyncio.start_server`s (over TLS with a test CA for https), answering
a fixed page, or nothing at all; the proxy is the loopback forward proxy of `modernweb.py`.
Assertions are on what a fetch returned, on what the servers and the proxy saw, and on the
outcome and crawl-log note a failure would be counted with.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from conftest import free_port
from modernweb import Certs, Proxy

from larbinpy.config import Config, parse_config
from larbinpy.net import http1
from larbinpy.net.body import read_body
from larbinpy.net.fetcher import Failure, Fetcher
from larbinpy.net.policy import NetworkPolicy
from larbinpy.stats import Outcome

LIMIT = 30.0  # a guard against a hung test, never a measure
PAGE = b"<html>hello</html>"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A listener on 127.0.0.1 (over TLS with `ctx`) running `handler` per connection; it
    records the request heads it read."""

    def __init__(self, handler: Handler, ctx: ssl.SSLContext | None = None) -> None:
        self.handler, self.ctx = handler, ctx
        self.heads: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> Server:
        """Listen on a free port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ctx)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: read the request head, then the handler's turn."""
        self.writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            await self.handler(reader, writer)
        writer.close()

    async def stop(self) -> None:
        """Close the listener and every connection."""
        assert self._server is not None
        self._server.close()
        for writer in self.writers:
            writer.transport.abort()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 1.0)


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A 200 with PAGE, then the connection closes."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE))
    await writer.drain()


async def silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """No answer: wait until the client hangs up."""
    await reader.read()


class Lookup:
    """The DNS stage as the Fetcher asks it: names from a table, others on 127.0.0.1."""

    def __init__(self, cfg: Config, records: dict[str, list[str]]) -> None:
        self.policy = NetworkPolicy(cfg.allow_networks)
        self.records = records

    async def lookup(self, host: str) -> list[str]:
        """The host's addresses."""
        return self.records.get(host, ["127.0.0.1"])


@pytest.fixture
async def servers() -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    """Factory: a started Server; every one stopped after the test."""
    started: list[Server] = []

    async def start(handler: Handler, ctx: ssl.SSLContext | None = None) -> Server:
        server = await Server(handler, ctx).start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop()


@pytest.fixture
async def make_fetcher(tmp_path: Path) -> AsyncIterator[Callable[..., Fetcher]]:
    """Factory: a Fetcher for config lines (loopback allowed, short read timeout, a test CA's
    certificates trusted); closed after the test."""
    made: list[Fetcher] = []
    certs = Certs(tmp_path)

    def make(extra: str = "") -> Fetcher:
        cfg = parse_config(f"allowNetworks 127.0.0.0/8 end\ntimeoutRead 1\ntimeoutTotal 20\n"
                           f"caFile {certs.ca_file}\n{extra}")
        fetcher = Fetcher(cfg, Lookup(cfg, {"inside.test": ["10.1.2.3"]}))
        made.append(fetcher)
        return fetcher

    make.certs = certs  # type: ignore[attr-defined]  # the CA the servers' certificates use
    yield make
    for fetcher in made:
        await fetcher.close()


async def fetch(fetcher: Fetcher, url: str) -> tuple[object, int, bytes]:
    """GET `url` and read its body, releasing the response as the stages do: the response,
    its status and its body."""
    async with asyncio.timeout(LIMIT):
        resp = await fetcher.get(url)
        try:
            return resp, resp.status, (await read_body(resp, 1 << 20)).data
        finally:
            resp.release()


async def failure(fetcher: Fetcher, url: str) -> Failure:
    """What fetching `url` fails with, as the reader would count it."""
    try:
        await fetch(fetcher, url)
    except Exception as exc:  # noqa: BLE001 - the fetcher names it, or the test fails
        named = fetcher.failure(exc)
        assert named is not None, f"{exc!r} was not counted as a failure"
        return named
    raise AssertionError(f"{url} was fetched")


async def test_plain_http_goes_through_the_crawlers_own_client(servers, make_fetcher):
    server = await servers(answer)
    resp, status, body = await fetch(make_fetcher(), f"http://plain.test:{server.port}/a?b=1")
    assert isinstance(resp, http1.Response)
    assert (status, body) == (200, PAGE)
    assert server.heads[0].startswith(b"GET /a?b=1 HTTP/1.1\r\n")
    assert f"Host: plain.test:{server.port}".encode() in server.heads[0]


async def test_https_goes_through_aiohttp_with_the_same_headers(servers, make_fetcher):
    fetcher = make_fetcher('From "ops@example.test"')
    server = await servers(answer, make_fetcher.certs.good("secure.test"))
    resp, status, body = await fetch(fetcher, f"https://secure.test:{server.port}/a%20b")
    assert isinstance(resp, aiohttp.ClientResponse)
    assert (status, body) == (200, PAGE)
    assert server.heads[0].startswith(b"GET /a%20b HTTP/1.1\r\n")  # sent as it was encoded
    plain = await servers(answer)
    await fetch(fetcher, f"http://plain.test:{plain.port}/")
    for head in (server.heads[0], plain.heads[0]):
        assert b"From: ops@example.test\r\n" in head
        assert b"Accept-Encoding: gzip, deflate, br\r\n" in head


async def test_with_a_proxy_plain_http_goes_through_aiohttp_and_the_proxy(
        servers, make_fetcher):
    server = await servers(answer)
    proxy = Proxy({"plain.test": ["127.0.0.1"]})
    await proxy.start()
    try:
        fetcher = make_fetcher(f"proxy 127.0.0.1 {proxy.port}")
        resp, status, body = await fetch(fetcher, f"http://plain.test:{server.port}/p")
    finally:
        await proxy.stop()
    assert isinstance(resp, aiohttp.ClientResponse)
    assert (status, body) == (200, PAGE)
    assert proxy.requests == [("GET", f"http://plain.test:{server.port}/p")]
    assert server.heads[0].startswith(b"GET /p HTTP/1.1\r\n")


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_refused_connection_is_no_connection(make_fetcher, scheme):
    found = await failure(make_fetcher(), f"{scheme}://closed.test:{free_port()}/")
    assert found == Failure(Outcome.noConnection)


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_silent_server_is_a_timeout_naming_the_read_limit(
        servers, make_fetcher, scheme):
    ctx = make_fetcher.certs.good("slow.test") if scheme == "https" else None
    server = await servers(silence, ctx)
    found = await failure(make_fetcher(), f"{scheme}://slow.test:{server.port}/")
    assert found == Failure(Outcome.timeout, "no byte for 1 s (timeoutRead)")
    assert len(server.heads) == 1  # the request was sent once, then waited on


@pytest.mark.parametrize("bad", ["self_signed", "expired", "wrong_name"])
async def test_a_bad_certificate_is_a_tls_error(servers, make_fetcher, bad):
    server = await servers(answer, getattr(make_fetcher.certs, bad)("bad.test"))
    found = await failure(make_fetcher(), f"https://bad.test:{server.port}/")
    assert found == Failure(Outcome.tlsError)
    assert server.heads == []  # no request went over it


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_denied_network_is_counted_without_a_connection(make_fetcher, scheme):
    # inside.test resolves to 10.1.2.3, a private address allowNetworks does not open
    found = await failure(make_fetcher(), f"{scheme}://inside.test/")
    assert found == Failure(Outcome.deniedNetwork)


async def test_an_exception_that_is_no_fetch_failure_is_left_to_raise(make_fetcher):
    assert make_fetcher().failure(KeyError("a bug")) is None
