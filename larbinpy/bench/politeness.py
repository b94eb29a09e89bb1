"""The synthetic web's record of politeness, kept by its server: what the crawler's clocks did,
seen from the side they protect.

`synth serve --wait W` notes the start of every request an IP receives (robots.txt included):
its last start, the shortest spacing between two starts and the spacings
shorter than W (less a slack for the server's own lag, `slack`), which are the politeness gaps;
and every start in order, for the rate of the middle 80% of the requests (the crawl without its
start and its tail).
The bench reads and resets the record over HTTP on the server's port with the Host
`CONTROL_HOST` (`/politeness`, `/politeness?reset=1`), so the record lives in the server's
process and costs the measured crawler nothing. Memory: one small list an IP that was asked.
"""

from __future__ import annotations

import json
import time
import urllib.request
from array import array
from collections.abc import Callable
from typing import Any

from aiohttp import web

from larbinpy.demo.web import Page

CONTROL_HOST = "control.bench.test"
_LAST, _SHORTEST = range(2)  # an IP's record: its last start, its shortest spacing


def slack(wait: float) -> float:
    """How much shorter than the wait a spacing may look without being a gap: the server stamps
    a request when its handler runs, so a request it was slow to reach looks later than sent."""
    return min(0.1, wait / 10)


class PolitenessLog:
    """Per-IP request starts of the synthetic web, summed up as the bench reports them."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.floor = wait - slack(wait)
        self.ips: dict[str, list[float]] = {}
        self.starts = array("d")
        self.gaps = 0

    def observe(self, request: web.BaseRequest) -> None:
        """`LocalWeb.on_request`: note a request's start on the IP it reached."""
        sockname = request.get_extra_info("sockname")
        if sockname is None or request.host.startswith(CONTROL_HOST):
            return
        now = time.monotonic()
        self.starts.append(now)
        seen = self.ips.get(sockname[0])
        if seen is None:
            self.ips[sockname[0]] = [now, float("inf")]
            return
        spacing = now - seen[_LAST]
        if spacing < self.floor:
            self.gaps += 1
        seen[_SHORTEST] = min(seen[_SHORTEST], spacing)
        seen[_LAST] = now

    def summary(self) -> dict[str, Any]:
        """Requests, IPs asked, gaps, the shortest spacing, and the rate of the middle 80% of
        the requests (from the 10th to the 90th percentile start: the crawl at its pace, without
        its start-up and its tail)."""
        shortest = min((s[_SHORTEST] for s in self.ips.values()), default=float("inf"))
        n = len(self.starts)
        first, last = n // 10, (9 * n) // 10
        span = self.starts[last] - self.starts[first] if n >= 10 else 0.0
        return {"wait": self.wait, "slack": slack(self.wait), "ips": len(self.ips),
                "requests": n, "gaps": self.gaps, "shortest_spacing": None
                if shortest == float("inf") else round(shortest, 3),
                "middle_requests_per_s": round((last - first) / span, 1) if span > 0 else None}

    def reset(self) -> None:
        """Forget everything (between two crawls of one server)."""
        self.ips.clear()
        self.starts = array("d")
        self.gaps = 0

    def control(self, page_factory: Callable[[str, str], Page | None]
                ) -> Callable[[str, str], Page | None]:
        """`page_factory` answering the control host's `/politeness` too."""
        def pages(host: str, path_qs: str) -> Page | None:
            if host != CONTROL_HOST:
                return page_factory(host, path_qs)
            if path_qs not in ("/politeness", "/politeness?reset=1"):
                return None
            body = json.dumps(self.summary()).encode()
            if path_qs.endswith("reset=1"):
                self.reset()
            return Page(body=body, content_type="application/json")

        return pages


def read_log(http_port: int, reset: bool = False) -> dict[str, Any]:
    """The server's politeness record (then forgotten, with `reset`)."""
    path = "/politeness?reset=1" if reset else "/politeness"
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}{path}",
                                     headers={"Host": CONTROL_HOST})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as resp:
        summary: dict[str, Any] = json.loads(resp.read())
    return summary
