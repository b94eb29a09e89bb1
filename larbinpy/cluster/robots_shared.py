"""robots.txt verdicts shared through Redis: a cluster node's `VerdictStore`.

Each verdict the robots stage learns is written to the node's local store (`robotsdb`) and
to Redis (`<prefix>robots:<site>`, expiring with the verdict, PXAT), so when a site changes
owner (a node joins or leaves) its new owner finds the verdict there instead of fetching
robots.txt again. Writes leave in the background; `idle()` is False while one is on its way,
so a node does not call the crawl done (or leave) before the others can read them.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from larbinpy.cluster.link import Link
from larbinpy.frontier.durable import Store
from larbinpy.frontier.robotsdb import Verdict, VerdictStore

log = logging.getLogger("larbinpy.cluster")


class SharedVerdicts(Store):
    """Redis in front of the local verdict store."""

    def __init__(self, link: Link, local: VerdictStore) -> None:
        self.link, self.local = link, local
        self.writes: set[asyncio.Task[None]] = set()

    def _key(self, site: str) -> str:
        """The Redis key of a site's verdict."""
        return self.link.key("robots", site)

    def get(self, key: str) -> Verdict | None:
        """What this node knows without a round trip."""
        return self.local.get(key)

    async def lookup(self, key: str) -> Verdict | None:
        """This node's verdict, else the cluster's (one GET); None on a Redis error (the
        robots stage then fetches robots.txt: one request more, never a wrong verdict)."""
        verdict = self.local.get(key)
        if verdict is not None:
            return verdict
        try:
            raw = await self.link.execute("GET", self._key(key))
        except (OSError, RedisError) as exc:
            log.warning("cluster: robots.txt verdict of %s unreadable (%s)", key, exc)
            return None
        if raw is None:
            return None
        decoded = Verdict.decode(raw.decode("utf-8", "surrogateescape"))
        return decoded[1] if decoded is not None and decoded[0] == key else None

    def put(self, key: str, verdict: Verdict) -> None:
        """Locally now; to Redis in the background."""
        self.local.put(key, verdict)
        task = asyncio.ensure_future(self._write(key, verdict))
        self.writes.add(task)
        task.add_done_callback(self.writes.discard)

    async def _write(self, key: str, verdict: Verdict) -> None:
        """SET with the verdict's expiry (a lost write costs one robots.txt request later)."""
        try:
            await self.link.execute("SET", self._key(key), verdict.encode(key).encode(),
                                    "PXAT", int(verdict.expires * 1000))
        except (OSError, RedisError) as exc:
            log.warning("cluster: robots.txt verdict of %s not shared (%s)", key, exc)

    def idle(self) -> bool:
        """No verdict on its way to Redis."""
        return not self.writes

    async def drain(self) -> None:
        """Wait for the writes on their way (before leaving the cluster)."""
        if self.writes:
            await asyncio.gather(*self.writes, return_exceptions=True)

    def flush(self) -> None:
        """The local store's rows put so far."""
        self.local.flush()

    def sync(self) -> None:
        """The local store's checkpoint (Redis expires verdicts by itself)."""
        self.local.sync()

    def close(self) -> None:
        """Close the local store (the Redis connection is the cluster's)."""
        self.local.close()
