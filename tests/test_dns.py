"""The DNS stage against a real DNS server on loopback: a waiter cancelled mid-lookup (an
aiohttp timeout on a fetch) must not cancel the shared query nor end a worker."""

from __future__ import annotations

import asyncio

import pytest
from conftest import until

from larbinpy.config import parse_config
from larbinpy.demo import DnsServer
from larbinpy.frontier.sites import Sites
from larbinpy.net.policy import NetworkPolicy
from larbinpy.net.resolver import CrawlerResolver
from larbinpy.stages.dns import Dns
from larbinpy.stats import Stats


async def test_a_cancelled_waiter_leaves_the_query_and_the_only_worker_alive() -> None:
    """With one worker, a waiter cancelled during a slow lookup: the other waiter of that lookup
    still gets its answer, and a later lookup of another host resolves."""
    async with DnsServer({"slow.test": ["127.0.0.5"], "later.test": ["127.0.0.6"]}) as server:
        cfg = parse_config(f"dnsConnexions 1\ndnsServers {server.address}\n"
                           "allowNetworks 127.0.0.0/8 end\n")
        dns = Dns(cfg, Stats(), Sites(Stats(), 0.0, spill=None),  # type: ignore[arg-type]
                  NetworkPolicy(cfg.allow_networks), lambda s: None)
        workers = dns.start()
        try:
            server.silent.add("slow.test")  # the query stays in flight until we let it answer
            resolver = CrawlerResolver(dns, None)
            cancelled = asyncio.ensure_future(resolver.resolve("slow.test", 80))
            patient = dns.lookup("slow.test")
            await until(lambda: server.queries, "the query reaching the server")
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            server.silent.discard("slow.test")  # c-ares's second try gets the answer
            assert await asyncio.wait_for(patient, 30) == ["127.0.0.5"]
            later = await asyncio.wait_for(resolver.resolve("later.test", 80), 30)
            assert [r["host"] for r in later] == ["127.0.0.6"]
            assert not any(w.done() for w in workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await dns.close()
