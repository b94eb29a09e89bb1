"""Robots.txt, fetched once per site before any of its pages (the end of larbin's DNS stage).

The opener runs `fetch` as a site's first fetch, so robots.txt requests obey the same
politeness clocks as pages. RFC 9309's status rules: 2xx parse, 4xx allow all, 5xx or a
network error means full disallow for now: the site's jobs wait and the fetch is retried
later, up to `maxRetries` times, then they are dropped as forbiddenRobots. At most 500 KiB
is read; redirects are followed up to 5 hops. Rules are parsed by Protego for the
configured `UserAgent` and cached for `robotsTtl` seconds.
"""

from __future__ import annotations

import asyncio

import aiohttp
from protego import Protego

from ..body import BodyError, read_body
from ..config import Config
from ..records import Site, SiteState
from ..sites import Sites
from ..stats import Stats

MAX_ROBOTS_BYTES = 500 * 1024
MAX_ROBOTS_REDIRECTS = 5
RETRY_DELAY = 30.0  # seconds before retrying a robots.txt that failed with 5xx or no answer


class Robots:
    """Fetches, parses and applies robots.txt per site."""

    def __init__(self, cfg: Config, stats: Stats, sites: Sites) -> None:
        self.cfg, self.stats, self.sites = cfg, stats, sites
        self.session: aiohttp.ClientSession | None = None
        self.agent = cfg.user_agent

    def needs_fetch(self, site: Site, now: float) -> bool:
        """Must robots.txt be (re)fetched before the next page of this site?"""
        return self.cfg.robots and now >= site.robots_expires

    def allowed(self, site: Site, url: str) -> bool:
        """May this URL be fetched according to the site's robots.txt?"""
        return site.robots is None or site.robots.can_fetch(url, self.agent)

    async def fetch(self, site: Site) -> None:
        """Fetch and parse the site's robots.txt, or plan a retry."""
        assert self.session is not None
        self.stats.robots_fetches += 1
        status, text = await self._get(site.key + "/robots.txt")
        now = asyncio.get_running_loop().time()
        if status is not None and status < 500:
            self._apply(site, text if 200 <= status < 300 else None, now)
        else:
            self._failed(site, now)

    async def _get(self, url: str) -> tuple[int | None, str]:
        """(status, text) of robots.txt; status None on a network error."""
        assert self.session is not None
        try:
            async with self.session.get(
                url, allow_redirects=True, max_redirects=MAX_ROBOTS_REDIRECTS
            ) as resp:
                if not 200 <= resp.status < 300:
                    return resp.status, ""
                # RFC 9309: parse at least the first 500 KiB; ignore the rest
                body = await read_body(resp, MAX_ROBOTS_BYTES, truncate=True)
                return resp.status, body.data.decode("utf-8", errors="replace").lstrip("\ufeff")
        except aiohttp.TooManyRedirects:
            return 404, ""  # RFC 9309: too many redirects means "unavailable": allow all
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, BodyError):
            return None, ""

    def _apply(self, site: Site, text: str | None, now: float) -> None:
        """Rules are known: parse them (None = allow all) and open the site."""
        site.robots = Protego.parse(text) if text else None
        site.robots_expires = now + self.cfg.robots_ttl
        site.robots_failures = 0
        site.delay = self.cfg.wait_duration
        if site.robots is not None:
            delay = site.robots.crawl_delay(self.agent)
            if delay:
                site.delay = max(site.delay, min(float(delay), self.cfg.max_crawl_delay))
        site.state = SiteState.READY

    def _failed(self, site: Site, now: float) -> None:
        """5xx or unreachable: full disallow for now; retry later, a bounded number of times."""
        site.robots_failures += 1
        if site.robots_failures > self.cfg.max_retries:
            self.sites.drop(site, "forbiddenRobots")
            site.robots_failures = 0
        site.ready_at = max(site.ready_at, now + RETRY_DELAY)

