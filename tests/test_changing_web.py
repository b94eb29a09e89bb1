"""The changing web of the recrawl bench: Poisson change times, honest and lying validators."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from conftest import until
from multidict import CIMultiDict

from larbinpy.bench.changing import (
    KINDS,
    RATE_MIXTURE,
    ChangingPage,
    ChangingWeb,
    http_date,
    make_pages,
    version_of,
)


def test_a_page_changes_at_its_rate() -> None:
    """Changes of a rate-0.5 page over 20,000 s: about 10,000 of them (a Poisson count: 4
    standard deviations allowed), gaps exponential (mean 2 s, standard deviation = mean)."""
    page = ChangingPage("h", "/", "etag", 0.5, t0=0.0, seed="x")
    n = page.version(20_000.0)
    assert abs(n - 10_000) < 4 * math.sqrt(10_000), n
    gaps = [b - a for a, b in zip(page.changes, page.changes[1:n], strict=False)]
    assert 1.9 < statistics.mean(gaps) < 2.1
    assert 0.9 < statistics.stdev(gaps) / statistics.mean(gaps) < 1.1
    assert page.version(-1.0) == 0 and ChangingPage("h", "/", "etag", 0.0, 0.0, "x").version(
        1e9) == 0  # nothing before the start; a static page never changes


def test_the_same_seed_makes_the_same_web_and_another_seed_another() -> None:
    a = make_pages(KINDS, 1, 30, seed=7, t0=100.0)
    b = make_pages(KINDS, 1, 30, seed=7, t0=100.0)
    c = make_pages(KINDS, 1, 30, seed=8, t0=100.0)
    assert [p.rate for p in a.values()] == [p.rate for p in b.values()]
    assert [p.changes_until(400.0) for p in a.values()] == \
        [p.changes_until(400.0) for p in b.values()]
    assert [p.rate for p in a.values()] != [p.rate for p in c.values()]


def test_the_rates_follow_the_mixture() -> None:
    """7 kinds x 10 hosts x 40 pages: the share of each band of the mixture within 3 standard
    deviations of what it says, every rate inside its band, the fastest several a second."""
    rates = [p.rate for p in make_pages(KINDS, 10, 40, seed=1, t0=0.0).values()]
    total = sum(share for share, _, _ in RATE_MIXTURE)
    for share, lo, hi in RATE_MIXTURE:
        inside = sum(lo <= r <= hi for r in rates) / len(rates)
        p = share / total
        assert abs(inside - p) < 3 * math.sqrt(p * (1 - p) / len(rates)), (lo, hi, inside)
    assert max(rates) > 2.0 and min(rates) == 0.0


@pytest.fixture
async def served() -> AsyncIterator[tuple[ChangingWeb, aiohttp.ClientSession]]:
    """Static pages (they change only when a test says), one host of each kind."""
    web = ChangingWeb(KINDS, hosts_per_kind=1, pages=3, fixed_rate=0.0)
    await web.start()
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=web.resolver()))
    yield web, session
    await session.close()
    await web.stop()


async def get(session: aiohttp.ClientSession, web: ChangingWeb, host: str, path: str = "/p1.html",
              **headers: str) -> tuple[int, CIMultiDict[str], bytes]:
    """GET one page: status, headers, body."""
    async with session.get(web.url(host, path), headers=headers) as resp:
        return resp.status, CIMultiDict(resp.headers), await resp.read()


def change(web: ChangingWeb, host: str, *times: float, path: str = "/p1.html") -> None:
    """Make the page change at these (past) times."""
    for t in times:
        web.pages[(host, path)].bump(t)


async def test_honest_etag_host_answers_304_until_the_page_changes(served) -> None:
    web, session = served
    host = "etag-0.changing.test"
    status, headers, body = await get(session, web, host)
    assert status == 200 and version_of(body) == 0
    etag, lm = headers["ETag"], headers["Last-Modified"]
    assert (await get(session, web, host, **{"If-None-Match": etag}))[0] == 304
    assert (await get(session, web, host, **{"If-Modified-Since": lm}))[0] == 304
    change(web, host, time.time() - 2)
    status, headers, body = await get(session, web, host, **{"If-None-Match": etag,
                                                             "If-Modified-Since": lm})
    assert status == 200 and version_of(body) == 1 and headers["ETag"] != etag
    # If-None-Match decides over an old If-Modified-Since, as RFC 9110 says
    assert (await get(session, web, host, **{"If-None-Match": headers["ETag"],
                                             "If-Modified-Since": lm}))[0] == 304
    answers = [a for a in web.answers if a.host == host]
    assert [(a.status, a.version, a.inm, a.ims) for a in answers] == [
        (200, 0, False, False), (304, 0, True, False), (304, 0, False, True),
        (200, 1, True, True), (304, 1, True, True)]


async def test_honest_last_modified_host_refuses_a_304_it_cannot_vouch_for(served) -> None:
    """Last-Modified has second resolution: after two changes in one second the honest host
    answers 200 to the copy's If-Modified-Since; the lm-coarse host lies with a 304."""
    web, session = served
    second = math.floor(time.time()) - 5
    for host, after_two in (("lm-0.changing.test", 200), ("lm-coarse-0.changing.test", 304)):
        change(web, host, second + 0.1)
        status, headers, body = await get(session, web, host)
        assert status == 200 and version_of(body) == 1 and "ETag" not in headers
        lm = headers["Last-Modified"]
        assert lm == http_date(second + 0.1)
        assert (await get(session, web, host, **{"If-Modified-Since": lm}))[0] == 304
        change(web, host, second + 0.6)  # the same second
        status, _, body = await get(session, web, host, **{"If-Modified-Since": lm})
        assert status == after_two, host
        change(web, host, second + 2.5)  # a later second: both see the change
        assert (await get(session, web, host, **{"If-Modified-Since": lm}))[0] == 200


async def test_lying_validators(served) -> None:
    web, session = served
    # Last-Modified is always the time of the answer, so never a 304
    _, headers, _ = await get(session, web, "lm-now-0.changing.test")
    assert abs(email_time(headers["Last-Modified"]) - time.time()) < 2
    status, _, _ = await get(session, web, "lm-now-0.changing.test",
                             **{"If-Modified-Since": headers["Last-Modified"]})
    assert status == 200
    # a new ETag on every answer of an unchanged page
    tags = [(await get(session, web, "etag-churn-0.changing.test"))[1]["ETag"] for _ in range(3)]
    assert len(set(tags)) == 3
    status, headers, body = await get(session, web, "etag-churn-0.changing.test",
                                      **{"If-None-Match": tags[-1]})
    assert status == 200 and version_of(body) == 0
    # a 304 for a page that changed, carrying the client's own validators back
    host = "false-304-0.changing.test"
    _, headers, _ = await get(session, web, host)
    change(web, host, time.time() - 3)
    status, back, _ = await get(session, web, host, **{"If-None-Match": headers["ETag"]})
    assert status == 304 and back["ETag"] == headers["ETag"]
    assert version_of((await get(session, web, host))[2]) == 1
    # no validators: conditional headers are ignored
    status, headers, _ = await get(session, web, "none-0.changing.test",
                                   **{"If-Modified-Since": http_date(time.time())})
    assert status == 200 and "ETag" not in headers and "Last-Modified" not in headers


def email_time(text: str) -> float:
    """Unix time of an HTTP date."""
    import email.utils

    return email.utils.parsedate_to_datetime(text).timestamp()


async def test_robots_txt_and_the_root_link_every_page_and_keep_out_of_control(served) -> None:
    web, session = served
    status, _, body = await get(session, web, "none-0.changing.test", "/robots.txt")
    assert status == 200 and b"Disallow: /.changing/" in body
    _, _, root = await get(session, web, "none-0.changing.test", "/")
    assert b'href="/p1.html"' in root and b'href="/p2.html"' in root
    assert (await get(session, web, "none-0.changing.test", "/p9.html"))[0] == 404


def test_the_child_process_tells_its_log_and_stops_by_itself(changing_web) -> None:
    """Through the conftest fixture: a bump is a new version in the log; the server's log
    file has every answer; with a short lifetime it exits on its own."""
    server = changing_web(kinds=("etag",), hosts_per_kind=1, pages=2, rate=0.0)
    host = server.hosts()[0]
    assert server.control(host, "bump?path=/p1.html", "POST") == {"version": 1}
    log = server.control(host, "log")
    assert [len(p["changes"]) for p in log["pages"]] == [0, 1]
    truth = server.truth()
    assert truth["pages"][1]["changes"] == log["pages"][1]["changes"]
    short = changing_web(kinds=("none",), hosts_per_kind=1, pages=1, lifetime=0.5)
    assert short.proc is not None
    short.proc.wait(timeout=20)  # bounded: it stops by itself after its lifetime
    assert short.proc.returncode == 0 and short.log_file.exists()


async def test_the_child_process_serves_through_its_own_dns(changing_web) -> None:
    """The crawler's path: names resolved by the web's DNS server, then HTTP."""
    from dnslib import DNSRecord

    server = changing_web(kinds=("lm",), hosts_per_kind=2, pages=2, rate=5.0)
    host = server.hosts()[1]
    reply = DNSRecord.parse(DNSRecord.question(host).send("127.0.0.1", server.dns_port,
                                                          timeout=5))
    assert [str(rr.rdata) for rr in reply.rr] == [server.ip(host)]
    versions: list[int] = []

    async def another_version() -> bool:
        async with aiohttp.ClientSession() as session, session.get(
                f"http://{server.ip(host)}:{server.http_port}/p1.html",
                headers={"Host": host}) as resp:
            v = version_of(await resp.read())
        assert v is not None
        versions.append(v)
        return len(set(versions)) > 1

    await until(another_version, "a page of rate 5/s changing", timeout=20, every=0.1)
