"""The crawl log: one JSON line for every job's final outcome, fetched or not; SIGHUP reopens it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import hostile as h
import pytest
from conftest import CRAWL_TIMEOUT, html, until
from yarl import URL

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import DnsServer, Page, Site
from larbinpy.demo.web import redirect
from larbinpy.frontier.crawllog import CrawlLog, DoneRecord
from larbinpy.frontier.endings import Endings
from larbinpy.records import Job
from larbinpy.stats import Outcome
from larbinpy.turn import TurnEnd

FIELDS = {"t", "url", "kind", "status", "bytes", "ms", "type", "depth", "via"}


def lines(path: Path) -> list[dict[str, object]]:
    """The crawl log's lines, each parsed (a torn or non-JSON line fails the test)."""
    text = path.read_text()
    assert text == "" or text.endswith("\n")
    # lines end at "\n" only: a URL may hold U+2028 (not escaped by JSON), a line for splitlines
    return [json.loads(line) for line in text.split("\n")[:-1]]


def mixed_web() -> list[Site]:
    """A page of every fate: fetched, 404, redirected, disallowed, on a host DNS does not know."""
    return [Site("a.test", "127.0.0.2", {
        "/": html("/ok.html", "/missing.html", "/moved.html", "/private/x.html",
                  "http://nowhere.test/", "/ok.html"),
        "/ok.html": html("/"),  # only a duplicate link: counted, not logged
        "/moved.html": redirect("/target.html"),
        "/target.html": Page("plain text", content_type="text/plain"),
        "/missing.html": Page("gone", status=404),
        "/private/x.html": html(),
        "/robots.txt": Page("User-agent: *\nDisallow: /private/\n", content_type="text/plain"),
    })]


async def test_every_job_gets_one_line_saying_what_happened_to_it(make_web):
    tw = await make_web(mixed_web())
    crawler = await tw.crawl(f"startUrl {tw.url('a.test')}\n")
    got = lines(tw.tmp / "save" / "crawl.jsonl")  # a relative crawlLog lives in saveDir
    assert all(set(line) == FIELDS for line in got)
    by_url = {line["url"]: line for line in got}
    assert len(by_url) == len(got)  # one line a job
    root, port = tw.url("a.test"), tw.url("a.test").split(":")[2].rstrip("/")
    kinds = {u.replace(f":{port}", ""): (line["kind"], line["status"]) for u, line in
             by_url.items()}
    assert kinds == {
        "http://a.test/": ("success", 200),
        "http://a.test/ok.html": ("success", 200),
        "http://a.test/missing.html": ("err40X", 404),
        "http://a.test/moved.html": ("err30X", 301),
        "http://a.test/target.html": ("badType", 200),
        "http://a.test/private/x.html": ("forbiddenRobots", None),
        "http://nowhere.test/": ("noDNS", None),
    }
    assert by_url[root]["via"] is None and by_url[root]["depth"] == crawler.cfg.depth_in_site
    assert by_url[tw.url("a.test", "/ok.html")]["via"] == root
    assert by_url[tw.url("a.test", "/target.html")]["via"] == tw.url("a.test", "/moved.html")
    ok = by_url[root]
    assert ok["type"] == "text/html" and ok["bytes"] > 0 and ok["ms"] >= 0
    # every outcome of a job is in the log; duplicate links are only counted
    counted = {k.value: v for k, v in crawler.stats.outcomes.items() if v}
    assert Counter(line["kind"] for line in got) == {k: v for k, v in counted.items()
                                                    if k != "urlDup"}
    assert counted["urlDup"] > 0


async def test_crawl_log_none_writes_no_log(make_web):
    tw = await make_web(mixed_web())
    await tw.crawl(f"crawlLog none\nstartUrl {tw.url('a.test')}\n")
    assert not (tw.tmp / "save" / "crawl.jsonl").exists()


async def test_an_absolute_crawl_log_path_is_used_as_it_is(make_web):
    tw = await make_web(mixed_web())
    path = tw.tmp / "logs" / "mine.jsonl"
    await tw.crawl(f"crawlLog {path}\nstartUrl {tw.url('a.test')}\n")
    assert len(lines(path)) == 7


# Small limits, each trap run out of one: a stalled listener (its backlog full, so the connect
# never completes), a head then silence, a body too slow for minRate, and one fast enough for
# minRate that never ends.
TIMEOUTS = "timeoutConnect 1\ntimeoutRead 2\ntimeoutTotal 6\nminRate 2000\nrobots off\n"
TIMEOUT_NOTES = {
    "unaccepted.trap": "connect took over 1 s (timeoutConnect)",
    "stall.trap": "no byte for 2 s (timeoutRead)",
    "slow.trap": "slower than 2000 bytes/s (minRate)",
    "endless.trap": "over 6 s in all (timeoutTotal)",
}


@contextlib.asynccontextmanager
async def timeout_traps() -> AsyncIterator[tuple[h.HostileServer, DnsServer]]:
    """A trap for each timeout on the hostile server (unaccepted.trap: the stalled listener),
    and a DNS server naming them; stopped after."""
    server = h.HostileServer([
        h.HostileSite("stall.trap", "127.0.3.1", h.stall(after_head=True)),
        h.HostileSite("slow.trap", "127.0.3.2", h.drip(0.3)),  # 30 bytes/s
        h.HostileSite("endless.trap", "127.0.3.3", h.drip(0.1, b"x" * 4096)),  # 40 KB/s
    ], stalled_ips=["127.0.3.200"])
    async with server.with_dns({"unaccepted.trap": ["127.0.3.200"]}) as dns:
        yield server, dns


async def crawl_notes(tmp: Path, dns: DnsServer, urls: list[str], extra: str = "",
                      ) -> dict[str, object]:
    """Crawl `urls` with these timeouts (and `extra`): host -> (kind, note) of its line."""
    cfg = parse_config(f"stateDir {tmp}/state\nsaveDir {tmp}/save\ndnsServers {dns.address}\n"
                       "allowNetworks 127.0.0.0/8 end\nhttpPort 0\ninputPort 0\n"
                       f"waitDuration 0\noutput none\nexitAtEnd\n{TIMEOUTS}{extra}"
                       + "".join(f"startUrl {url}\n" for url in urls))
    await asyncio.wait_for(Crawler(cfg, scratch=True).run(), CRAWL_TIMEOUT)
    return {str(URL(line["url"]).host): (line["kind"], line.get("note"))
            for line in lines(tmp / "save" / "crawl.jsonl")}


@pytest.mark.parametrize("client", ["http1", "aiohttp"])
async def test_a_timeout_says_which_limit_ran_out(tmp_path: Path, client: str) -> None:
    async with timeout_traps() as (server, dns):
        traps = [server.url(host) for host in ("stall.trap", "slow.trap", "endless.trap")]
        unaccepted = server.url("unaccepted.trap")
        if client == "http1":  # plain http:// without a proxy: our own client
            got = await crawl_notes(tmp_path, dns, [*traps, unaccepted])
        else:  # through a proxy (the traps' server), and https:// without one: aiohttp
            got = await crawl_notes(tmp_path / "proxied", dns, traps,
                                    f"proxy 127.0.3.1 {server.port}\n")
            got |= await crawl_notes(tmp_path / "tls", dns,
                                     [unaccepted.replace("http:", "https:")])
    assert got == {host: ("timeout", note) for host, note in TIMEOUT_NOTES.items()}


def chain_web(pages: int) -> list[Site]:
    """One site of slowish pages, each linking to the next."""
    site = {"/": html("/p0.html")}
    for i in range(pages):
        site[f"/p{i}.html"] = Page(html(f"/p{i + 1}.html").body if i + 1 < pages else "end",
                                   delay=0.05)
    return [Site("c.test", "127.0.0.2", site)]


async def test_sighup_reopens_the_crawl_log_after_logrotate_moved_it(make_web):
    tw = await make_web(chain_web(40))
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(
        f"exitAtEnd\ndepthInSite 100\npagesConnexions 1\nstartUrl {tw.url('c.test')}"))
    log = tw.tmp / "save" / "crawl.jsonl"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), "-q", cwd=tw.tmp,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    await until(lambda: log.exists() and len(lines(log)) >= 5, "5 lines in the crawl log")
    rotated = log.rename(log.with_suffix(".1"))  # what logrotate does
    proc.send_signal(signal.SIGHUP)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    old, new = lines(rotated), lines(log)
    assert old and new
    urls = [line["url"] for line in old + new]
    assert sorted(urls) == sorted(set(tw.pages_fetched())) and len(urls) == 41


def logs(path: Path | None, done: Path, resume: bool = False
         ) -> tuple[Endings, CrawlLog | None, DoneRecord]:
    """The crawl log and the done-record as the crawler wires them, outside a loop (each
    outcome written at once)."""
    turn = TurnEnd()
    crawl_log = CrawlLog(path, turn) if path is not None else None
    record = DoneRecord(done, resume, turn)
    endings = Endings(record.take_skip)
    if crawl_log is not None:
        endings.subscribe(crawl_log.ended)
    endings.subscribe(record.ended)
    return endings, crawl_log, record


def test_each_line_is_json_that_reads_back_as_the_outcome_recorded(tmp_path: Path) -> None:
    """URLs and content types from the web may hold quotes, backslashes, control characters
    and non-ASCII (never a tab or newline in a normalized URL): every line still parses, to
    exactly the fields recorded."""
    nasty = ['http://h.test/a"b', "http://h.test/back\\slash", "http://h.test/\x0b\x0c\x1b\x1c\x85",
             "http://h.test/\x00\x01\x1f\x7f", "http://h.test/été/日本/\u2028\u2029",
             "http://h.test/😀?q='x'&y=</script>", "http://h.test/plain"]
    endings, log, record = logs(tmp_path / "crawl.jsonl", tmp_path / "done")
    assert log is not None
    want, start = [], time.time()
    for i, url in enumerate(nasty):
        via = None if i % 3 == 0 else nasty[-1 - i]
        status = None if i % 2 else 200 + i
        ctype = [None, "", "text/html", 'text/"odd"\\'][i % 4]
        kind = [Outcome.success, Outcome.noDNS, Outcome.err40X][i % 3]
        endings.end(Job(url, i, via=via), kind, status, 1000 * i, 7 * i, ctype)
        want.append({"url": url, "kind": kind.value, "status": status, "bytes": 1000 * i,
                     "ms": 7 * i, "type": ctype or None, "depth": i, "via": via})
    log.close()
    record.close()
    end = time.time()
    got = lines(tmp_path / "crawl.jsonl")
    times = [line.pop("t") for line in got]
    assert all(start - 0.001 <= t <= end + 0.001 and t == round(t, 3) for t in times), times
    assert got == want
    assert (tmp_path / "done").read_bytes().decode() == "".join(u + "\n" for u in nasty)


def test_a_failed_write_leaves_whole_lines_and_is_counted(tmp_path: Path) -> None:
    """A full disk (/dev/full) loses lines, counted and logged, never the crawl."""
    endings, log, record = logs(Path("/dev/full"), tmp_path / "done")
    assert log is not None
    endings.end(Job("http://h.test/", 3), Outcome.success, 200, 10, 5, "text/html")
    assert log.write_errors == 1
    assert (tmp_path / "done").read_text() == "http://h.test/\n"  # the done-record still went
    log.close()
    record.close()


def test_the_done_record_is_kept_across_a_checkpoint_until_met(tmp_path: Path) -> None:
    """After a restart, URLs finished before the crash stay recorded until their replayed
    job is skipped; a checkpoint then drops them (it covers them)."""
    done = tmp_path / "done"
    endings, _, first = logs(None, done)
    for url in ("http://h.test/a", "http://h.test/b"):
        endings.end(Job(url, 1), Outcome.success)
    first.close()
    endings, _, second = logs(None, done, resume=True)
    assert second.skip == {"http://h.test/a", "http://h.test/b"}
    assert second.take_skip("http://h.test/a")
    assert not second.take_skip("http://h.test/a")  # once: a later job is a new one
    second.release(second.position())
    assert done.read_text() == "http://h.test/b\n"  # still to meet: kept for a second crash
    endings.end(Job("http://h.test/b", 1), Outcome.success)  # its replay: no second line
    endings.end(Job("http://h.test/c", 1), Outcome.err40X)
    second.close()
    assert done.read_text() == "http://h.test/b\nhttp://h.test/c\n"


def test_what_finishes_after_a_checkpoints_snapshot_stays_in_the_done_record(tmp_path: Path
                                                                             ) -> None:
    """The periodic checkpoint is written after its outputs are synced, later than its
    snapshot: the jobs that finished in between are not in it, so their URLs stay recorded."""
    done = tmp_path / "done"
    endings, _, record = logs(None, done)
    endings.end(Job("http://h.test/before", 1), Outcome.success)
    mark = record.position()
    endings.end(Job("http://h.test/after", 1), Outcome.success)
    record.flush()
    record.release(mark)
    assert done.read_text() == "http://h.test/after\n"
    record.close()
