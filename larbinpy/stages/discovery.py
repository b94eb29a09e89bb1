"""What revisits discover, for the operator: new pages found, how soon they were fetched, and
the pages that find most.

A URL a revisited page's links gave is "found" then; its "discovery delay" is the time from
there to its first fetch (the recrawl's objective counts that delay: `freshness.py`,
`discovery_interval`). Everything here is bounded by constants, not by the crawl's size or
length: the URLs awaiting their first fetch (FOUND_KEPT, the oldest forgotten), the delays of
the last WINDOW seconds (DELAYS_KEPT), the pages that found most (FINDERS_KEPT, the least
productive half forgotten when full).
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from typing import Any

from larbinpy.links.urls import site_key

FOUND_KEPT = 100_000  # URLs found by revisits, awaiting their first fetch
DELAYS_KEPT = 100_000  # discovery delays kept for the figures (the last WINDOW seconds)
WINDOW = 3600.0  # seconds of delays the figures summarize
FINDERS_KEPT = 10_000  # pages whose revisits found new URLs, with how many
TOP = 10  # pages shown


class Discovery:
    """New pages found by revisits and their discovery delays (see the module)."""

    def __init__(self) -> None:
        self.waiting: OrderedDict[str, float] = OrderedDict()  # URL -> when found
        self.delays: deque[tuple[float, float]] = deque(maxlen=DELAYS_KEPT)  # (fetched, delay)
        self.finders: dict[str, int] = {}  # page URL -> new URLs its revisits found
        self.total = 0  # new URLs found by revisits since the start

    def found(self, page: str, urls: list[str], now: float) -> None:
        """A revisit of `page` gave these URLs, never seen before, at `now` (Unix time)."""
        self.total += len(urls)
        waiting = self.waiting
        for url in urls:
            waiting[url] = now
        while len(waiting) > FOUND_KEPT:
            waiting.popitem(last=False)
        if page not in self.finders and len(self.finders) >= FINDERS_KEPT:
            self._forget_finders()
        self.finders[page] = self.finders.get(page, 0) + len(urls)

    def _forget_finders(self) -> None:
        """Full: the half of the pages that found least is forgotten."""
        kept = sorted(self.finders.items(), key=lambda item: -item[1])[:FINDERS_KEPT // 2]
        self.finders = dict(kept)

    def fetched(self, url: str, now: float) -> None:
        """A page was fetched the first time: a discovery delay if a revisit found it."""
        when = self.waiting.pop(url, None)
        if when is not None:
            self.delays.append((now, max(0.0, now - when)))

    def site_top(self, site: str, n: int = TOP) -> list[dict[str, Any]]:
        """The pages of one site (its key, scheme://host[:port]) that found the most, with how
        many: a look through the FINDERS_KEPT pages kept, by prefix."""
        prefix = site + "/"
        mine = [(url, k) for url, k in self.finders.items() if url.startswith(prefix)]
        mine.sort(key=lambda item: -item[1])
        return [{"url": url, "found": k} for url, k in mine[:n]]

    def figures(self, now: float) -> dict[str, Any]:
        """status.json's `recrawl.discovery`: new pages found by revisits, the discovery
        delay's median and 90th percentile over the last hour, the pages that find most."""
        recent = sorted(d for t, d in self.delays if t >= now - WINDOW)
        top = sorted(self.finders.items(), key=lambda item: -item[1])[:TOP]
        return {
            "found_by_revisits": self.total,
            "delays_last_hour": len(recent),
            "delay_median_s": round(statistics.median(recent), 3) if recent else None,
            "delay_p90_s": round(_quantile(recent, 0.9), 3) if recent else None,
            "top_pages": [{"url": url, "site": site_key(url), "found": n} for url, n in top],
        }


def _quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of a sorted, non-empty list (nearest rank)."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]
