"""Which IP addresses the crawler may connect to (used by DNS and the HTTP client's resolver).

By default larbinpy never connects to loopback, private, link-local, multicast, reserved or
unspecified addresses, so a URL submitted by anyone cannot make it probe the operator's
network. `allowNetworks CIDR ... end` opens ranges explicitly.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix embeds an IPv4 address


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
        ip = embedded_ipv4(ip)
        if any(ip in net for net in self.allow):
            return True
        return ip.is_global and not ip.is_multicast


def embedded_ipv4(ip: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4, Teredo), else `ip` itself.

    Judged on the IPv6 form alone, 64:ff9b::7f00:1 or 2002:7f00:1:: would pass as public,
    yet a NAT64 gateway or 6to4 relay delivers them to 127.0.0.1.
    """
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    if ip.ipv4_mapped:
        return ip.ipv4_mapped
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour:
        return ip.sixtofour
    if ip.teredo:
        return ip.teredo[1]
    return ip


class DeniedNetworkError(OSError):
    """The host resolves to an address the network policy forbids."""
