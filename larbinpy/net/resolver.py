"""The HTTP clients' resolver, over the DNS stage's cache (aiohttp's through `aio.AioResolver`).

A fetch never makes a DNS query of its own: every host the clients connect to is looked up
through `HostLookup` (the DNS stage: its TTL cache, shared in-flight queries and negative cache),
then checked against the network policy. The module depends on that protocol only, not on the
stage, so `net/` stays below `stages/`.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable
from typing import Any, Protocol

from larbinpy.net.policy import DeniedNetworkError, NetworkPolicy


class HostLookup(Protocol):
    """What the resolver asks of the DNS stage."""

    policy: NetworkPolicy  # the addresses URLs may reach (allowNetworks)

    def lookup(self, host: str) -> Awaitable[list[str]]:
        """Addresses of a host ([] if it failed), as a future the caller may cancel."""
        ...


class CrawlerResolver:
    """Addresses answered from the DNS stage's cache and the network policy, as aiohttp's
    `ResolveResult` dicts."""

    def __init__(self, dns: HostLookup, proxy: tuple[str, int] | None) -> None:
        self.dns = dns
        # the operator chose the proxy: it may live on a network the policy denies to URLs
        self.trusted = proxy[0].strip("[]").lower() if proxy else None

    async def resolve(self, host: str, port: int = 0) -> list[dict[str, Any]]:
        """Allowed addresses of `host`; DeniedNetworkError or OSError otherwise."""
        # the stage gives each caller a future of its own: an aiohttp timeout cancelling this
        # await cancels only that future, never the query other fetches and sites wait on
        ips = await self.dns.lookup(host)
        if not ips:
            raise OSError(f"cannot resolve {host}")
        if host.lower() == self.trusted:
            return [_result(host, ip, port) for ip in ips]
        allowed = [ip for ip in ips if self.dns.policy.allowed(ip)]
        if not allowed:
            raise DeniedNetworkError(f"{host} resolves to a denied network")
        return [_result(host, ip, port) for ip in allowed]


def _result(host: str, ip: str, port: int) -> dict[str, Any]:
    """One address, as aiohttp's ResolveResult."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    return {
        "hostname": host, "host": ip, "port": port, "family": family,
        "proto": 0, "flags": socket.AI_NUMERICHOST,
    }
