"""The memory budget of documents being read or parsed (`documentMemory`, net/docmemory.py).

A pool of bytes shared by every page, sitemap and robots.txt in flight: a document that does
not fit waits for room. The pool itself is tested alone; the crawls run on the hostile server
(tests/hostile.py) and judge by what the server saw, what the crawler counted and, for the
memory bound, the peak RSS of a crawler in its own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import hostile as h
import pytest
from conftest import CRAWL_TIMEOUT, html

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import DnsServer, LocalWeb, Site
from larbinpy.net.body import MIN_RATE_GRACE
from larbinpy.net.docmemory import DocumentMemory

MiB = 1024 * 1024
RSS_BOUND = 300 * 1000 * 1000  # issue 21: peak RSS of the whole crawler, in each case
XML = "application/xml"

CRAWL_IN_A_PROCESS = """
import asyncio, json, sys
from pathlib import Path
from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
crawler = Crawler(parse_config(sys.argv[1]), scratch=True)
asyncio.run(crawler.run())
peak = next(int(line.split()[1]) * 1024 for line in
            Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
print(json.dumps({"peak": peak, "outcomes": crawler.stats.outcomes,
                  "memory": {"peak": crawler.memory.peak, "waits": crawler.memory.waits,
                             "used": crawler.memory.used}}))
"""


def link_page(links: int = 750_000) -> bytes:
    """An HTML page of `links` short distinct relative links (~13 bytes each)."""
    return b"<html><body>" + b"".join(b"<a href=%s>" % _base36(i) for i in range(links))


def _base36(i: int) -> bytes:
    """`i` in base 36, as link text."""
    digits = b"0123456789abcdefghijklmnopqrstuvwxyz"
    out = b""
    while True:
        i, r = divmod(i, 36)
        out = digits[r : r + 1] + out
        if not i:
            return out


def streamed(body: bytes, ctype: str = "text/html") -> h.Trap:
    """`body` without a Content-Length (it ends when the connection closes)."""

    async def trap(conn: h.Conn, path: str) -> None:
        await conn.send(h.head(ctype=ctype))
        for i in range(0, len(body), h.CHUNK):
            await conn.send(body[i : i + h.CHUNK])

    return trap


def huge_sitemap(size: int) -> h.Trap:
    """A urlset of `size` bytes, nearly all of it an XML comment, sent as fast as it is read."""
    pad = b"<!--" + b"-" * (h.CHUNK - 8) + b"-->\n"

    async def trap(conn: h.Conn, path: str) -> None:
        await conn.send(h.head(ctype=XML) + b"<urlset><url><loc>/p.zip</loc></url>\n")
        for _ in range(size // len(pad)):
            await conn.send(pad)

    return trap


def run_crawler_process(text: str) -> dict:
    """Crawl with this larbin.conf text in a fresh crawler process: its peak RSS (VmHWM),
    outcomes and document-memory counters."""
    done = subprocess.run([sys.executable, "-c", CRAWL_IN_A_PROCESS, text],
                          capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout)


@contextlib.asynccontextmanager
async def serving(sites: list[h.HostileSite]) -> AsyncIterator[tuple[h.HostileServer, DnsServer]]:
    """The hostile server for these sites and a DNS server naming them; stopped after."""
    server = h.HostileServer(sites)
    async with server.with_dns() as dns:
        for site in sites:
            if site.robots is not None:  # robots.txt naming a sitemap: its URL needs the port
                site.robots = h.page(f"Sitemap: {server.url(site.host, '/sm.xml')}\n",
                                     "text/plain")
        yield server, dns


async def crawl_in_a_process(tmp_path: Path, sites: list[h.HostileSite], conf: str) -> dict:
    """Crawl the sites' start pages in a fresh crawler process (`run_crawler_process`)."""
    async with serving(sites) as (server, dns):
        text = server.crawl_conf(tmp_path, dns.address, conf)
        return await asyncio.to_thread(run_crawler_process, text)


def sitemap_sites(n: int, size: int) -> list[h.HostileSite]:
    """`n` sites whose robots.txt names a sitemap of `size` bytes."""
    sites = [h.HostileSite(f"s{i}.test", f"127.0.5.{i + 1}", h.page("<html></html>"))
             for i in range(n)]
    for site in sites:
        site.robots = h.page("")  # replaced once the server's port is known
        site.paths["/sm.xml"] = huge_sitemap(size)
    return sites


def page_sites(n: int, body: bytes) -> list[h.HostileSite]:
    """`n` sites whose start page is `body`: half with a Content-Length, half streamed."""
    return [h.HostileSite(f"p{i}.test", f"127.0.6.{i + 1}",
                          h.page(body) if i % 2 else streamed(body)) for i in range(n)]


# --- the pool alone ------------------------------------------------------------------------


async def test_a_document_that_does_not_fit_waits_until_room_is_given_back() -> None:
    pool = DocumentMemory(100)
    first, second = pool.reservation(), pool.reservation()
    await first.take(80)
    waiting = asyncio.ensure_future(second.take(30))
    await asyncio.sleep(0)
    assert not waiting.done() and pool.waiting == 1 and pool.waits == 1
    first.release()
    await waiting
    assert (pool.used, second.held, pool.waiting) == (30, 30, 0)


async def test_take_now_grants_what_take_would_grant_at_once_and_never_jumps_the_line() -> None:
    pool = DocumentMemory(100)
    first, second, third = pool.reservation(), pool.reservation(), pool.reservation()
    assert first.take_now(80) and (pool.used, first.held) == (80, 80)
    assert not second.take_now(30) and second.held == 0  # does not fit: nothing held
    waiting = asyncio.ensure_future(second.take(30))  # the wait is take's
    await asyncio.sleep(0)
    assert not third.take_now(10) and third.held == 0  # it fits, but second asked first
    assert first.take_now(50) and first.held == 130  # the oldest holder always goes on
    first.release()
    await waiting
    assert (pool.used, second.held, pool.waiting) == (30, 30, 0)
    assert third.take_now(10) and pool.used == 40


async def test_waiting_documents_get_room_in_the_order_they_asked() -> None:
    pool = DocumentMemory(100)
    holder, big, small = pool.reservation(), pool.reservation(), pool.reservation()
    await holder.take(60)
    big_waits = asyncio.ensure_future(big.take(90))
    await asyncio.sleep(0)
    small_waits = asyncio.ensure_future(small.take(10))  # it would fit, but big asked first
    await asyncio.sleep(0)
    assert not small_waits.done()
    order: list[str] = []
    big_waits.add_done_callback(lambda _: order.append("big"))
    small_waits.add_done_callback(lambda _: order.append("small"))
    holder.release()
    await asyncio.gather(big_waits, small_waits)
    assert order == ["big", "small"] and pool.used == 100


async def test_a_document_larger_than_the_pool_takes_it_alone() -> None:
    pool = DocumentMemory(100)
    huge, other = pool.reservation(), pool.reservation()
    await huge.take(500)  # the pool was empty
    other_waits = asyncio.ensure_future(other.take(1))
    await asyncio.sleep(0)
    assert not other_waits.done()
    huge.release()
    await other_waits
    assert pool.used == 1 and pool.peak == 500


async def test_documents_growing_at_once_never_deadlock_the_oldest_goes_on() -> None:
    pool = DocumentMemory(100)
    old, young = pool.reservation(), pool.reservation()
    await old.take(50)
    await young.take(50)
    young_grows = asyncio.ensure_future(young.take(40))
    await asyncio.sleep(0)
    await old.take(40)  # full, but the oldest document always finishes
    assert not young_grows.done()
    old.release()
    await young_grows
    assert pool.used == 90 and pool.peak == 140  # at most the pool plus one document


async def test_a_wait_ends_at_the_deadline_and_leaves_the_line() -> None:
    pool = DocumentMemory(100)
    holder = pool.reservation()
    late = pool.reservation(deadline=time.monotonic() + 0.05)
    behind = pool.reservation()
    await holder.take(90)
    late_waits = asyncio.ensure_future(late.take(50))
    await asyncio.sleep(0)
    behind_waits = asyncio.ensure_future(behind.take(10))  # fits, but behind `late`
    with pytest.raises(TimeoutError):
        await late_waits
    await behind_waits  # `late` gave up its place: the one behind it goes on
    late.release()
    assert pool.used == 100 and pool.waiting == 0


# --- crawls --------------------------------------------------------------------------------


async def crawl_in_process(tmp_path: Path, sites: list[h.HostileSite], conf: str,
                           ) -> tuple[Crawler, h.HostileServer]:
    """Crawl the sites' start pages in this process: the crawler, and the server."""
    async with serving(sites) as (server, dns):
        cfg = parse_config(server.crawl_conf(tmp_path, dns.address, conf))
        crawler = Crawler(cfg, scratch=True)
        await asyncio.wait_for(crawler.run(), CRAWL_TIMEOUT)
    return crawler, server


async def test_large_pages_over_the_budget_wait_for_room_and_none_is_lost(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "larbinpy.docmemory")
    size = 4 * MiB
    body = b"<html><body><a href=/next.html>next</a>" + b"<p>" + b"x" * size + b"</p>"
    sites = page_sites(2, body)  # one with a Content-Length, one streamed
    for site in sites:
        site.paths["/next.html"] = h.page("<html>the end</html>")
    crawler, server = await crawl_in_process(
        tmp_path, sites, "robots off\ndocumentMemory 1MiB\n")
    assert crawler.stats.outcomes["success"] == 4  # both pages, and the page each links to
    for site in sites:
        assert [hit.path for hit in server.hits_for(site.host)] == ["/", "/next.html"]
    memory = crawler.memory
    assert memory.waits >= 1 and crawler.stats.resource_waits >= memory.waits
    # never both pages at once: the pool and at most one document over it
    assert memory.peak <= memory.capacity + len(body)
    assert memory.used == 0  # everything was given back
    assert "documentMemory full" in caplog.text  # the operator is told


def stalls_after(body: bytes, sent: asyncio.Event) -> h.Trap:
    """`body` without a Content-Length, then nothing for ever (`sent` set once it is sent)."""

    async def trap(conn: h.Conn, path: str) -> None:
        await conn.send(h.head() + body)
        sent.set()
        await asyncio.sleep(3600)

    return trap


def after(event: asyncio.Event, trap: h.Trap) -> h.Trap:
    """`trap` once `event` is set."""

    async def waiting(conn: h.Conn, path: str) -> None:
        await event.wait()
        await trap(conn, path)

    return waiting


async def test_a_stalled_read_holding_the_budget_ends_by_its_timeout(tmp_path: Path) -> None:
    sent = asyncio.Event()
    stalled = h.HostileSite("stalled.test", "127.0.6.1", stalls_after(b"x" * 2 * MiB, sent))
    waits = h.HostileSite("waits.test", "127.0.6.2",
                          after(sent, streamed(b"<html>" + b"y" * 2 * MiB)))
    crawler, server = await crawl_in_process(
        tmp_path, [stalled, waits],
        "robots off\ndocumentMemory 1MiB\ntimeoutRead 1\ntimeoutTotal 30\n")
    out = crawler.stats.outcomes
    assert (out["timeout"], out["success"]) == (1, 1)  # the stalled read, and the other page
    assert crawler.memory.waits >= 1 and crawler.memory.used == 0


def paced(size: int, seconds: float, started: asyncio.Event) -> h.Trap:
    """A page of `size` bytes with a Content-Length, sent over about `seconds` in chunks of
    64 KiB (`started` set once its head and first chunk are out)."""
    step = 64 * 1024
    body = b"<html><body>" + b"z" * (size - 12)

    async def trap(conn: h.Conn, path: str) -> None:
        await conn.send(h.head(Content_Length=len(body)))
        for i in range(0, len(body), step):
            await conn.send(body[i : i + step])
            started.set()
            await asyncio.sleep(seconds * step / len(body))

    return trap


@pytest.mark.parametrize("client", ["http1", "aiohttp"])
async def test_waiting_for_document_memory_is_not_counted_against_min_rate(
        tmp_path: Path, client: str) -> None:
    # a page taking the whole pool for 3.5 s (at three times minRate), then four fast 2 MiB
    # pages (two without a Content-Length): those wait for room longer than minRate's grace
    started = asyncio.Event()
    holder = h.HostileSite("holder.test", "127.0.7.1", paced(MiB, 3.5, started))
    body = b"<html>" + b"f" * 2 * MiB
    fast = [h.HostileSite(f"fast{i}.test", f"127.0.7.{i + 2}",
                          after(started, h.page(body) if i % 2 else streamed(body)))
            for i in range(4)]
    async with serving([holder, *fast]) as (server, dns):
        proxy = f"proxy 127.0.7.1 {server.port}\n" if client == "aiohttp" else ""
        cfg = parse_config(server.crawl_conf(
            tmp_path, dns.address, f"robots off\ndocumentMemory 1MiB\nminRate 100000\n{proxy}"))
        crawler = Crawler(cfg, scratch=True)
        await asyncio.wait_for(crawler.run(), CRAWL_TIMEOUT)
    out = crawler.stats.outcomes
    assert (out["success"], out["timeout"]) == (5, 0), dict(out)
    # the case was met: the fast pages waited for room, longer than the grace period
    log = [json.loads(line) for line in (tmp_path / "save" / "crawl.jsonl").open()]
    waited = [line["ms"] for line in log if "fast" in line["url"]]
    assert len(waited) == 4 and max(waited) > MIN_RATE_GRACE * 1000, waited
    assert crawler.memory.waits >= 1 and crawler.memory.used == 0


@pytest.mark.slow
async def test_twelve_60_mb_sitemaps_at_once_stay_under_300_mb(tmp_path: Path) -> None:
    n = 12
    result = await crawl_in_a_process(tmp_path, sitemap_sites(n, 60 * 1000 * 1000), "")
    assert result["outcomes"]["success"] == 2 * n  # each site's page and its sitemap, cut
    assert result["peak"] <= RSS_BOUND, result["peak"] // MiB


@pytest.mark.slow
async def test_sixteen_10_mib_pages_of_750000_links_at_once_stay_under_300_mb(
        tmp_path: Path) -> None:
    n = 16
    body = link_page()
    assert len(body) <= 10 * MiB
    result = await crawl_in_a_process(tmp_path, page_sites(n, body), "robots off\ndepthInSite 0\n")
    assert result["outcomes"]["success"] == n
    assert result["peak"] <= RSS_BOUND, result["peak"] // MiB


@pytest.mark.slow
async def test_the_first_rounds_hostile_checks_stay_under_300_mb(tmp_path: Path) -> None:
    from test_hostile import CAP, TIMEOUTS, canary_sites, flood, traps

    sites = [h.HostileSite(f"{name}.trap", f"127.0.3.{i + 1}", trap)
             for i, (name, (trap, _)) in enumerate(traps().items())]
    server = h.HostileServer(sites)
    for enc in ("gzip", "deflate", "br"):  # built before the crawl, not while serving it
        await asyncio.to_thread(h.bomb_bytes, enc, 256 * MiB)
    web = LocalWeb(canary_sites())
    web.sites["flood.test"] = Site("flood.test", "127.0.0.4", {"/": flood()})
    await web.start()
    await server.start()
    dns = DnsServer({**web.dns_records, **server.dns_records})
    await dns.start()
    web.sites["canary1.test"].pages["/"] = html(
        "/c0.html", web.url("canary2.test", "/"), web.url("flood.test", "/"),
        *(server.url(f"{name}.trap", "/") for name in traps()))
    text = (f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\ndnsServers {dns.address}\n"
            "allowNetworks 127.0.0.0/8 "
            "end\nhttpPort 0\ninputPort 0\nwaitDuration 0\noutput none\nexitAtEnd\n"
            f"depthInSite 30\nstartUrl {web.url('canary1.test')}\n{TIMEOUTS}maxPageSize {CAP}\n"
            "robots off\npagesConnexions 40\nforbiddenExtensions .zip end\n")
    try:
        result = await asyncio.to_thread(run_crawler_process, text)
    finally:
        await server.stop()
        await web.stop()
        await dns.stop()
    assert result["outcomes"]["success"] == 2 * 13 + 2  # canaries, link flood, smallbinary
    assert result["peak"] <= RSS_BOUND, result["peak"] // MiB
