"""The cluster's one connection to Redis: key names, the job codec, round-trip counting.

Not a pipeline stage: every cluster module talks to Redis through a `Link`, so the key layout
lives in one place and every round trip is counted (the benchmark reports round trips per
page). All keys of one crawl start with `larbinpy:<clusterName>:`:

| key | type | what |
|---|---|---|
| `fp:<digits>` | set (intset) | the seen-set: URL fingerprints ending in those digits |
| `nodes` | sorted set | live nodes, scored by heartbeat expiry (ms, Redis clock) |
| `dead` | set | nodes gone whose queued URLs still wait to be recovered |
| `in:<node>` | stream (group `larbinpy`) | URLs sent to a node: one entry per batch |
| `pending:<node>` | hash url -> job | every URL a node holds and has not fetched yet |
| `node:<node>` | hash | `idle` and `seq`, for the termination check |
| `stats` | hash node -> JSON | each node's figures, for the cluster totals |
| `admitted`, `done` | string | URLs ever admitted; the "crawl is over" flag |
| `ip:<addr>` | string with a TTL | the per-IP politeness lease (`waitDuration` > 0) |

A job travels as a URL plus an "extra" string: the JSON of its other fields that differ from
their defaults (`{"depth":4}` for most), so new `Job` fields travel without a format change.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from larbinpy.records import Job, JobKind

log = logging.getLogger("larbinpy.cluster")
T = TypeVar("T")  # what a retried round trip returns

GROUP = "larbinpy"  # the consumer group of every inbound stream
LOCAL_ONLY = frozenset({"url"})  # Job fields that travel apart (the URL is the key)
RETRY_S = 1.0  # pause after a failed round trip before trying it again
STOP_TRIES = 3  # once stopping, a round trip is tried this many times at most

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Job)
             if f.default is not dataclasses.MISSING}
_FIELDS = [f.name for f in dataclasses.fields(Job) if f.name not in LOCAL_ONLY]
_MISSING = object()
HISTORY = "history"  # the extra's key of a handed-over revisit's page history


def encode_extra(job: Job, history: bytes | None = None) -> str:
    """A job's fields other than its URL, as compact JSON of the non-default ones; a revisit
    handed over carries its page's history (`schedule.encode_visits`, base64)."""
    extra: dict[str, object] = {name: getattr(job, name) for name in _FIELDS
                                if getattr(job, name) != _DEFAULTS.get(name, _MISSING)}
    if history is not None:
        extra[HISTORY] = base64.b64encode(history).decode("ascii")
    return json.dumps(extra, separators=(",", ":"))


def decode_job(url: str, extra: str) -> tuple[Job, bytes | None]:
    """The job of a URL and its extra string, and the history it carries (None: none)."""
    fields = json.loads(extra)
    history = fields.pop(HISTORY, None)
    job = Job(url=url, **fields)
    job.kind = JobKind(job.kind)
    return job, None if history is None else base64.b64decode(history)


def _lines(data: bytes) -> Iterator[tuple[str, str]]:
    """The `url TAB extra` lines of a stream entry."""
    for line in data.decode("utf-8", "surrogateescape").split("\n"):
        url, _, extra = line.partition("\t")
        if url:
            yield url, extra or "{}"


def decode_entry(data: bytes) -> tuple[list[Job], list[bytes]]:
    """A stream entry as its receiver takes it: the jobs to queue, and the histories of the
    revisits handed over (their pages go to the schedule, not to a queue)."""
    jobs, histories = [], []
    for url, extra in _lines(data):
        job, history = decode_job(url, extra)
        if history is None:
            jobs.append(job)
        else:
            histories.append(history)
    return jobs, histories


class Link:
    """A redis.asyncio client for one cluster, with its key names and a round-trip count."""

    def __init__(self, url: str, cluster_name: str, node: str) -> None:
        self.redis = aioredis.Redis.from_url(url, decode_responses=False,
                                             health_check_interval=30)
        self.prefix = f"larbinpy:{cluster_name}:"
        self.node = node
        self.round_trips = 0
        # Set at a clean stop: the loops end between round trips. They are never cancelled
        # in the middle of one, which can leave a redis-py connection waiting forever.
        self.stopping = asyncio.Event()

    def key(self, *parts: str) -> str:
        """A key of this cluster: prefix + parts joined by ':'."""
        return self.prefix + ":".join(parts)

    def script(self, lua: str) -> AsyncScript:
        """Register a Lua script (loaded on first use, then called by its SHA)."""
        return self.redis.register_script(lua)

    async def call(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Run a script: one round trip (plus one the first time, to load it)."""
        self.round_trips += 1
        return await script(keys=keys, args=args)

    async def execute(self, command: str, *args: Any) -> Any:
        """One plain command: one round trip."""
        self.round_trips += 1
        return await self.redis.execute_command(  # type: ignore[no-untyped-call]  # redis-py: no hints
            command, *args)

    async def transaction(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Several commands as one MULTI/EXEC: one round trip, all or nothing."""
        self.round_trips += 1
        pipe = self.redis.pipeline(transaction=True)
        for command in commands:
            pipe.execute_command(*command)
        return await pipe.execute()

    async def pause(self, seconds: float) -> None:
        """Sleep, waking early when the cluster stops."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Await attempt() until it succeeds: a Redis outage delays work, never drops it
        (once stopping, STOP_TRIES tries, then the error is raised)."""
        tries = 0
        while True:
            try:
                return await attempt()
            except (OSError, RedisError) as exc:
                tries += 1
                if self.stopping.is_set() and tries >= STOP_TRIES:
                    raise
                log.warning("cluster: %s failed (%s); retrying", what, exc)
                await asyncio.sleep(RETRY_S)

    async def close(self) -> None:
        """Close the connections."""
        await self.redis.aclose()
