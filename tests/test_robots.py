"""robots.txt as RFC 9309 and Google read it, judged by what a real crawl requests.

Status rules (5xx/unreachable: disallow all and retry later; 4xx: allow all), the 500 KiB
limit, redirects (5 hops, to another host too), syntax oddities (BOM, CRLF, case, comments),
longest match, wildcards, Crawl-delay and the cache lifetime (`robotsTtl`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import hostile as h
import pytest
from conftest import TestWeb as _Web
from conftest import html, until

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.daemon.status import snapshot
from larbinpy.daemon.statuspage import render_html
from larbinpy.demo import DnsServer, LocalWeb, Page, Site, redirect
from larbinpy.frontier import robotsdb
from larbinpy.frontier.robotsdb import FileVerdicts, Verdict
from larbinpy.stages import robots as robots_stage


def txt(body: str | bytes) -> Page:
    """A robots.txt page."""
    return Page(body, content_type="text/plain")


def site_with(robots: Page | None, host: str = "r.test", ip: str = "127.0.0.2") -> Site:
    """A site whose / links to an allowed and a private page."""
    pages = {"/": html("/ok.html", "/private/p.html"), "/ok.html": html(),
             "/private/p.html": html()}
    if robots is not None:
        pages["/robots.txt"] = robots
    return Site(host, ip, pages)


class Flaky:
    """A robots.txt trap that answers 503 `failures` times, then the rules."""

    def __init__(self, failures: int, rules: str = "User-agent: *\nDisallow: /private/\n"):
        self.failures, self.rules, self.calls = failures, rules, 0

    async def __call__(self, conn: h.Conn, path: str) -> None:
        """Serve one robots.txt request."""
        self.calls += 1
        if self.calls <= self.failures:
            await h.raw(h.head("503 Busy", Content_Length=0))(conn, path)
        else:
            await h.page(self.rules, "text/plain")(conn, path)


@pytest.fixture
async def flaky_web(tmp_path: Path) -> AsyncIterator[tuple[_Web, h.HostileServer, Flaky]]:
    """A hostile-server site whose robots.txt fails twice before answering."""
    flaky = Flaky(2)
    pages = {"/": h.page('<a href="/ok.html">o</a><a href="/private/p.html">p</a>'),
             "/ok.html": h.page("<html>ok</html>"), "/private/p.html": h.page("<html>p</html>")}
    server = h.HostileServer([h.HostileSite("flaky.test", "127.0.3.50", h.page(""),
                                            robots=flaky, paths=pages)])
    await server.start()
    dns = DnsServer(server.dns_records)
    await dns.start()
    web = LocalWeb([])  # unused: the TestWeb helper only needs its DNS and tmp
    tw = _Web(web, dns, tmp_path)
    try:
        yield tw, server, flaky
    finally:
        await server.stop()
        await dns.stop()


async def test_5xx_disallows_everything_until_a_retry_succeeds(flaky_web, monkeypatch):
    tw, srv, flaky = flaky_web
    monkeypatch.setattr(robots_stage, "RETRY_DELAY", 0.3)
    crawler = await tw.crawl(f"startUrl {srv.url('flaky.test', '/')}\nmaxRetries 3")
    paths = [x.path for x in srv.hits]
    assert paths[:3] == ["/robots.txt"] * 3  # no page before the rules were known
    assert "/ok.html" in paths and "/private/p.html" not in paths
    assert flaky.calls == 3
    assert crawler.stats.outcomes["forbiddenRobots"] == 1


async def test_5xx_for_good_drops_the_site_as_forbidden(flaky_web, monkeypatch):
    tw, srv, flaky = flaky_web
    flaky.failures = 100
    monkeypatch.setattr(robots_stage, "RETRY_DELAY", 0.2)
    crawler = await tw.crawl(f"startUrl {srv.url('flaky.test', '/')}\nmaxRetries 1")
    assert {x.path for x in srv.hits} == {"/robots.txt"}
    assert flaky.calls == 2  # the first try and one retry, then the site's URLs are dropped
    assert crawler.stats.outcomes["forbiddenRobots"] == 1


async def test_4xx_allows_everything(make_web):
    tw = await make_web([site_with(Page(b"", status=403))])
    crawler = await tw.crawl(f"startUrl {tw.url('r.test')}")
    assert "/private/p.html" in {x.path for x in tw.web.hits}
    assert crawler.stats.outcomes["success"] == 3


async def test_only_the_first_500_kib_are_parsed(make_web):
    padding = "# " + "x" * 1000 + "\n"
    late = "User-agent: *\n" + padding * 600 + "Disallow: /private/\n"  # after ~600 KB: ignored
    tw = await make_web([site_with(txt(late))])
    await tw.crawl(f"startUrl {tw.url('r.test')}")
    assert "/private/p.html" in {x.path for x in tw.web.hits}


async def test_redirects_are_followed_five_hops_to_another_host(make_web):
    rules = txt("User-agent: *\nDisallow: /private/\n")
    other = Site("rules.test", "127.0.0.3", {"/real.txt": rules})
    near = site_with(None, "near.test", "127.0.0.2")
    far = site_with(None, "far.test", "127.0.0.4")
    tw = await make_web([near, far, other])
    real = tw.url("rules.test", "/real.txt")
    near.pages["/robots.txt"] = redirect("/r1")
    near.pages.update({f"/r{i}": redirect(f"/r{i + 1}") for i in range(1, 4)})
    near.pages["/r4"] = redirect(real)  # hop 5 lands on another host
    far.pages["/robots.txt"] = redirect("/f1")
    far.pages.update({f"/f{i}": redirect(f"/f{i + 1}") for i in range(1, 5)})
    far.pages["/f5"] = redirect(real)  # hop 6: too many, robots.txt is "unavailable"
    near.pages["/"] = html("/ok.html", "/private/p.html", tw.url("far.test", "/"))
    await tw.crawl(f"startUrl {tw.url('near.test')}")
    assert "/private/p.html" not in {x.path for x in tw.web.hits_for("near.test")}
    assert "/private/p.html" in {x.path for x in tw.web.hits_for("far.test")}
    assert len(tw.web.hits_for("rules.test")) == 1


async def test_syntax_oddities_longest_match_wildcards_and_crawl_delay(make_web):
    robots = (b"\xef\xbb\xbfuSeR-AgEnT: LARBINPY # our group\r\n"
              b"disallow: /private/\r\nALLOW: /private/open\r\n"
              b"Disallow: /*.pdf$\r\nDisallow: /q?*session\r\nCrawl-delay: 0.4\r\n"
              b"\r\nUser-agent: *\r\nDisallow: /\r\n")
    pages = {"/": html("/ok.html", "/private/p.html", "/private/open.html", "/a.pdf",
                       "/a.pdf.html", "/q?x=1&session=2", "/q?x=1"),
             "/robots.txt": txt(robots)}
    for p in ("/ok.html", "/private/p.html", "/private/open.html", "/a.pdf", "/a.pdf.html",
              "/q?x=1&session=2", "/q?x=1"):
        pages[p] = html()
    tw = await make_web([Site("odd.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(f"startUrl {tw.url('odd.test')}\nanyType")
    hits = sorted(tw.web.hits, key=lambda x: x.start)
    paths = {x.path for x in hits}
    assert paths == {"/robots.txt", "/", "/ok.html", "/private/open.html", "/a.pdf.html", "/q?x=1"}
    assert crawler.stats.outcomes["forbiddenRobots"] == 3
    gaps = [b.start - a.end for a, b in zip(hits[1:], hits[2:], strict=False)]
    assert min(gaps) >= 0.4 - 0.02  # Crawl-delay beats waitDuration 0


async def test_robots_txt_is_cached_for_robots_ttl(make_web):
    pages = {"/": html(*[f"/p{i}.html" for i in range(6)]), "/robots.txt": txt("")}
    pages.update({f"/p{i}.html": Page("<html>x</html>", delay=0.25) for i in range(6)})
    tw = await make_web([Site("ttl.test", "127.0.0.2", pages)])
    await tw.crawl(f"startUrl {tw.url('ttl.test')}\nrobotsTtl 0.5")
    fetched = sorted(x.start for x in tw.web.hits if x.path == "/robots.txt")
    # fetched again once expired (the crawl lasts over 1.5 s), and not before
    assert len(fetched) >= 2
    assert min(b - a for a, b in zip(fetched, fetched[1:], strict=False)) >= 0.5 - 0.02
    tw.web.reset()
    await tw.crawl(f"startUrl {tw.url('ttl.test')}")  # the default: a day
    assert sum(x.path == "/robots.txt" for x in tw.web.hits) == 1


def failing_robots_web() -> list[Site]:
    """good.test (slow pages, linking to bad.test once `link_bad` ran) and bad.test, whose
    robots.txt answers 500."""
    good = {"/": html(*[f"/p{i}.html" for i in range(6)])}
    bad = {"/": html("/y.html"), "/robots.txt": Page(b"", status=500)}
    return [Site("good.test", "127.0.0.2", good), Site("bad.test", "127.0.0.3", bad)]


def link_bad(tw) -> None:
    """good.test's six slow pages each link to a page of bad.test (its port is known only
    now): bad.test's URLs keep arriving after its robots.txt failed."""
    pages = tw.web.sites["good.test"].pages
    for i in range(6):
        pages[f"/p{i}.html"] = Page(html(tw.url("bad.test", f"/x{i}.html")).body, delay=0.2)


async def test_exhausted_robots_retries_refuse_later_urls_at_once_and_the_crawl_ends(make_web):
    tw = await make_web(failing_robots_web())
    link_bad(tw)
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(
        "exitAtEnd\nmaxRetries 0\n"
        f"startUrl {tw.url('good.test')}\nstartUrl {tw.url('bad.test')}"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), cwd=tw.tmp,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    bad = [h.path for h in tw.web.hits_for("bad.test")]
    assert bad == ["/robots.txt"]  # asked once (maxRetries 0), no page of it fetched
    assert len([h for h in tw.web.hits_for("good.test") if h.path.startswith("/p")]) == 6
    # its root and the six links found after the verdict, each counted without a request
    assert "forbiddenRobots 7" in err.decode().strip().splitlines()[-1]
    # and the crawl log says why, for each of them
    lines = [json.loads(line) for line in (tw.tmp / "save" / "crawl.jsonl").open()]
    bad_lines = [x for x in lines if "bad.test" in x["url"]]
    assert len(bad_lines) == 7
    assert {(x["kind"], x.get("note")) for x in bad_lines} == {
        ("forbiddenRobots", "robots.txt answered 500 (tries: 1)")}
    assert not any("note" in x for x in lines if "good.test" in x["url"])


async def test_status_shows_the_robots_txt_retry_the_crawl_waits_for(make_web, monkeypatch):
    monkeypatch.setattr(robots_stage, "RETRY_DELAY", 1.0)
    tw = await make_web(failing_robots_web())
    link_bad(tw)
    cfg = parse_config(tw.config_text(
        "exitAtEnd\nmaxRetries 1\n"
        f"startUrl {tw.url('good.test')}\nstartUrl {tw.url('bad.test')}"))
    crawler = Crawler(cfg, scratch=True)
    run = asyncio.ensure_future(crawler.run())
    await until(lambda: tw.web.hits_for("bad.test"), "bad.test's robots.txt asked")
    await until(lambda: any("robots.txt retry of http://bad.test" in w
                            for w in snapshot(crawler)["waiting_for"]), "the retry shown")
    assert "robots.txt retry of http://bad.test" in render_html(snapshot(crawler))
    await asyncio.wait_for(run, 60)
    assert [h.path for h in tw.web.hits_for("bad.test")] == ["/robots.txt"] * 2
    assert crawler.stats.outcomes["forbiddenRobots"] == 7
    assert snapshot(crawler)["waiting_for"] == []  # done: nothing pending


def test_sites_serving_the_same_robots_txt_share_one_parsed_copy() -> None:
    shared = robots_stage.SharedRules()
    default = b"User-agent: *\nDisallow: /wp-admin/\n"
    first, second = shared.get(default), shared.get(bytes(default))
    assert first is second  # one parsed copy for every site serving these bytes
    other = shared.get(b"User-agent: *\nDisallow: /private/\n")
    assert other is not first
    assert not first.can_fetch("http://a.test/wp-admin/x", "larbinpy")
    assert other.can_fetch("http://b.test/wp-admin/x", "larbinpy")
    for i in range(robots_stage.SharedRules.MAX_ENTRIES + 10):  # bounded however many files
        shared.get(b"User-agent: *\nDisallow: /%d/\n" % i)
    assert len(shared.parsed) <= robots_stage.SharedRules.MAX_ENTRIES
    assert shared.get(default) is not first  # the least recently used went first
    big = b"User-agent: *\n" + b"Disallow: /x\n" * (robots_stage.SharedRules.MAX_BYTES // 13)
    assert shared.get(big) is shared.get(big) and list(shared.parsed) == [big]  # alone
    assert shared.bytes == len(big)


def test_the_verdict_store_keeps_bytes_drops_expired_verdicts_and_reads_an_old_file(
        tmp_path: Path) -> None:
    path = tmp_path / "robots.sqlite"
    now = time.time()
    old = tmp_path / "robots.jsonl"  # an earlier version's file, cut by a kill
    old.write_text(Verdict(now + 3600, b"User-agent: *\n").encode("http://old.test")
                   + '{"site": "http://d.test", "expi')
    store = FileVerdicts(path)
    assert not old.exists() and store.get("http://old.test") == Verdict(now + 3600,
                                                                       b"User-agent: *\n")
    body = b"User-agent: *\nDisallow: /\xff\xfe/\n"  # not UTF-8: kept byte for byte
    store.put("http://a.test", Verdict(now + 3600, body))
    store.put("http://gone.test", Verdict(now - 1, None))  # already expired
    for n in range(1, 50):  # one site's failures, superseding each other
        store.put("http://b.test", Verdict(now + 3600, failures=n))
    store.put("http://c.test", Verdict(now + 3600, disallow=True))
    assert store.get("http://b.test").failures == 49 and store.get("http://gone.test") is None
    store.sync()
    assert len(store) == 4  # one row a site, the expired one deleted
    store.close()
    again = FileVerdicts(path)
    assert again.get("http://a.test") == Verdict(now + 3600, body)
    assert again.get("http://b.test").failures == 49
    assert again.get("http://c.test").disallow
    assert again.get("http://gone.test") is None and again.get("http://d.test") is None
    again.close()


def test_the_verdict_store_holds_many_sites_on_disk_with_a_bounded_cache(tmp_path: Path) -> None:
    store = FileVerdicts(tmp_path / "robots.sqlite")
    now = time.time()
    sites = 3 * robotsdb.CACHE_VERDICTS

    async def learn() -> None:  # on a loop, as in a crawl: one transaction a loop turn
        for i in range(sites):
            store.put(f"http://h{i}.test", Verdict(now + 3600, failures=i % 3))
            if i % 100 == 99:
                await asyncio.sleep(0)

    asyncio.run(learn())
    for i in range(sites):  # and as many unknown sites asked about
        assert store.get(f"http://h{i}.test").failures == i % 3
        assert store.get(f"http://unknown{i}.test") is None
    assert len(store._cache) <= robotsdb.CACHE_VERDICTS and len(store) == sites
    store.close()


async def test_a_robots_txt_two_sites_reach_by_redirect_is_fetched_once(make_web):
    rules = txt("User-agent: *\nDisallow: /private/\n")
    www = site_with(rules, "www.apex.test", "127.0.0.3")
    apex = site_with(None, "apex.test", "127.0.0.2")
    tw = await make_web([apex, www])
    apex.pages["/robots.txt"] = redirect(tw.url("www.apex.test", "/robots.txt"))
    # both sites start at once: the second one's robots.txt is on the wire when it asks
    await tw.crawl(f"startUrl {tw.url('apex.test')}\nstartUrl {tw.url('www.apex.test')}")
    assert [x.path for x in tw.web.hits_for("www.apex.test")].count("/robots.txt") == 1
    for host in ("apex.test", "www.apex.test"):  # both obey the rules it gave
        paths = {x.path for x in tw.web.hits_for(host)}
        assert "/ok.html" in paths and "/private/p.html" not in paths
