"""Real servers on loopback (DNS + HTTP) for the tests, the `make run` demo and the benchmark.

Nothing here touches the network beyond 127.0.0.0/8 and ::1, and nothing needs root:
every port is above 1024 (or picked by the kernel). The DNS server needs dnslib (the `demo`
extra), so it is imported on first use: the HTTP side works without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from larbinpy.demo.web import Hit, LocalWeb, Page, Site, StaticResolver, redirect

if TYPE_CHECKING:
    from larbinpy.demo.dnsserver import DnsServer

__all__ = ["DnsServer", "Hit", "LocalWeb", "Page", "Site", "StaticResolver", "redirect"]


def __getattr__(name: str) -> object:
    """`DnsServer`, imported when first asked for."""
    if name == "DnsServer":
        from larbinpy.demo.dnsserver import DnsServer

        return DnsServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
