"""The per-site view as an operator reads it: `/sites` (the busiest and the most failing sites),
`/sites/HOST` (a site's detail and last outcomes), their JSON, from a real daemon crawling a
web on loopback; the tallies' memory and the page's time with 100,000 sites in the real site
table."""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import time
import tracemalloc

import pytest
from conftest import html, until
from hypothesis import given, settings
from hypothesis import strategies as st
from test_daemon import chromium, start_daemon, submit
from test_daemon import wait_idle as wait_daemon_idle
from test_ports import daemon, wait_idle
from test_status_page import get_text

from larbinpy.daemon.sitespage import render_site, render_sites
from larbinpy.demo import Page, Site
from larbinpy.frontier.diskqueue import SiteSpill
from larbinpy.frontier.endings import Ended
from larbinpy.frontier.leaders import TOP_SHOWN, Leaders
from larbinpy.frontier.sites import Sites
from larbinpy.frontier.siteview import site_detail, top_sites
from larbinpy.records import RING_KEPT, Job, SiteTally
from larbinpy.records import Site as SiteRecord
from larbinpy.stats import Outcome, Stats


def mixed_web() -> list[Site]:
    """A busy healthy site (five pages), a site with a 404 and a page robots.txt forbids,
    and a site whose page answers 503 with a long Retry-After."""
    return [
        Site("busy.test", "127.0.0.2", {"/": html(*[f"/{i}.html" for i in range(4)]),
                                        **{f"/{i}.html": html() for i in range(4)}}),
        Site("f.test", "127.0.0.3", {
            "/": html("/gone.html", "/private/p.html", "/ok.html"), "/ok.html": html(),
            "/private/p.html": html(),
            "/robots.txt": Page("User-agent: *\nDisallow: /private/\n",
                                content_type="text/plain")}),
        Site("slow.test", "127.0.0.4", {"/": Page("busy", status=503,
                                                  headers={"Retry-After": "3600"})}),
    ]


async def get_json(client, url: str, status: int = 200):
    """GET a JSON answer, checking its status."""
    async with client.get(url) as r:
        assert r.status == status, await r.text()
        return await r.json()


async def test_sites_lists_the_busiest_and_the_failing_with_their_state(make_web):
    tw = await make_web(mixed_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        seeds = [tw.url(h) for h in ("busy.test", "f.test", "slow.test")]
        async with client.post(input_url + "/urls", json={"urls": seeds}):
            pass
        await until(lambda: crawler.stats.pages >= 9 and all(
            s.backoffs for s in crawler.sites.by_key.values() if "slow" in s.key),
            "every page fetched and slow.test backed off")
        view = await get_json(client, status_url + "/sites.json")
        status = await get_json(client, status_url + "/status.json")
        page = await get_text(client, status_url + "/sites")
        status_page = await get_text(client, status_url + "/")
    busy, f, slow = (tw.url(h).rstrip("/") for h in ("busy.test", "f.test", "slow.test"))
    assert status["sites_view"] == view
    assert [s["site"] for s in view["busiest"]][:2] == [busy, f]  # 5 pages, then 3
    by_site = {s["site"]: s for s in view["busiest"]}
    assert by_site[busy]["pages"] == 5 and by_site[busy]["failures"] == 0
    assert by_site[busy]["last"]["kind"] == "success"
    assert by_site[busy]["robots"]["state"] == "allow all"  # no robots.txt: 404
    # f.test: a 404 and a URL robots.txt forbids, and its robots.txt has rules
    assert [s["site"] for s in view["failing"]] == [f, slow]  # 2 failures, then 1 back-off
    failing = view["failing"][0]
    assert failing["failures"] == 2
    assert failing["outcomes"] == {"err40X": 1, "forbiddenRobots": 1}
    assert failing["robots"]["state"] == "rules"
    assert failing["robots"]["bytes"] == len("User-agent: *\nDisallow: /private/\n")
    # slow.test: its page backed off (not a final outcome yet), still queued, waits an hour
    slow_row = await_site(view, slow)
    assert slow_row["backoff"]["in_a_row"] == 1 and slow_row["queued"] == 1
    assert slow_row["backoff"]["until"] > time.time() + 3000
    assert slow_row["next_fetch"] >= slow_row["backoff"]["until"]
    # the HTML: both tables, each site linked to its detail; the status page links /sites
    busiest = page[page.index('<table id="busiest">'):]
    assert f'<a href="/sites/{busy.split("//")[1]}">{busy}</a>' in busiest
    failing_html = page[page.index('<table id="failing">'):]
    assert "err40X 1, forbiddenRobots 1" in failing_html
    # a robots.txt verdict holds a day (robotsTtl): its time has the date
    held = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(failing["robots"]["until"]))
    assert f'rules ({failing["robots"]["bytes"]} bytes) until {held}' in failing_html
    assert '<a href="/sites">sites</a>' in status_page


def await_site(view: dict, key: str) -> dict:
    """A site's row in the view."""
    rows = [s for s in view["busiest"] + view["failing"] if s["site"] == key]
    assert rows, f"{key} not in the view"
    return rows[0]


async def test_a_site_detail_has_its_last_outcomes_newest_first_ten_at_most(make_web):
    """Thirty 404s on one site: its detail keeps the last ten, newest first, with their
    paths and statuses; its tally counts all thirty."""
    front = html(*[f"/missing{i}.html" for i in range(30)])
    tw = await make_web([Site("m.test", "127.0.0.2", {"/": front})])
    async with daemon(tw, "pagesConnexions 1\n") as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("m.test")]}):
            pass
        await wait_idle(client, status_url)
        host = tw.url("m.test").split("//")[1].rstrip("/")
        found = await get_json(client, f"{status_url}/sites/{host}.json")
        page = await get_text(client, f"{status_url}/sites/{host}")
        upper = await get_json(client, f"{status_url}/sites/{host.upper()}.json")
    fetched = [u.split(host)[1] for u in tw.pages_fetched() if "missing" in u]
    assert len(found) == 1 and upper == found  # host names are case-insensitive
    site = found[0]
    assert site["outcomes"] == {"err40X": 30} and site["failures"] == 30
    assert site["pages"] == 31 and site["ip"] == "127.0.0.2"
    assert [r["path"] for r in site["recent"]] == fetched[::-1][:RING_KEPT]
    assert {(r["kind"], r["status"]) for r in site["recent"]} == {("err40X", 404)}
    table = page[page.index('<table class="recent">'):]
    assert f'<td>err40X</td><td>404</td><td class="url">{fetched[-1]}</td>' in table
    assert table.count("<tr>") == RING_KEPT + 1  # the header and ten outcomes


async def test_an_unknown_site_is_a_404_with_the_reason(make_web):
    tw = await make_web(mixed_web()[:1])
    async with daemon(tw) as (crawler, client, status_url, input_url):
        async with client.get(status_url + "/sites/nosuchhost.test") as r:
            assert r.status == 404
            assert "no site nosuchhost.test in this crawl's site table" in await r.text()
        error = await get_json(client, status_url + "/sites/nosuchhost.test.json", 404)
        assert error["error"].startswith("no site nosuchhost.test")
        empty = await get_json(client, status_url + "/sites.json")
        page = await get_text(client, status_url + "/sites")
    assert empty["busiest"] == empty["failing"] == [] and empty["sites_known"] == 0
    assert "No page fetched yet." in page and "No failures so far." in page


def filled_table(tmp_path, n: int) -> Sites:
    """The real site table with `n` sites, each with 1 to 4 outcomes (every other one a
    failure, for one site in seven) as the crawl's `Endings` would tell them, and a job
    still queued for one site in two."""
    sites = Sites(Stats(), 0.0, SiteSpill(tmp_path / "spill"))
    for i in range(n):
        sites.enqueue(Job(f"http://site{i}.test/", 1), 0.0)
        if i % 2:
            sites.take(sites.by_key[f"http://site{i}.test"])
        for j in range(1 + i % 4):
            url = f"http://site{i}.test/page/{j}.html"
            failed = i % 7 == 0 and j % 2
            sites.tally(Ended(Job(url, 1), Outcome.err50X if failed else Outcome.success,
                              500 if failed else 200))
    return sites


def test_the_view_renders_under_100_ms_with_100000_sites(tmp_path):
    """The whole /sites answer (picking the top sites, HTML and JSON) and a site's detail,
    best of three, with 100,000 sites in the real table: the lists are the table's largest."""
    sites = filled_table(tmp_path, 100_000)

    def answer() -> float:
        start = time.perf_counter()
        view = top_sites(sites)
        render_sites(view)
        json.dumps(view)
        render_site("site77.test", site_detail(sites, "site77.test"))
        return time.perf_counter() - start

    best = min(answer() for _ in range(3))
    view = top_sites(sites)
    assert best < 0.100, f"{best * 1000:.0f} ms"
    assert view["sites_known"] == 100_000
    assert len(view["busiest"]) == len(view["failing"]) == TOP_SHOWN
    assert {s["pages"] for s in view["busiest"]} == {4}
    assert all(s["failures"] == 2 for s in view["failing"])  # i % 7 == 0, 4 outcomes


def test_a_sites_tally_costs_few_hundred_bytes_with_a_full_ring():
    """Measured with tracemalloc: a tally with its counts and a full ring of ten outcomes
    (paths of 30 bytes, the crawl's usual) under 600 bytes a site; the counts alone (an
    empty ring) under 150."""
    def cost(outcomes: int, kind: Outcome) -> float:
        gc.collect()
        tracemalloc.start()
        tallies = [SiteTally() for _ in range(2_000)]
        before = tracemalloc.get_traced_memory()[0]
        for t in tallies:
            for j in range(outcomes):
                t.add(1.8e9 + j, kind, 200, f"/section/article-{j:08d}.html")
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return (size - before) / len(tallies) + (before / len(tallies))

    full = cost(12, Outcome.err40X)  # the kinds' counts, a full ring
    assert full < 600, f"{full:.0f} bytes a site"
    assert cost(0, Outcome.success) < 150


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 3)), max_size=400),
       st.sets(st.integers(0, 60), max_size=20))
def test_the_boards_top_is_the_tables_top_or_it_says_it_cannot_tell(outcomes, forgotten):
    """Sites counting up in any order (site, how many more), some forgotten at the end: the
    board's top 5 have the counts of the table's top 5, or the board says it cannot tell
    (it was cut and forgotten sites left it fewer than 5)."""
    counts: dict[str, int] = {}
    records = [SiteRecord(f"http://s{i}.test", f"s{i}.test") for i in range(61)]
    board = Leaders(5, lambda site: counts.get(site.key, 0))
    for i, more in outcomes:
        key = records[i].key
        counts[key] = counts.get(key, 0) + more
        board.offer(records[i], counts[key])
    alive = {r.key for r in records} - {records[i].key for i in forgotten}
    top = board.top(lambda site: site.key in alive)
    truth = sorted((n for k, n in counts.items() if k in alive), reverse=True)[:5]
    if top is None:
        assert board.cut and len([k for k in board.board if k in alive]) < 5
    else:
        assert [counts[s.key] for s in top] == truth
    assert len(board.board) <= 4 * 5


async def dump_dom(browser: str, profile, url: str) -> str:
    """The page's DOM after Chromium (headless) loaded it."""
    dump = await asyncio.create_subprocess_exec(
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", "--dump-dom", url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    dom, _ = await asyncio.wait_for(dump.communicate(), 60)
    return dom.decode()


@pytest.mark.browser
async def test_the_sites_pages_in_a_real_browser(make_web):
    """A daemon in its own process crawls a site with a 404: Chromium shows it in both
    lists of /sites, linked, and its detail page lists its last outcomes."""
    browser = chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (.ci/run installs Debian's chromium)")
    tw = await make_web([Site("d.test", "127.0.0.2", {
        "/": html("/a.html", "/gone.html"), "/a.html": html(),
        "/gone.html": Page("gone", status=404)})])
    proc, port = await start_daemon(tw)
    try:
        await asyncio.to_thread(submit, port, tw.url("d.test"))
        await wait_daemon_idle(port, 3)
        sites = await dump_dom(browser, tw.tmp / "chrome", f"http://127.0.0.1:{port}/sites")
        host = tw.url("d.test").split("//")[1].rstrip("/")
        detail = await dump_dom(browser, tw.tmp / "chrome",
                                f"http://127.0.0.1:{port}/sites/{host}")
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 30)
    link = f'<a href="/sites/{host}">http://{host}</a>'
    for table in ("busiest", "failing"):
        rows = sites[sites.index(f'<table id="{table}">'):]
        assert link in rows[:rows.index("</table>")]
    assert "<td>err40X 1</td>" in sites
    assert f"<h1>Site {host}</h1>" in detail
    recent = detail[detail.index('<table class="recent">'):]
    assert '<td>err40X</td><td>404</td><td class="url">/gone.html</td>' in recent
    assert "<th>pages fetched</th><td>3</td>" in detail
