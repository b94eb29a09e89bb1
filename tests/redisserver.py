"""The cluster tests' Redis: a real redis-server per test, on a free loopback port.

`.ci/run` installs Debian's redis-server when it is missing; without it the cluster tests
skip, saying why.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from larbinpy.bench.localredis import LocalRedis, redis_server_path


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """URL of a fresh redis-server, stopped after the test."""
    if redis_server_path() is None:
        pytest.skip("redis-server is not installed (.ci/run installs it: "
                    "apt-get install redis-server)")
    with LocalRedis(tmp_path / "redis") as server:
        yield server.url
