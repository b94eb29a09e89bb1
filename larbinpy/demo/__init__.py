"""Real servers on loopback (DNS + HTTP) for the tests, the `make run` demo and the benchmark.

Nothing here touches the network beyond 127.0.0.0/8 and ::1, and nothing needs root:
every port is above 1024 (or picked by the kernel).
"""

from larbinpy.demo.dnsserver import DnsServer
from larbinpy.demo.web import Hit, LocalWeb, Page, Site, StaticResolver, redirect

__all__ = ["DnsServer", "Hit", "LocalWeb", "Page", "Site", "StaticResolver", "redirect"]
