"""Shared fixtures: a real test web on loopback (several hosts, several IPs, real DNS)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings

from larbinpy import PURE
from larbinpy.bench.changing import ChangingServer
from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import DnsServer, LocalWeb, Page, Site

CHECKOUT = Path(__file__).resolve().parents[1]
CRAWL_TIMEOUT = 60.0
WAIT_TIMEOUT = 30.0  # until(): a guard against a hung test on a loaded machine, not a measure

# Property tests check results, never time: hypothesis's 200 ms an example fails on a loaded
# machine (the suite runs in 4 processes on 2 cores)
settings.register_profile("larbinpy", deadline=None)
settings.load_profile("larbinpy")


async def until(condition: Callable[[], object], what: str = "the awaited condition",
                timeout: float = WAIT_TIMEOUT, every: float = 0.02) -> None:
    """Poll `condition()` (awaited when it returns an awaitable) until it is true; after
    `timeout` seconds fail saying `what` never happened."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f} s")
        await asyncio.sleep(every)


def c_extension(name: str) -> ModuleType:
    """The C extension `larbinpy.<name>` (setup.py builds them all at install): a missing one
    fails the test with its ImportError. Only the pure-Python run (LARBINPY_PURE=1, as on a
    machine without a compiler) skips a test that needs one it lacks."""
    if PURE:
        return pytest.importorskip(f"larbinpy.{name}")
    return importlib.import_module(f"larbinpy.{name}")


@pytest.fixture(autouse=True)
def _keeps_the_checkout_clean() -> object:
    """A test writes under its tmp_path, never into the checkout (the defaults ./save and
    ./larbin-state are relative to the working directory, the checkout under pytest)."""
    before = {p.name for p in CHECKOUT.iterdir()}
    yield
    made = sorted({p.name for p in CHECKOUT.iterdir()} - before - {".pytest_cache",
                                                                   ".hypothesis"})
    assert not made, f"the test wrote {made} into the checkout"


def html(*links: str, title: str = "page") -> Page:
    """An HTML page linking to `links`."""
    anchors = "".join(f'<a href="{u}">{u}</a>\n' for u in links)
    return Page(f"<html><head><title>{title}</title></head><body>{anchors}</body></html>")


@dataclass
class TestWeb:
    """A running LocalWeb plus the DNS server that resolves its hosts."""

    web: LocalWeb
    dns: DnsServer
    tmp: Path

    def url(self, host: str, path: str = "/") -> str:
        """Absolute URL of a page of the test web."""
        return self.web.url(host, path)

    def config_text(self, body: str) -> str:
        """A larbin.conf for this web: state and outputs in tmp, its DNS, loopback allowed."""
        return (
            f"stateDir {self.tmp}/state\nsaveDir {self.tmp}/save\n"
            f"dnsServers {self.dns.address}\nallowNetworks 127.0.0.0/8 end\n"
            "httpPort 0\ninputPort 0\nwaitDuration 0\npagesConnexions 10\n"
            f"checkpointInterval 1\n{body}\n"
        )

    async def crawl(self, body: str, timeout: float = CRAWL_TIMEOUT) -> Crawler:
        """Run a crawl of this web with exitAtEnd until it ends; return the crawler."""
        cfg = parse_config(self.config_text("exitAtEnd\n" + body))
        crawler = Crawler(cfg, scratch=True)
        await asyncio.wait_for(crawler.run(), timeout)
        return crawler

    def fetched(self) -> list[str]:
        """Every URL the server was asked for, robots.txt included, in order."""
        return [self.url(h.host, h.path) for h in self.web.hits]

    def pages_fetched(self) -> list[str]:
        """Every page URL the server was asked for, robots.txt excluded."""
        return [u for u in self.fetched() if not u.endswith("/robots.txt")]


@pytest.fixture
async def make_web(tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    """Factory: start a test web from a list of Sites; everything stops after the test."""
    started: list[tuple[LocalWeb, DnsServer]] = []

    async def make(sites: list[Site], extra_dns: dict[str, list[str]] | None = None) -> TestWeb:
        web = LocalWeb(sites)
        await web.start()
        dns = DnsServer({**web.dns_records, **(extra_dns or {})})
        await dns.start()
        started.append((web, dns))
        return TestWeb(web, dns, tmp_path)

    yield make
    for web, dns in started:
        await web.stop()
        await dns.stop()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_json(*args: str, timeout: float = 120) -> dict:
    """`larbinpy bench ARGS --json` in a child process: its result (it must exit 0)."""
    proc = subprocess.run([sys.executable, "-m", "larbinpy", "bench", *args, "--json"],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


CHANGING_LIFETIME = 120.0  # the changing web's child process stops by itself after this


@pytest.fixture
def changing_web(tmp_path: Path) -> Iterator[Callable[..., ChangingServer]]:
    """Factory: start the changing web (`larbinpy.bench.changing`) in a child process with the
    given options (kinds, hosts_per_kind, pages, seed, rate); it stops after the test, or by
    itself after CHANGING_LIFETIME seconds. `.truth()` stops it and returns its log."""
    started: list[ChangingServer] = []

    def start(**options: Any) -> ChangingServer:
        options.setdefault("lifetime", CHANGING_LIFETIME)
        where = tmp_path / f"changing{len(started)}"
        where.mkdir()
        server = ChangingServer(where, **options)
        started.append(server.__enter__())
        return server

    yield start
    for server in started:
        server.stop()
