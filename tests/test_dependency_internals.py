"""The private parts of aiohttp and aiodns that larbinpy relies on, where they were.

Neither library has a public way to do two things the crawler needs: give aiohttp's connector
the connection protocol that counts a body's wire bytes (`aio.CountingHandler`, set as
`TCPConnector._factory`), and give aiodns 4 a c-ares channel whose sockets the event loop
watches instead of c-ares's own thread (`dns.LoopResolver` overrides
`DNSResolver._make_channel`). pyproject pins both to the versions tested; when a new version
moves one of these internals, a test here names it, rather than the crawl going on silently
without the protection.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from pathlib import Path

import aiodns
import aiohttp
import pycares
from aiohttp import web
from aiohttp.client_proto import ResponseHandler

from larbinpy.config import parse_config
from larbinpy.demo import DnsServer
from larbinpy.net import aio
from larbinpy.net.client import keepalive_seconds, request_headers
from larbinpy.net.policy import NetworkPolicy
from larbinpy.stages.dns import LoopResolver


def _source(function: object) -> str:
    """The source of a library function, to check what it still calls."""
    return inspect.getsource(function)  # type: ignore[arg-type]


async def test_aiohttp_connector_still_makes_connections_with_its_factory() -> None:
    connector = aiohttp.TCPConnector()
    factory = getattr(connector, "_factory", None)
    await connector.close()
    assert isinstance(factory, functools.partial) and factory.func is ResponseHandler, (
        f"aiohttp {aiohttp.__version__} moved TCPConnector._factory (the connection protocol "
        "factory net/aio.py replaces with CountingHandler)"
    )
    direct = _source(aiohttp.TCPConnector._create_direct_connection)
    assert "self._factory" in direct, (
        f"aiohttp {aiohttp.__version__}: TCPConnector no longer connects with self._factory"
    )


async def test_aiohttp_connections_of_the_crawl_session_count_their_bytes(tmp_path: Path) -> None:
    """A real fetch through `make_session`: its connection's protocol is a CountingHandler."""

    class Lookup:
        policy = NetworkPolicy(parse_config("allowNetworks 127.0.0.0/8 end\n").allow_networks)

        async def lookup(self, host: str) -> list[str]:
            return ["127.0.0.1"]

    async def hello(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * (4 << 20))  # not all read with the head

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    cfg = parse_config(f"stateDir {tmp_path}/state\n")
    session = aio.make_session(cfg, Lookup(), request_headers(cfg), keepalive_seconds(cfg))
    try:
        async with session.get(f"http://page.test:{port}/") as resp:
            protocol = resp.connection.protocol if resp.connection else None
            assert len(await resp.read()) == 4 << 20
    finally:
        await session.close()
        await runner.cleanup()
    assert isinstance(protocol, aio.CountingHandler), (
        f"aiohttp {aiohttp.__version__}: the connection's protocol is {type(protocol)}, "
        "not the CountingHandler set as TCPConnector._factory"
    )


def test_aiodns_still_builds_its_channel_in_make_channel() -> None:
    init = _source(aiodns.DNSResolver.__init__)
    assert "self._make_channel(" in init and "self._timeout" in init, (
        f"aiodns {aiodns.__version__}: DNSResolver.__init__ no longer builds its channel "
        "with _make_channel (stages/dns.py LoopResolver overrides it)"
    )
    state_cb = _source(aiodns.DNSResolver._sock_state_cb)
    assert "add_reader" in state_cb and "add_writer" in state_cb, (
        f"aiodns {aiodns.__version__}: DNSResolver._sock_state_cb no longer hands c-ares's "
        "sockets to the event loop (LoopResolver's channel calls it)"
    )


async def test_loop_resolver_answers_on_the_loop_without_a_thread() -> None:
    """A query through LoopResolver against a real DNS server: answered, and no thread (c-ares's
    event thread) was started for it."""
    async with DnsServer({"one.test": ["127.0.0.7"]}) as server:
        threads = threading.active_count()
        resolver = LoopResolver(nameservers=[server.address], timeout=2.0, tries=1)
        try:
            result = await asyncio.wait_for(resolver.query_dns("one.test", "A"), 10)
            assert [r.data.addr for r in result.answer if r.type == 1] == ["127.0.0.7"]
            assert threading.active_count() == threads, "c-ares got a thread of its own"
            assert isinstance(resolver._channel, pycares.Channel)
        finally:
            await resolver.close()
