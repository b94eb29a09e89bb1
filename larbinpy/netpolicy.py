"""Which IP addresses the crawler may connect to (used by DNS and the HTTP client's resolver).

By default larbinpy never connects to loopback, private, link-local, multicast, reserved or
unspecified addresses, so a URL submitted by anyone cannot make it probe the operator's
network. `allowNetworks CIDR ... end` opens ranges explicitly.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class NetworkPolicy:
    """Allow public addresses and the configured ranges; deny the operator's own networks."""

    def __init__(self, allow: Sequence[Network] = ()) -> None:
        self.allow = list(allow)
        self._cache: dict[str, bool] = {}

    def allowed(self, addr: str) -> bool:
        """May the crawler connect to this IP address?"""
        ok = self._cache.get(addr)
        if ok is None:
            ok = self._cache[addr] = self._decide(addr)
            if len(self._cache) > 100_000:  # bound memory on huge crawls
                self._cache.clear()
        return ok

    def _decide(self, addr: str) -> bool:
        """The uncached decision."""
        try:
            ip = ipaddress.ip_address(addr.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        if any(ip in net for net in self.allow):
            return True
        return ip.is_global and not ip.is_multicast


class DeniedNetworkError(OSError):
    """The host resolves to an address the network policy forbids."""
