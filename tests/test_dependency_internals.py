"""The private part of aiohttp larbinpy relies on, where it was, and the public ones around it.

aiohttp has no public way to give its connector the connection protocol that counts a body's
wire bytes (`aio.CountingHandler`, set as `TCPConnector._factory`). pyproject pins aiohttp to
the versions tested; when a new version moves it, a test here names it, rather than the crawl
going on silently without the protection. The DNS stage's resolver uses pycares's public API
(`sock_state_cb`): its test here checks what that buys, no c-ares thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from pathlib import Path

import aiohttp
import pycares
import pytest
from aiohttp import web
from aiohttp.client_proto import ResponseHandler

from larbinpy.config import parse_config
from larbinpy.demo import DnsServer
from larbinpy.net import aio
from larbinpy.net.cares import DnsError, LoopResolver
from larbinpy.net.fetcher import keepalive_seconds, request_headers
from larbinpy.net.policy import NetworkPolicy


async def test_aiohttp_connector_still_makes_connections_with_its_factory() -> None:
    """`_factory` is still the connector's protocol factory, and its connects still use it."""
    connector = aiohttp.TCPConnector()
    factory = getattr(connector, "_factory", None)
    await connector.close()
    assert isinstance(factory, functools.partial) and factory.func is ResponseHandler, (
        f"aiohttp {aiohttp.__version__} moved TCPConnector._factory (the connection protocol "
        "factory net/aio.py replaces with CountingHandler)"
    )
    direct = inspect.getsource(aiohttp.TCPConnector._create_direct_connection)
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


async def test_loop_resolver_answers_on_the_loop_without_a_thread() -> None:
    """A query through LoopResolver (pycares's public `sock_state_cb`) against a real DNS
    server: answered, and no thread (c-ares's event thread) was started for it."""
    async with DnsServer({"one.test": ["127.0.0.7"]}) as server:
        threads = threading.active_count()
        resolver = LoopResolver(nameservers=[server.address], timeout=2.0, tries=1)
        try:
            result = await asyncio.wait_for(resolver.query_dns("one.test", "A"), 10)
            assert [r.data.addr for r in result.answer if r.type == 1] == ["127.0.0.7"]
            assert threading.active_count() == threads, "c-ares got a thread of its own"
        finally:
            await resolver.close()


async def test_loop_resolver_times_out_a_silent_server_with_ares_etimeout() -> None:
    """A server that never answers: the loop's timer lets c-ares give up after its tries, and
    the query fails with ARES_ETIMEOUT (the DNS stage then skips the AAAA query)."""
    async with DnsServer({"mute.test": ["127.0.0.8"]}) as server:
        server.silent.add("mute.test")
        resolver = LoopResolver(nameservers=[server.address], timeout=0.3, tries=2)
        try:
            with pytest.raises(DnsError) as err:
                await asyncio.wait_for(resolver.query_dns("mute.test", "A"), 10)
            assert err.value.args[0] == pycares.errno.ARES_ETIMEOUT
            assert server.queries[("mute.test", "A")] == 2  # both tries were sent
        finally:
            await resolver.close()
