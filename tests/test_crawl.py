"""End-to-end crawls of a real loopback web, judged by what the servers saw."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pycares
from conftest import html

from larbinpy.demo import Page, Site, redirect


def hosts_web() -> list[Site]:
    """Three hosts on two IPs (b and c share one), each with its robots.txt."""
    a = Site("a.test", "127.0.0.2", {
        "/": html("/a1.html", "/a2.html", "/private/secret.html", "/a1.html#frag"),
        "/a1.html": html("/", "a2.html", "/deep/d1.html"),
        "/a2.html": html("./a1.html", "/file.zip", "/img.JPG"),
        "/deep/d1.html": html("/deep/d2.html"),
        "/deep/d2.html": html("/deep/d3.html"),
        "/deep/d3.html": html("/deep/d4.html"),
        "/deep/d4.html": html("/"),
        "/private/secret.html": html(),
        "/robots.txt": Page("User-agent: *\nDisallow: /private/\n", content_type="text/plain"),
    })
    b = Site("b.test", "127.0.0.3", {
        "/": html("/b1.html", "/b2.html"),
        "/b1.html": html("/b2.html"),
        "/b2.html": html("/b1.html", "/"),
        "/robots.txt": Page("User-agent: larbinpy\nDisallow: /b2.html\n",
                            content_type="text/plain"),
    })
    c = Site("c.test", "127.0.0.3", {
        "/": html("/c1.html"),
        "/c1.html": html("/"),
    })
    return [a, b, c]


async def link_hosts(tw) -> None:
    """Cross-host links need the web's port, known only once it runs."""
    a = tw.web.sites["a.test"]
    a.pages["/"] = html(
        "/a1.html", "/a2.html", "/private/secret.html", "/a1.html#frag",
        tw.url("b.test", "/"), tw.url("c.test", "/"), tw.url("nowhere.test", "/"),
    )


async def test_every_allowed_page_is_fetched_exactly_once(make_web):
    tw = await make_web(hosts_web())
    await link_hosts(tw)
    crawler = await tw.crawl(
        f"startUrl {tw.url('a.test')}\ndepthInSite 10\nforbiddenExtensions .zip .jpg end"
    )
    fetched = Counter(tw.pages_fetched())
    expected = {
        tw.url("a.test", p) for p in
        ("/", "/a1.html", "/a2.html", "/deep/d1.html", "/deep/d2.html", "/deep/d3.html",
         "/deep/d4.html")
    } | {tw.url("b.test", "/"), tw.url("b.test", "/b1.html")} | {
        tw.url("c.test", "/"), tw.url("c.test", "/c1.html")}
    assert set(fetched) == expected
    assert all(n == 1 for n in fetched.values()), fetched
    assert crawler.stats.outcomes["success"] == len(expected)
    assert crawler.stats.outcomes["noDNS"] == 1  # nowhere.test is not in DNS


async def test_robots_disallowed_paths_are_never_requested(make_web):
    tw = await make_web(hosts_web())
    await link_hosts(tw)
    crawler = await tw.crawl(f"startUrl {tw.url('a.test')}\ndepthInSite 10")
    paths = {h.path for h in tw.web.hits}
    assert "/private/secret.html" not in paths
    assert "/b2.html" not in paths  # disallowed for the larbinpy user agent
    assert crawler.stats.outcomes["forbiddenRobots"] == 2
    # robots.txt itself is fetched once per site, before any page of that site
    for host in ("a.test", "b.test", "c.test"):
        hits = tw.web.hits_for(host)
        assert hits[0].path == "/robots.txt"
        assert sum(h.path == "/robots.txt" for h in hits) == 1


async def test_forbidden_extensions_and_depth_limit_hold(make_web):
    tw = await make_web(hosts_web())
    crawler = await tw.crawl(
        f"depthInSite 2\nstartUrl {tw.url('a.test')}\nforbiddenExtensions .zip .jpg end"
    )
    paths = {h.path for h in tw.web.hits_for("a.test")}
    assert "/file.zip" not in paths and "/img.JPG" not in paths
    assert "/deep/d1.html" in paths  # depth 2 (start at 0)
    assert "/deep/d2.html" not in paths  # depth 3
    assert crawler.stats.outcomes["tooDeep"] >= 1


async def test_no_external_links_keeps_the_crawl_on_the_seed_site(make_web):
    tw = await make_web(hosts_web())
    await link_hosts(tw)
    await tw.crawl(f"startUrl {tw.url('a.test')}\nnoExternalLinks\ndepthInSite 10")
    assert {h.host for h in tw.web.hits} == {"a.test"}


async def test_limit_to_domain_and_exclude_patterns_are_obeyed(make_web):
    tw = await make_web(hosts_web())
    await link_hosts(tw)
    await tw.crawl(
        f"startUrl {tw.url('a.test')}\ndepthInSite 10\nlimitToDomain a.test c.test end\n"
        'excludePatterns "/deep/d[34]" end'
    )
    assert {h.host for h in tw.web.hits} == {"a.test", "c.test"}
    paths = {h.path for h in tw.web.hits_for("a.test")}
    assert "/deep/d2.html" in paths and "/deep/d3.html" not in paths


def slow_site(host: str, ip: str, n: int, delay: float) -> Site:
    """A site whose n pages each take `delay` seconds, all linked from /."""
    pages = {"/": html(*[f"/p{i}.html" for i in range(n)])}
    pages.update({f"/p{i}.html": Page("<html>x</html>", delay=delay) for i in range(n)})
    return Site(host, ip, pages)


async def test_never_more_than_connections_per_host_at_once(make_web):
    tw = await make_web([slow_site("s.test", "127.0.0.4", 12, 0.15),
                         slow_site("t.test", "127.0.0.5", 12, 0.15)])
    tw.web.sites["s.test"].pages["/"] = html(
        *[f"/p{i}.html" for i in range(12)], tw.url("t.test", "/"))
    await tw.crawl(f"startUrl {tw.url('s.test')}\nconnectionsPerHost 2\npagesConnexions 20")
    assert len(tw.pages_fetched()) == 26
    assert tw.web.max_concurrency("s.test") == 2
    assert tw.web.max_concurrency("t.test") == 2


def gaps(hits) -> list[float]:
    """Seconds between the end of each request and the start of the next one."""
    hits = sorted(hits, key=lambda h: h.start)
    return [b.start - a.end for a, b in zip(hits, hits[1:], strict=False)]


async def test_wait_duration_separates_requests_per_host_and_per_ip(make_web):
    # b.test and c.test share 127.0.0.3: the IP's clock must space them too
    tw = await make_web(hosts_web())
    tw.web.sites["b.test"].pages["/"] = html("/b1.html", tw.url("c.test", "/"))
    crawler = await tw.crawl(f"startUrl {tw.url('b.test')}\nwaitDuration 0.3")
    ip_hits = [h for h in tw.web.hits if h.ip == "127.0.0.3"]
    assert {h.host for h in ip_hits} == {"b.test", "c.test"}
    assert len(ip_hits) >= 5
    # the server stamps `end` a little after the crawler saw the response end
    assert min(gaps(ip_hits)) >= 0.3 - 0.02, gaps(ip_hits)
    assert crawler.stats.outcomes["success"] >= 4


async def test_exit_at_end_waits_for_a_slow_last_page(make_web):
    site = Site("slow.test", "127.0.0.2", {
        "/": html("/slow.html"),
        "/slow.html": Page("<html>done</html>", delay=2.5),
    })
    tw = await make_web([site])
    crawler = await tw.crawl(f"startUrl {tw.url('slow.test')}")
    assert "/slow.html" in {h.path for h in tw.web.hits}
    assert crawler.stats.outcomes["success"] == 2  # the slow page was read, not abandoned


async def test_redirect_targets_go_through_input_and_are_bounded(make_web):
    pages = {
        "/": html("/r1", "/loop1", "/target.html"),
        "/r1": redirect("/r2"), "/r2": redirect("/r3"), "/r3": redirect("/final.html"),
        "/final.html": html(),
        "/target.html": html(),
        "/loop1": redirect("/loop2"), "/loop2": redirect("/loop1"),
    }
    tw = await make_web([Site("r.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(f"startUrl {tw.url('r.test')}\nmaxRedirects 2")
    paths = Counter(h.path for h in tw.web.hits)
    assert paths["/r3"] == 1 and paths["/final.html"] == 0  # third hop refused
    assert paths["/loop1"] == 1 and paths["/loop2"] == 1  # the loop ends at the seen-set
    assert crawler.stats.outcomes["tooManyRedirects"] == 1


async def test_save_and_links_outputs_hold_every_page(make_web, tmp_path: Path):
    tw = await make_web(hosts_web())
    crawler = await tw.crawl(
        f"startUrl {tw.url('a.test')}\ndepthInSite 10\noutput save\noutput links"
    )
    index = (tmp_path / "save" / "d00000" / "index").read_text().splitlines()
    saved = {line.split(" ", 1)[1]: line.split(" ", 1)[0] for line in index}
    assert len(saved) == crawler.stats.outcomes["success"] == 7
    body = (tmp_path / "save" / "d00000" / saved[tw.url("a.test", "/a1.html")]).read_bytes()
    assert body == tw.web.sites["a.test"].pages["/a1.html"].body.encode()
    records = [json.loads(x) for x in (tmp_path / "save" / "links.jsonl").read_text().splitlines()]
    by_url = {r["url"]: r for r in records}
    assert set(by_url) == set(saved)
    assert tw.url("a.test", "/a2.html") in by_url[tw.url("a.test", "/a1.html")]["links"]
    assert by_url[tw.url("a.test")]["status"] == 200


async def test_one_dns_query_per_host(make_web):
    tw = await make_web(hosts_web())
    await link_hosts(tw)
    await tw.crawl(f"startUrl {tw.url('a.test')}\ndepthInSite 10")
    per_host = {name: n for (name, qtype), n in tw.dns.queries.items() if qtype == "A"}
    assert per_host == {"a.test": 1, "b.test": 1, "c.test": 1, "nowhere.test": 1}


def os_threads() -> set[tuple[str, str]]:
    """This process's threads as the kernel lists them: (id, name)."""
    tasks = Path("/proc/self/task")
    return {(t.name, (t / "comm").read_text().strip()) for t in tasks.iterdir()}


async def test_dns_is_resolved_on_the_event_loop_without_a_thread(make_web):
    """c-ares's sockets are watched by the crawl's own loop (larbin's single thread): the
    crawl starts no thread, not even the event thread aiodns 4 would give c-ares."""
    # pycares keeps one idle helper thread per process, started with its first channel, that
    # only destroys closed channels: started here, it is part of "before".
    pycares.Channel(sock_state_cb=lambda fd, readable, writable: None).close()
    tw = await make_web(hosts_web())
    await link_hosts(tw)
    before, during = os_threads(), set()

    async def watch() -> None:
        while True:
            during.update(os_threads())
            await asyncio.sleep(0.002)

    watcher = asyncio.ensure_future(watch())
    try:
        await tw.crawl(f"startUrl {tw.url('a.test')}\ndepthInSite 10")
    finally:
        watcher.cancel()
    assert sum(tw.dns.queries.values()) >= 4  # a, b, c and nowhere.test were asked for
    assert during - before == set()


async def test_private_addresses_are_refused_unless_allowed(make_web):
    tw = await make_web(hosts_web())
    text = tw.config_text(f"exitAtEnd\nstartUrl {tw.url('a.test')}").replace(
        "allowNetworks 127.0.0.0/8 end", "")
    from larbinpy.config import parse_config
    from larbinpy.crawler import Crawler

    crawler = Crawler(parse_config(text), scratch=True)
    await crawler.run()
    assert tw.web.hits == []
    assert crawler.stats.outcomes["deniedNetwork"] == 1


async def test_no_dup_skips_pages_whose_body_was_already_seen(make_web, tmp_path: Path):
    same = html("/", title="mirror")
    tw = await make_web([Site("n.test", "127.0.0.2", {
        "/": html("/copy1.html", "/copy2.html", "/other.html"),
        "/copy1.html": same, "/copy2.html": same, "/other.html": html("/", title="other"),
    })])
    crawler = await tw.crawl(f"startUrl {tw.url('n.test')}\nnoDup\noutput save\n")
    assert crawler.stats.outcomes["duplicate"] == 1  # one copy fetched, not output
    assert crawler.stats.outcomes["success"] == 3
    index = (tmp_path / "save" / "d00000" / "index").read_text()
    assert len(index.splitlines()) == 3


async def test_max_bandwidth_paces_reading_and_drops_nothing(make_web):
    big = "<html>" + "x" * 60_000 + "</html>"
    pages = {"/": html(*[f"/b{i}.html" for i in range(6)])}
    pages.update({f"/b{i}.html": Page(big) for i in range(6)})
    tw = await make_web([Site("bw.test", "127.0.0.2", pages)])
    start = time.monotonic()
    crawler = await tw.crawl(f"startUrl {tw.url('bw.test')}\nmaxBandwidth 120000\n"
                             "connectionsPerHost 3")
    elapsed = time.monotonic() - start
    assert crawler.stats.outcomes["success"] == 7  # every page read whole, none dropped
    # ~360 kB at 120 kB/s with a one-second burst: at least two seconds of reading
    assert elapsed >= 1.8, elapsed
    assert crawler.stats.bytes >= 6 * 60_000


async def test_urls_refused_by_robots_cost_no_politeness_wait(make_web):
    pages = {"/": html(*[f"/no/{i}.html" for i in range(20)], "/yes.html"),
             "/yes.html": html(),
             "/robots.txt": Page("User-agent: *\nDisallow: /no/\n", content_type="text/plain")}
    # a clock beside it: ten pages of a site on another IP, fetched one politeness wait apart
    clock = {"/": html(*[f"/t{i}.html" for i in range(10)]),
             **{f"/t{i}.html": html() for i in range(10)}}
    tw = await make_web([Site("polite.test", "127.0.0.2", pages),
                         Site("clock.test", "127.0.0.3", clock)])
    crawler = await tw.crawl(f"startUrl {tw.url('polite.test')}\nstartUrl {tw.url('clock.test')}\n"
                             "waitDuration 0.1\n")
    assert crawler.stats.outcomes["forbiddenRobots"] == 20
    polite = sorted(tw.web.hits_for("polite.test"), key=lambda h: h.start)
    assert [h.path for h in polite] == ["/robots.txt", "/", "/yes.html"]
    # between / and /yes.html the clock ticks about once (one wait), not about 20 times (a
    # wait per refused URL): measured against the crawl's own pace, not the wall clock
    ticks = [h for h in tw.web.hits_for("clock.test")
             if polite[1].start < h.start < polite[2].start]
    assert len(ticks) <= 3, len(ticks)
    assert len(tw.web.hits_for("clock.test")) == 12  # robots.txt, / and ten pages
    assert min(gaps(polite)) >= 0.1 - 0.02
