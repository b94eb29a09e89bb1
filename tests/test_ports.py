"""The daemon's HTTP ports over real sockets: submit URLs, watch status, bad input refused."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from conftest import free_port, html, until
from prometheus_client.parser import text_string_to_metric_families

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.daemon.ports import BadSubmission, Ports, parse_json_body, parse_text_body
from larbinpy.demo import Site


def small_web() -> list[Site]:
    """Two sites of three pages."""
    return [
        Site("one.test", "127.0.0.2", {"/": html("/1.html", "/2.html"),
                                       "/1.html": html(), "/2.html": html()}),
        Site("two.test", "127.0.0.3", {"/": html("/x.html"), "/x.html": html()}),
    ]


@contextlib.asynccontextmanager
async def daemon(tw, extra: str = "", same_port: bool = False, save_dir: Path | None = None,
                 wait: float = 0):
    """A crawler without exitAtEnd, with its ports (and `save_dir` for saveDir, `wait` for
    waitDuration); stopped cleanly at the end."""
    http = free_port()
    inp = http if same_port else free_port()
    text = tw.config_text(extra).replace("httpPort 0\ninputPort 0\n", "")
    text = text.replace("waitDuration 0\n", f"waitDuration {wait:g}\n")
    if save_dir is not None:
        text = text.replace(f"saveDir {tw.tmp}/save\n", f"saveDir {save_dir}\n")
    cfg = parse_config(text + f"\nhttpPort {http}\ninputPort {inp}\n")
    crawler = Crawler(cfg, scratch=True)
    task = asyncio.ensure_future(crawler.run())
    async with aiohttp.ClientSession() as client:

        async def listening() -> bool:
            if task.done():  # it will never listen: say why (its exception, or its exit code)
                raise AssertionError(f"the crawler ended before listening: {task.result()}")
            try:
                async with client.get(f"http://127.0.0.1:{http}/status.json") as r:
                    return r.status == 200
            except aiohttp.ClientConnectionError:
                return False

        try:
            await until(listening, f"the status page answering on port {http}")
            yield crawler, client, f"http://127.0.0.1:{http}", f"http://127.0.0.1:{inp}"
        finally:
            crawler.request_stop()
            assert await asyncio.wait_for(task, 30) == 0


async def wait_idle(client: aiohttp.ClientSession, status_url: str) -> dict:
    """Poll status.json until the crawler says it is idle; its last answer. Fails when it
    never does."""
    status: dict = {}

    async def idle() -> bool:
        nonlocal status
        async with client.get(status_url + "/status.json") as r:
            status = await r.json()
        return status["idle"]

    await until(idle, f"the crawler idle ({status_url}/status.json)")
    return status


async def test_daemon_crawls_idles_and_crawls_again_on_submission(make_web):
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("one.test")]}) as r:
            assert r.status == 202
            assert await r.json() == {"accepted": 1, "rejected": []}
        status = await wait_idle(client, status_url)
        assert status["idle"] and status["outcomes"]["success"] == 3
        assert {h.host for h in tw.web.hits} == {"one.test"}
        # idle daemon: a new submission crawls again, in the same process
        text = f"{tw.url('two.test')}\n{tw.url('one.test')}\n"
        async with client.post(input_url + "/urls", data=text,
                               headers={"Content-Type": "text/plain"}) as r:
            answer = await r.json()
        assert answer["accepted"] == 1
        assert answer["rejected"][0]["reason"].startswith("duplicate")
        status = await wait_idle(client, status_url)
        assert status["outcomes"]["success"] == 5
        assert len(tw.pages_fetched()) == 5


async def test_status_page_json_and_metrics_show_the_figures(make_web):
    tw = await make_web(small_web())
    async with daemon(tw, same_port=True) as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", json={"urls": [tw.url("one.test")]}):
            pass
        await wait_idle(client, status_url)
        async with client.get(status_url + "/") as r:
            page = await r.text()
        assert r.status == 200 and "pages fetched" in page and 'http-equiv="refresh"' in page
        assert "<th>success</th><td>3</td>" in page
        assert "<th>forbiddenRobots</th>" not in page  # kinds at zero are not listed
        async with client.get(status_url + "/metrics") as r:
            metrics = {m.name: m for m in text_string_to_metric_families(await r.text())}
        outcomes = {s.labels["kind"]: s.value for s in metrics["larbinpy_fetch_outcomes"].samples}
        assert outcomes["success"] == 3
        assert metrics["larbinpy_idle"].samples[0].value == 1
        assert sorted(metrics) == sorted(METRIC_FAMILIES)
        sites = {s.labels["state"]: s.value for s in metrics["larbinpy_sites"].samples}
        assert sites == {"known": 1, "waiting_dns": 0, "waiting_robots": 0, "ready": 1,
                         "parked": 0, "dead": 0}
        async with client.get(status_url + "/status.json") as r:
            status = await r.json()
        # status.json is a contract (docs/operations.md): its fields, in order
        assert list(status) == STATUS_FIELDS
        assert status["sites"] == sites
        assert status["queued_per_priority"] == {"0": 0} and status["queued_in_sites"] == 0
        assert (status["pages"], status["urls_seen"], status["connections_open"]) == (3, 3, 0)
        assert status["idle"] is True and status["stopping"] is False
        assert status["cluster"] is None and status["proxy"] is None
        assert status["outcomes"]["success"] == 3 and status["errors"] == 0
        assert status["recent_failures"] == []


STATUS_FIELDS = [
    "version", "uptime_s", "pages", "bytes", "pages_per_s", "bytes_per_s", "urls_seen",
    "queued_per_priority", "queued_in_sites", "sites", "connections_open", "dns_queries",
    "robots_fetches", "robots_refusals", "links_dropped", "requisites_cut", "output_errors",
    "resource_waits",
    "outputs", "outcomes", "errors", "history", "tls_verify", "proxy", "idle", "cluster",
    "stopping", "waiting_for", "seen_set", "recent_failures", "recrawl", "sites_view",
]
METRIC_FAMILIES = [
    "larbinpy_pages", "larbinpy_body_bytes", "larbinpy_urls_seen", "larbinpy_dns_queries",
    "larbinpy_robots_fetches", "larbinpy_fetch_outcomes", "larbinpy_queued_urls",
    "larbinpy_sites", "larbinpy_connections_open", "larbinpy_uptime_seconds",
    "larbinpy_tls_verify", "larbinpy_seen_bitmap_fill", "larbinpy_seen_expected_loss",
    "larbinpy_idle", "larbinpy_paused", "larbinpy_output_backlog", "larbinpy_output_errors",
    "larbinpy_output_lost_pages", "larbinpy_links_dropped", "larbinpy_requisites_cut",
]


@pytest.mark.parametrize(
    ("kwargs", "status", "words"),
    [
        ({"data": b"{not json", "headers": {"Content-Type": "application/json"}}, 400, "JSON"),
        ({"json": {"urls": "http://x/"}}, 400, "list of URLs (strings, or"),
        ({"json": {"urls": [], "priority": "high"}}, 400, "priority"),
        ({"json": {"urls": [], "depth": -1}}, 400, "depth must be at least 0"),
        ({"json": {"urls": [], "depth": 99999999999999999999}}, 400,
         "depth must be at most 1000000"),
        ({"data": "http://x/\n", "params": {"depth": "99999999999999999999"},
          "headers": {"Content-Type": "text/plain"}}, 400, "depth must be at most 1000000"),
        ({"data": "depth:-3\nhttp://x/\n", "headers": {"Content-Type": "text/plain"}},
         400, "depth must be at least 0"),
        ({"json": {"urls": [], "force": "maybe"}}, 400, "force"),
        ({"json": {"urls": [], "colour": 1}}, 400, "unknown"),
        ({"data": "priority:high\nhttp://x/\n", "headers": {"Content-Type": "text/plain"}},
         400, "priority"),
        ({"json": {"urls": [f"http://x/{i}" for i in range(11)]}}, 413, "inputMaxUrls"),
        ({"data": b"x" * 5000, "headers": {"Content-Type": "text/plain"}}, 413, "inputMaxBody"),
        ({"data": b"<xml/>", "headers": {"Content-Type": "application/xml"}}, 415, "type"),
        ({"data": "http://x/\n", "headers": {"Content-Type": "text/plain",
                                              "Origin": "http://evil.example"}}, 403, "Origin"),
    ],
)
async def test_bad_submissions_are_refused_with_a_reason_and_queue_nothing(
    make_web, kwargs, status, words
):
    tw = await make_web(small_web())
    extra = "inputMaxUrls 10\ninputMaxBody 4000\n"
    async with daemon(tw, extra) as (crawler, client, status_url, input_url):
        async with client.post(input_url + "/urls", **kwargs) as r:
            assert r.status == status
            assert words in (await r.json())["error"]
        assert crawler.stats.urls_seen == 0 and len(crawler.frontier) == 0


async def test_input_token_is_required_when_set(make_web):
    tw = await make_web(small_web())
    async with daemon(tw, 'inputToken "s3cret"\n') as (crawler, client, status_url, input_url):
        body = {"urls": [tw.url("one.test")]}
        async with client.post(input_url + "/urls", json=body) as r:
            assert r.status == 401
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
        for wrong in ("Bearer wrong", "Basic s3cret", "Bearers3cret", "s3cret"):
            async with client.post(input_url + "/urls", json=body,
                                   headers={"Authorization": wrong}) as r:
                assert r.status == 401, wrong
        assert crawler.stats.urls_seen == 0
        async with client.post(input_url + "/urls", json=body,
                               headers={"Authorization": "bearer s3cret"}) as r:
            assert r.status == 202  # the scheme's case does not matter (RFC 9110)
        async with client.post(input_url + "/urls", json={"urls": [tw.url("two.test")]},
                               headers={"Authorization": "BEARER s3cret"}) as r:
            assert r.status == 202


async def test_submit_command_reports_accepted_and_rejected(make_web):
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        port = input_url.rsplit(":", 1)[1]
        cmd = [sys.executable, "-m", "larbinpy", "submit", "--port", port, "--priority", "2",
               tw.url("one.test"), "mailto:x@y"]
        result = await asyncio.to_thread(
            subprocess.run, cmd, capture_output=True, text=True, timeout=30)
        assert result.returncode == 1  # one of the two was rejected
        assert "accepted 1, rejected 1" in result.stdout
        assert "rejected argument 2: mailto:x@y:" in result.stderr  # named by its place
        status = await wait_idle(client, status_url)
        assert status["outcomes"]["success"] == 3


def test_larbin_input_header_sets_priority_depth_and_force():
    sub = parse_text_body(b"priority:3 depth:1 test:1\nhttp://a/\n\nhttp://b/\n", {})
    assert (sub.urls, sub.priority, sub.depth, sub.force) == (["http://a/", "http://b/"], 3, 1,
                                                               True)


def test_json_body_defaults():
    sub = parse_json_body(b'{"urls": ["http://a/"]}')
    assert (sub.priority, sub.depth, sub.force) == (0, None, False)
    with pytest.raises(BadSubmission):
        parse_json_body(b'{"urls": ["http://a/"], "priority": true}')


async def test_submit_tag_reaches_the_links_output(make_web):
    tw = await make_web(small_web())
    async with daemon(tw, "output links\n") as (crawler, client, status_url, input_url):
        port = input_url.rsplit(":", 1)[1]
        cmd = [sys.executable, "-m", "larbinpy", "submit", "--port", port, "--tag", "7",
               tw.url("two.test")]
        result = await asyncio.to_thread(
            subprocess.run, cmd, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        await wait_idle(client, status_url)
    records = [json.loads(line) for line in
               (tw.tmp / "save" / "links.jsonl").read_text().splitlines()]
    tags = {r["url"]: r.get("tag") for r in records}
    assert tags[tw.url("two.test")] == 7  # the submitted URL carries its tag
    assert tags[tw.url("two.test", "/x.html")] in (None, 0)  # links do not inherit it


async def test_submit_reads_urls_from_stdin(make_web):
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        port = input_url.rsplit(":", 1)[1]
        urls = f"{tw.url('one.test')}\n{tw.url('two.test')}\n"
        result = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "larbinpy", "submit", "--port", port, "-"],
            input=urls, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        assert "accepted 2, rejected 0" in result.stdout
        status = await wait_idle(client, status_url)
        assert status["outcomes"]["success"] == 5


async def _read_to_eof(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (a guard, not a measure)."""
    return await asyncio.wait_for(reader.read(), 30)


async def _round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """One keep-alive request on an open connection; its status line."""
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    await reader.readexactly(length)
    return head.split(b"\r\n")[0]


@pytest.mark.parametrize("sent", [
    b"",  # silent
    b"POST /urls HTTP/1.1\r\nHost: x\r\nContent-Type: te",  # a head never finished
])
async def test_silent_and_half_sent_heads_are_closed(make_web, monkeypatch, sent):
    monkeypatch.setattr(Ports, "IDLE_TIMEOUT", 0.5)
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        reader, writer = await asyncio.open_connection("127.0.0.1", input_url.rsplit(":", 1)[1])
        writer.write(sent)
        assert await _read_to_eof(reader) == b""  # closed by the server, without an answer
        writer.close()


async def test_a_half_sent_body_gets_408_and_is_closed(make_web, monkeypatch):
    monkeypatch.setattr(Ports, "BODY_TIMEOUT", 0.5)
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        reader, writer = await asyncio.open_connection("127.0.0.1", input_url.rsplit(":", 1)[1])
        writer.write(b"POST /urls HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
                     b"Content-Length: 100\r\n\r\nhttp://a/\n")
        answer = await _read_to_eof(reader)
        assert answer.startswith(b"HTTP/1.1 408") and b"body not sent" in answer
        writer.close()
        assert crawler.stats.urls_seen == 0


async def test_connections_over_the_cap_are_refused_at_once(make_web, monkeypatch):
    monkeypatch.setattr(Ports, "MAX_CONNECTIONS", 3)
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        port = input_url.rsplit(":", 1)[1]
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for reader, writer in held:  # each one served, and kept open
            assert await _round_trip(reader, writer) == b"HTTP/1.1 404 Not Found"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert (await _read_to_eof(reader)).startswith(b"HTTP/1.1 503")
        writer.close()
        held[0][1].close()  # one of the three leaves: a newcomer is served again
        await until(lambda: _served_now(port), "a connection served below the cap")
        for _, w in held[1:]:
            w.close()


async def _served_now(port: str) -> bool:
    """Is a new connection served (not refused)?"""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return not (await _read_to_eof(reader)).startswith(b"HTTP/1.1 503")
    finally:
        writer.close()


async def test_deeply_nested_json_gets_400(make_web):
    tw = await make_web(small_web())
    async with daemon(tw, "inputMaxBody 1000000\n") as (crawler, client, status_url, input_url):
        body = '{"urls": ' + "[" * 100_000 + "]" * 100_000 + "}"
        async with client.post(input_url + "/urls", data=body,
                               headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400
            assert "nested too deeply" in (await r.json())["error"]


async def test_every_line_is_accepted_or_rejected_with_a_reason(make_web):
    """Ten lines that normalise to three URLs: three accepted, seven duplicates in the request;
    IP literals on a denied network refused in the answer, a name left to the DNS stage."""
    tw = await make_web(small_web())
    async with daemon(tw) as (crawler, client, status_url, input_url):
        one, two = tw.url("one.test"), tw.url("two.test")
        lines = [one, one.upper().replace("HTTP://", "http://"), one + "#frag", one,
                 two, two + "#x", two, one + "1.html", one + "1.html#a", one + "1.html"]
        async with client.post(input_url + "/urls", data="\n".join(lines),
                               headers={"Content-Type": "text/plain"}) as r:
            answer = await r.json()
        assert answer["accepted"] == 3
        assert len(answer["rejected"]) == 7
        assert {x["reason"] for x in answer["rejected"]} == {"duplicate in this request"}
        denied = ["http://10.1.2.3/", "http://[fd00::1]/", "http://192.168.0.1:8080/x"]
        async with client.post(input_url + "/urls", json={"urls": denied}) as r:
            answer = await r.json()
        assert answer["accepted"] == 0
        assert [x["url"] for x in answer["rejected"]] == denied
        assert all(x["reason"].startswith("deniedNetwork") for x in answer["rejected"])
