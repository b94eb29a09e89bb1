"""The status page and /metrics as an operator reads them, from a real daemon on loopback:
the chart's axes, the PAUSED banner, the last failures, sites counted once, the submission log."""

from __future__ import annotations

import logging

from conftest import html, until
from prometheus_client.parser import text_string_to_metric_families
from test_ports import daemon, small_web, wait_idle

from larbinpy import outputs as outputs_module
from larbinpy.daemon.statuspage import render_html
from larbinpy.demo import Page, Site


async def get_text(client, url: str) -> str:
    """GET a page's text."""
    async with client.get(url) as r:
        assert r.status == 200
        return await r.text()


async def get_json(client, url: str) -> dict:
    """GET status.json."""
    async with client.get(url + "/status.json") as r:
        return await r.json()


async def get_metrics(client, url: str) -> dict:
    """GET /metrics, parsed: family name -> {labels as a sorted tuple: value} (a counter's
    `_total` samples)."""
    text = await get_text(client, url + "/metrics")
    return {m.name: {tuple(sorted(s.labels.items())): s.value for s in m.samples
                     if s.name in (m.name, m.name + "_total")}
            for m in text_string_to_metric_families(text)}


def failing_web() -> list[Site]:
    """A site whose front page links to a 404, a page robots.txt forbids and a good page."""
    return [Site("f.test", "127.0.0.2", {
        "/": html("/gone.html", "/private/p.html", "/ok.html"),
        "/ok.html": html(),
        "/private/p.html": html(),
        "/robots.txt": Page("User-agent: *\nDisallow: /private/\n", content_type="text/plain"),
    })]


async def test_the_chart_has_labelled_axes_and_a_time_scale(make_web):
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("one.test")]}):
            pass
        await wait_idle(client, status_url)
        # samples are taken once a second: the chart needs two
        await until(lambda: len(crawler.stats.samples) >= 3, "three throughput samples")
        page = await get_text(client, status_url + "/")
    chart = page[page.index('<svg id="chart"'):page.index("</svg>")]
    assert ">pages/s</text>" in chart and ">time ago</text>" in chart
    assert ">now</text>" in chart  # the x axis ends at the last sample
    assert ">0</text>" in chart  # the y axis starts at 0 pages/s


def test_the_time_scale_spans_the_history_with_round_ticks():
    """Ten minutes of history at 40 pages/s: minutes across, round rates up."""
    history = [{"t": float(t), "pages": 40 * t, "bytes": 0} for t in range(0, 601)]
    status = {"history": history}
    chart = render_html_chart(status)
    for label in ("now", "2 min", "10 min"):
        assert f">{label}</text>" in chart
    for label in ("0", "20", "40"):
        assert f">{label}</text>" in chart  # y ticks 0, 10, ..., 40
    assert ">50</text>" not in chart


def render_html_chart(status: dict) -> str:
    """The chart's SVG as render_html draws it for `status`'s history."""
    page = render_html(quiet_status(status["history"]))
    return page[page.index('<svg id="chart"'):page.index("</svg>")]


def quiet_status(history: list[dict]) -> dict:
    """A status dict of an idle crawl, with this history (the page's other fields at rest)."""
    return {
        "version": "test", "uptime_s": 600.0, "pages": 0, "bytes": 0,
        "pages_per_s": {"last_10s": 0, "since_start": 0},
        "bytes_per_s": {"last_10s": 0, "since_start": 0}, "urls_seen": 0,
        "queued_per_priority": {}, "queued_in_sites": 0,
        "sites": dict.fromkeys(("known", "waiting_dns", "waiting_robots", "ready", "parked",
                                "dead"), 0),
        "connections_open": 0, "dns_queries": 0, "robots_fetches": 0, "robots_refusals": 0,
        "links_dropped": 0, "output_errors": 0, "resource_waits": 0,
        "outputs": {"paused": False, "paused_reason": None, "backlog": 0, "lost": 0},
        "outcomes": {"success": 0}, "errors": 0, "history": history, "idle": True,
        "stopping": False, "waiting_for": [], "recent_failures": [],
    }


async def test_a_paused_crawl_shows_a_banner_and_metrics_say_paused(make_web, monkeypatch):
    """saveDir under a regular file: the first page cannot be stored and fetching pauses; the
    page says so at the top and /metrics has larbinpy_paused 1, until the operator fixes it."""
    monkeypatch.setattr(outputs_module, "RETRY_INTERVAL", 0.05)
    tw = await make_web(small_web())
    blocker = tw.tmp / "blocker"
    blocker.write_text("a file where saveDir's parent should be")
    extra = f"output save\ncrawlLog {tw.tmp}/crawl.jsonl\n"  # not in the broken saveDir
    async with daemon(tw, extra, save_dir=blocker / "save") as (
            crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("one.test")]}):
            pass
        await until(lambda: crawler.outputs.paused_reason is not None, "fetching paused")
        page = await get_text(client, status_url + "/")
        assert '<div id="paused" role="alert"><strong>PAUSED</strong>' in page
        banner = page[page.index('<div id="paused"'):]
        assert "Not a directory" in banner[:banner.index("</div>")]
        assert page.index('<div id="paused"') < page.index('<table id="now">')  # on top
        assert (await get_metrics(client, status_url))["larbinpy_paused"][()] == 1
        blocker.unlink()  # the operator fixes the disk
        status = await wait_idle(client, status_url)
        assert status["outcomes"]["success"] == 3
        assert '<div id="paused"' not in await get_text(client, status_url + "/")
        assert (await get_metrics(client, status_url))["larbinpy_paused"][()] == 0


async def test_the_last_failures_are_listed_newest_first_and_zero_outcomes_are_not(make_web):
    """A 404 and a URL robots.txt forbids reach the failures table (URL, outcome, HTTP status,
    time); pages fetched well do not; outcome kinds at zero have no row."""
    tw = await make_web(failing_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("f.test")]}):
            pass
        status = await wait_idle(client, status_url)
        page = await get_text(client, status_url + "/")
    gone, private = tw.url("f.test", "/gone.html"), tw.url("f.test", "/private/p.html")
    failures = status["recent_failures"]
    assert {(f["url"], f["kind"], f["status"]) for f in failures} == {
        (gone, "err40X", 404), (private, "forbiddenRobots", None)}
    assert failures[0]["t"] >= failures[1]["t"]  # newest first
    table = page[page.index('<table id="failures">'):]
    table = table[:table.index("</table>")]
    assert f"<td>err40X</td><td>404</td><td class=\"url\">{gone}</td>" in table
    assert f"<td>forbiddenRobots</td><td></td><td class=\"url\">{private}</td>" in table
    assert tw.url("f.test", "/ok.html") not in table
    outcomes = page[page.index('<table id="outcomes">'):]
    outcomes = outcomes[:outcomes.index("</table>")]
    assert "<th>success</th><td>2</td>" in outcomes and "<th>err40X</th><td>1</td>" in outcomes
    assert "<th>noDNS</th>" not in outcomes and "<td>0</td>" not in outcomes
    # the useful part comes before the details: state, the chart's place, the failures
    assert page.index('<table id="now">') < page.index('<table id="failures">') < page.index(
        '<table id="crawl">') < page.index('<table id="outcomes">')


async def test_the_failures_kept_are_the_last_twenty(make_web):
    """Thirty 404s: the status keeps the last twenty, newest first."""
    front = html(*[f"/missing{i}.html" for i in range(30)])
    tw = await make_web([Site("m.test", "127.0.0.2", {"/": front})])
    async with daemon(tw, "pagesConnexions 1\n") as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("m.test")]}):
            pass
        status = await wait_idle(client, status_url)
    fetched = [u for u in tw.pages_fetched() if "missing" in u]
    assert len(fetched) == 30
    assert [f["url"] for f in status["recent_failures"]] == fetched[::-1][:20]


async def test_metrics_show_dropped_links_and_output_errors(make_web):
    """maxLinksPerPage 2 on a page of four links: two dropped, counted under their reason;
    the output series are there at zero on a healthy crawl."""
    tw = await make_web([Site("l.test", "127.0.0.2", {
        "/": html("/a.html", "/b.html", "/c.html", "/d.html"),
        **{f"/{c}.html": html() for c in "abcd"}})])
    async with daemon(tw, "maxLinksPerPage 2\n") as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("l.test")]}):
            pass
        status = await wait_idle(client, status_url)
        metrics = await get_metrics(client, status_url)
    assert status["links_dropped"] == 2
    dropped = {dict(k)["reason"]: v for k, v in metrics["larbinpy_links_dropped"].items()}
    assert dropped["maxLinksPerPage"] == 2
    assert set(dropped) == {"maxLinksPerPage", "trap", "outOfScope", "tooDeep", "urlDup"}
    assert metrics["larbinpy_output_errors"][()] == 0
    assert metrics["larbinpy_output_lost_pages"][()] == 0
    assert metrics["larbinpy_output_backlog"][()] == 0
    assert metrics["larbinpy_paused"][()] == 0


async def test_each_submission_is_logged_with_its_source_and_counts(make_web, caplog):
    caplog.set_level(logging.INFO, logger="larbinpy.ports")
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        body = {"urls": [tw.url("one.test"), "mailto:x@y"], "priority": 2, "depth": 1}
        async with client.post(input_url + "/urls", json=body) as r:
            assert r.status == 202
        async with client.post(input_url + "/urls", json={"urls": "not a list"}) as r:
            assert r.status == 400
        await wait_idle(client, status_url)
    lines = [r.getMessage() for r in caplog.records if r.name == "larbinpy.ports"]
    assert lines == [
        "submission from 127.0.0.1: accepted 1, rejected 1 (priority 2, depth 1)",
        'submission from 127.0.0.1 refused (400): urls must be a list of URLs (strings, or '
        '{"url": ..., "tag": N} objects)',
    ]


async def test_a_parked_site_is_not_also_counted_ready(make_web):
    """waitDuration 30: after its first page the site waits on its politeness timer. It is
    counted parked, not ready too, and the states add up to the sites known."""
    tw = await make_web(small_web())
    extra = "robots off\n"
    async with daemon(tw, extra, wait=30) as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("one.test")]}):
            pass
        await until(lambda: crawler.stats.pages >= 1 and crawler.sites.parked() == 1,
                    "the site parked after its first page")
        status = await get_json(client, status_url)
        metrics = await get_metrics(client, status_url)
        page = await get_text(client, status_url + "/")
    sites = status["sites"]
    assert (sites["known"], sites["ready"], sites["parked"]) == (1, 0, 1)
    assert sites["known"] == sum(v for k, v in sites.items() if k != "known")
    by_state = {dict(k)["state"]: v for k, v in metrics["larbinpy_sites"].items()}
    assert by_state["ready"] == 0 and by_state["parked"] == 1
    assert "<td>1 = 0 + 0 + 0 + 1 + 0</td>" in page
    assert "1 site parked on a politeness timer or their IP's turn" in status["waiting_for"]
