"""Scale-out on Redis, in one process: several nodes (Crawlers) on one event loop, one real
redis-server, the loopback test web. Judged by what the web server saw (each node sends its
own `From` header, so every request names the node that made it)."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

import pytest
import redis.asyncio as aioredis
import redisserver
from conftest import WAIT_TIMEOUT, html, until

from larbinpy.cluster import membership
from larbinpy.cluster.membership import owner_of
from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.daemon.status import snapshot
from larbinpy.daemon.statuspage import metrics_text, render_html
from larbinpy.demo import Page, Site

TIMEOUT = 30.0
redis_url = redisserver.redis_url  # the fixture: a real redis-server per test


@pytest.fixture(autouse=True)
def fast_heartbeats(monkeypatch):
    """In-process nodes beat fast, so joins show within a fraction of a second; no test here
    kills a node, so expiry is long: a loaded machine's stalls never pass for a death."""
    monkeypatch.setattr(membership, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(membership, "EXPIRY_S", 30.0)


def grid_web(hosts: int = 9, pages: int = 6, delay: float = 0.0) -> list[Site]:
    """`hosts` hosts on three IPs, each a ring of pages; robots.txt forbids /p0.html on h0."""
    sites = []
    for h in range(hosts):
        site = {"/": html(*[f"/p{i}.html" for i in range(pages)])}
        for i in range(pages):
            site[f"/p{i}.html"] = Page(html(f"/p{(i + 1) % pages}.html", "/").body, delay=delay)
        if h == 0:
            site["/robots.txt"] = Page("User-agent: *\nDisallow: /p0.html\n",
                                       content_type="text/plain")
        sites.append(Site(f"h{h}.test", f"127.0.0.{2 + h % 3}", site))
    return sites


def chain_hosts(tw, hosts: int) -> None:
    """Each host's root also links to the next host's root (ports are known only now)."""
    for h in range(hosts):
        site = tw.web.sites[f"h{h}.test"]
        links = [f"/p{i}.html" for i in range(len(site.pages) - 1 - (h == 0))]
        site.pages["/"] = html(*links, tw.url(f"h{(h + 1) % hosts}.test"))


def star_hosts(tw, hosts: int, pages: int) -> None:
    """h0's root also links to every other host's root: all sites start at once."""
    links = [f"/p{i}.html" for i in range(1, pages)]  # /p0.html is disallowed on h0
    tw.web.sites["h0.test"].pages["/"] = html(*links,
                                              *[tw.url(f"h{h}.test") for h in range(1, hosts)])


def expected_pages(tw, hosts: int, pages: int) -> set[str]:
    """Every page a crawl from h0 may fetch (robots.txt excluded)."""
    return {tw.url(f"h{h}.test", p) for h in range(hosts)
            for p in ["/", *[f"/p{i}.html" for i in range(pages)]]} - {tw.url("h0.test",
                                                                               "/p0.html")}


def node_conf(tw, url: str, node: str, body: str = "") -> str:
    """larbin.conf of one node: its own stateDir, saveDir and From header; exitAtEnd."""
    d = tw.tmp / node
    return (
        f"stateDir {d}/state\nsaveDir {d}/save\ndnsServers {tw.dns.address}\n"
        "allowNetworks 127.0.0.0/8 end\nhttpPort 0\ninputPort 0\nwaitDuration 0\n"
        f"pagesConnexions 10\ncheckpointInterval 1\ndepthInSite 20\nexitAtEnd\n"
        f"cluster {url}\nclusterName test\nnodeId {node}\nFrom {node}@test\n{body}\n"
    )


def node_names(tw, hosts: int, count: int, each: int = 2) -> list[str]:
    """`count` node ids under which every node owns at least `each` of the hosts h0.. (the
    owners depend on the web's port, known only once it runs)."""
    sites = [tw.url(f"h{h}.test").rstrip("/") for h in range(hosts)]
    for trial in range(1000):
        names = [f"n{i + 1}-{trial}" for i in range(count)]
        owned = Counter(owner_of(site, names) for site in sites)
        if all(owned[n] >= each for n in names):
            return names
    raise AssertionError("no balanced node ids")


async def until_fetched(tw, node: str, pages: int) -> None:
    """Until `node` has sent `pages` page requests to the web."""
    await until(lambda: sum(h.headers.get("From") == f"{node}@test" and h.path != "/robots.txt"
                            for h in tw.web.hits) >= pages, f"{node} fetching {pages} pages")


def by_node(tw) -> dict[str, set[str]]:
    """host -> the nodes that requested anything from it."""
    nodes: dict[str, set[str]] = defaultdict(set)
    for hit in tw.web.hits:
        nodes[hit.host].add(hit.headers.get("From", "?").split("@")[0])
    return nodes


async def live_nodes(url: str) -> list[str]:
    """The live set as Redis has it."""
    r = aioredis.Redis.from_url(url)
    try:
        return [n.decode() for n in await r.zrange("larbinpy:test:nodes", 0, -1)]
    finally:
        await r.aclose()


async def wait_for_nodes(url: str, *nodes: Crawler) -> None:
    """Until `nodes` are live in Redis and each one's view of the cluster lists them all."""
    names = {crawler.node.node for crawler in nodes}

    async def joined() -> bool:
        return names <= set(await live_nodes(url)) and all(
            names <= set(crawler.node.membership.live) for crawler in nodes)

    await until(joined, f"{sorted(names)} joining and seeing each other")


def start(tw, url: str, node: str, body: str = "") -> tuple[Crawler, asyncio.Task[int]]:
    """A node crawling in this process."""
    crawler = Crawler(parse_config(node_conf(tw, url, node, body)), scratch=True)
    return crawler, asyncio.ensure_future(asyncio.wait_for(crawler.run(), TIMEOUT))


async def test_three_nodes_fetch_every_page_once_each_host_from_one_node(make_web, redis_url):
    hosts, pages = 9, 6
    tw = await make_web(grid_web(hosts, pages))
    chain_hosts(tw, hosts)
    names = node_names(tw, hosts, 3)
    n2, t2 = start(tw, redis_url, names[1])
    n3, t3 = start(tw, redis_url, names[2])
    await wait_for_nodes(redis_url, n2, n3)
    n1, t1 = start(tw, redis_url, names[0], f"startUrl {tw.url('h0.test')}")
    assert await asyncio.gather(t1, t2, t3) == [0, 0, 0]
    fetched = Counter(tw.pages_fetched())
    assert set(fetched) == expected_pages(tw, hosts, pages)
    assert all(n == 1 for n in fetched.values()), fetched
    owners = by_node(tw)
    assert all(len(nodes) == 1 for nodes in owners.values()), owners
    assert {node for nodes in owners.values() for node in nodes} == set(names)
    for h in range(hosts):  # each host went to its rendezvous owner
        site = tw.url(f"h{h}.test").rstrip("/")
        assert owners[f"h{h}.test"] == {owner_of(site, names)}
    assert tw.web.hits_for("h0.test")[0].path == "/robots.txt"
    assert sum(c.stats.outcomes["success"] for c in (n1, n2, n3)) == len(fetched)


def pick_hosts(tw, hosts: list[str], nodes: list[str]) -> dict[str, str]:
    """node -> the first of `hosts` (running on the test web) that it owns."""
    chosen: dict[str, str] = {}
    for host in hosts:
        chosen.setdefault(owner_of(tw.url(host).rstrip("/"), nodes), host)
    assert set(chosen) == set(nodes), "no host for some node: add candidates"
    return chosen


async def test_a_last_page_sending_a_url_to_an_idle_node_does_not_end_the_crawl(
        make_web, redis_url):
    # n2 has nothing to do for a second (idle, reported idle); then n1's last page, slow,
    # links to a site n2 owns. The crawl must not end before n2 has fetched it.
    candidates = [f"r{i}.test" for i in range(12)]
    tw = await make_web([Site(h, "127.0.0.2", {}) for h in candidates])
    chosen = pick_hosts(tw, candidates, ["n1", "n2"])
    first, second = tw.web.sites[chosen["n1"]], tw.web.sites[chosen["n2"]]
    first.pages.update({"/": html("/slow.html"),
                        "/slow.html": Page(html(tw.url(second.host, "/late.html")).body,
                                           delay=1.0)})
    second.pages["/late.html"] = html()
    n2, t2 = start(tw, redis_url, "n2")
    await wait_for_nodes(redis_url, n2)
    n1, t1 = start(tw, redis_url, "n1", f"startUrl {tw.url(first.host)}")
    assert await asyncio.gather(t1, t2) == [0, 0]
    assert tw.url(second.host, "/late.html") in tw.pages_fetched()
    assert by_node(tw)[second.host] == {"n2"}
    assert n2.stats.outcomes["success"] == 1


def gaps(hits) -> list[float]:
    """Seconds between the end of each request and the start of the next one."""
    hits = sorted(hits, key=lambda h: h.start)
    return [b.start - a.end for a, b in zip(hits, hits[1:], strict=False)]


async def test_the_per_ip_clock_holds_across_nodes(make_web, redis_url):
    candidates = [f"ip{i}.test" for i in range(12)]
    pages = {"/": html("/1.html", "/2.html", "/3.html"), "/1.html": html(), "/2.html": html(),
             "/3.html": html()}
    tw = await make_web([Site(h, "127.0.0.5", dict(pages)) for h in candidates])
    chosen = pick_hosts(tw, candidates, ["n1", "n2"])
    n2, t2 = start(tw, redis_url, "n2", "waitDuration 0.25")
    await wait_for_nodes(redis_url, n2)
    seeds = "".join(f"startUrl {tw.url(h)}\n" for h in chosen.values())
    n1, t1 = start(tw, redis_url, "n1", "waitDuration 0.25\n" + seeds)
    assert await asyncio.gather(t1, t2) == [0, 0]
    hits = tw.web.hits
    assert len(hits) == 2 * 5  # robots.txt and 4 pages, on each host
    assert {h: n for h, n in by_node(tw).items()} == {h: {n} for n, h in chosen.items()}
    # the server stamps `end` a little after the crawler saw the response end
    assert min(gaps(hits)) >= 0.25 - 0.03, gaps(hits)
    assert n1.node.ipclock.deferred + n2.node.ipclock.deferred > 0  # they did meet


async def test_a_node_joining_mid_crawl_takes_over_a_share_of_sites(make_web, redis_url):
    hosts, pages = 9, 8
    tw = await make_web(grid_web(hosts, pages, delay=0.15))
    star_hosts(tw, hosts, pages)
    names = node_names(tw, hosts, 3)
    n2, t2 = start(tw, redis_url, names[1])
    await wait_for_nodes(redis_url, n2)
    n1, t1 = start(tw, redis_url, names[0], f"startUrl {tw.url('h0.test')}")
    await until_fetched(tw, names[0], 10)  # mid-crawl: every site started, none finished
    n3, t3 = start(tw, redis_url, names[2])
    assert await asyncio.gather(t1, t2, t3) == [0, 0, 0]
    fetched = Counter(tw.pages_fetched())
    assert set(fetched) == expected_pages(tw, hosts, pages)
    assert all(n == 1 for n in fetched.values()), fetched
    owners = by_node(tw)
    taken = {h for h, nodes in owners.items() if names[2] in nodes}
    assert taken, owners
    for host in taken:  # n3 fetched only sites it owns once it is live ...
        assert owner_of(tw.url(host).rstrip("/"), names) == names[2]
    # ... and some of them had been started by another node: a takeover, not a fresh site
    assert any(len(owners[h]) == 2 for h in taken), owners


async def test_robots_txt_verdicts_travel_with_their_sites_to_a_new_owner(make_web, redis_url):
    hosts, pages = 9, 8
    tw = await make_web(grid_web(hosts, pages, delay=0.15))
    star_hosts(tw, hosts, pages)
    names = node_names(tw, hosts, 3)
    n1, t1 = start(tw, redis_url, names[0], f"startUrl {tw.url('h0.test')}")
    # every site's robots.txt asked (by n1, alone), and some pages: none finished
    await until(lambda: sum(h.path == "/robots.txt" for h in tw.web.hits) == hosts,
                "every robots.txt asked")
    await until_fetched(tw, names[0], hosts + 2)
    n2, t2 = start(tw, redis_url, names[1])
    n3, t3 = start(tw, redis_url, names[2])
    assert await asyncio.gather(t1, t2, t3) == [0, 0, 0]
    fetched = Counter(tw.pages_fetched())
    assert set(fetched) == expected_pages(tw, hosts, pages)  # h0's rules obeyed everywhere
    robots = Counter(h.host for h in tw.web.hits if h.path == "/robots.txt")
    assert robots == {f"h{h}.test": 1 for h in range(hosts)}  # none asked again by its new owner
    owners = by_node(tw)
    assert any(len(owners[h]) >= 2 for h in owners), owners  # sites did change owner
    assert n2.stats.robots_fetches == n3.stats.robots_fetches == 0


async def test_a_node_stopping_cleanly_hands_its_urls_over(make_web, redis_url):
    hosts, pages = 9, 8
    tw = await make_web(grid_web(hosts, pages, delay=0.1))
    star_hosts(tw, hosts, pages)
    names = node_names(tw, hosts, 3)
    n2, t2 = start(tw, redis_url, names[1])
    n3, t3 = start(tw, redis_url, names[2])
    await wait_for_nodes(redis_url, n2, n3)
    n1, t1 = start(tw, redis_url, names[0], f"startUrl {tw.url('h0.test')}")
    await until_fetched(tw, names[1], 2)  # n2 is in the middle of its sites
    n2.request_stop()
    assert await t2 == 0
    assert await asyncio.gather(t1, t3) == [0, 0]
    fetched = Counter(tw.pages_fetched())
    assert set(fetched) == expected_pages(tw, hosts, pages)
    assert all(n == 1 for n in fetched.values()), fetched  # clean: nothing fetched twice
    owners = by_node(tw)
    assert any(owners[h] >= {names[1]} and len(owners[h]) == 2 for h in owners), \
        owners  # n2 had started sites that the others finished


async def test_a_stopped_cluster_resumes_under_another_node(make_web, redis_url):
    hosts, pages = 3, 8
    tw = await make_web(grid_web(hosts, pages, delay=0.1))
    chain_hosts(tw, hosts)
    a, ta = start(tw, redis_url, "a", f"startUrl {tw.url('h0.test')}")
    await until_fetched(tw, "a", 3)  # mid-crawl
    a.request_stop()
    assert await ta == 0
    first = len(tw.pages_fetched())
    assert 0 < first < len(expected_pages(tw, hosts, pages))
    assert await live_nodes(redis_url) == []  # a left; its URLs wait in Redis for anyone
    b, tb = start(tw, redis_url, "b")
    assert await tb == 0
    fetched = Counter(tw.pages_fetched())
    assert set(fetched) == expected_pages(tw, hosts, pages)
    assert all(n == 1 for n in fetched.values()), fetched
    # a node restarted under its own id takes its pending URLs back at start-up
    a2, ta2 = start(tw, redis_url, "a")
    assert await ta2 == 0
    assert len(tw.pages_fetched()) == len(fetched)  # nothing left, nothing fetched again


async def test_a_node_warns_of_a_seen_set_that_costs_more_or_knows_less(
        make_web, redis_url, caplog):
    """Redis keeps an older version's seen-set (bitmap keys `seen:<i>`), and keeps sets of
    511 integers as hash tables: the crawl runs, and says both."""
    tw = await make_web(grid_web(1, 2))
    r = aioredis.Redis.from_url(redis_url)
    await r.setbit("larbinpy:test:seen:0", 12345, 1)
    await r.config_set("set-max-intset-entries", 100)
    a, ta = start(tw, redis_url, "a", f"startUrl {tw.url('h0.test')}")
    assert await ta == 0
    assert set(tw.pages_fetched()) == expected_pages(tw, 1, 2)
    said = [rec.getMessage() for rec in caplog.records]
    assert any("older version's seen-set (larbinpy:test:seen:0)" in m for m in said), said
    assert any("set-max-intset-entries is 100" in m for m in said), said
    await r.config_set("set-max-intset-entries", 512)  # as Redis ships: no warning
    caplog.clear()
    await r.delete("larbinpy:test:seen:0")
    b, tb = start(tw, redis_url, "b")
    assert await tb == 0
    assert not [rec for rec in caplog.records if "seen-set" in rec.getMessage()]
    await r.aclose()


async def test_a_node_restarted_under_its_id_counts_the_urls_it_saw_before(make_web,
                                                                          redis_url):
    hosts, pages = 3, 8
    tw = await make_web(grid_web(hosts, pages, delay=0.1))
    chain_hosts(tw, hosts)
    a, ta = start(tw, redis_url, "a", f"startUrl {tw.url('h0.test')}")
    await until_fetched(tw, "a", 3)  # mid-crawl
    a.request_stop()
    assert await ta == 0
    before = a.stats.urls_seen
    assert before > 0
    a2, ta2 = start(tw, redis_url, "a")
    assert await ta2 == 0
    assert a2.stats.urls_seen >= before  # not "0 URLs seen": the earlier run's count goes on
    assert a2.stats.urls_seen == len(expected_pages(tw, hosts, pages)) + 1  # + h0's /p0.html


async def test_status_page_and_metrics_show_the_cluster(make_web, redis_url):
    hosts, pages = 4, 3
    tw = await make_web(grid_web(hosts, pages))
    chain_hosts(tw, hosts)
    expected = len(expected_pages(tw, hosts, pages))
    n2, t2 = start(tw, redis_url, "n2")
    n2.cfg.exit_at_end = False
    await wait_for_nodes(redis_url, n2)
    n1, t1 = start(tw, redis_url, "n1", f"startUrl {tw.url('h0.test')}")
    n1.cfg.exit_at_end = False
    s: dict = {}

    def whole_cluster_shown() -> bool:
        nonlocal s
        s = snapshot(n1)
        return s["cluster"]["totals"]["success"] == expected

    await until(whole_cluster_shown, f"n1's status page showing the cluster's {expected} pages")
    n1.request_stop()
    n2.request_stop()
    assert await asyncio.gather(t1, t2) == [0, 0]
    assert len(tw.pages_fetched()) == expected
    c = s["cluster"]
    assert c["node"] == "n1" and c["live"] == ["n1", "n2"]
    assert set(c["nodes"]) == {"n1", "n2"}
    assert sum(f["success"] for f in c["nodes"].values()) == expected
    assert c["totals"]["pages"] == sum(f["pages"] for f in c["nodes"].values())
    page = render_html(s)
    assert '<table id="cluster">' in page and "n2" in page
    text = metrics_text(s)[0].decode()
    assert f'larbinpy_pages_total{{node="n1"}} {float(s["pages"])}' in text
    n2_success = c["nodes"]["n2"]["success"]
    assert f'larbinpy_cluster_success_total{{node="n2"}} {float(n2_success)}' in text
    assert 'larbinpy_cluster_live{node="n2"} 1.0' in text


# --- the parts, against the same real redis-server ---


def test_rendezvous_moves_only_the_sites_a_new_node_takes():
    sites = [f"http://s{i}.test" for i in range(3000)]
    two = {s: owner_of(s, ["a", "b"]) for s in sites}
    three = {s: owner_of(s, ["a", "b", "c"]) for s in sites}
    moved = [s for s in sites if two[s] != three[s]]
    assert all(three[s] == "c" for s in moved)  # only to the newcomer
    assert 800 < len(moved) < 1200  # about a third
    assert Counter(two.values())["a"] in range(1350, 1650)  # balanced


def test_jobs_travel_with_every_field():
    from larbinpy.cluster.link import decode_entry, decode_job, encode_extra
    from larbinpy.records import Job

    job = Job("http://a.test/x?y=1", 3, 2, 1, 7, 1, 2)
    assert decode_job(job.url, encode_extra(job)) == (job, None)
    assert encode_extra(Job("http://a.test/", 5)) == '{"depth":5}'
    line = f"{job.url}\t{encode_extra(job)}\nhttp://b.test/\t{{\"depth\":1}}".encode()
    assert decode_entry(line) == ([job, Job("http://b.test/", 1)], [])


def test_a_revisit_handed_over_travels_with_its_page_history():
    from larbinpy.cluster.link import decode_entry, encode_extra
    from larbinpy.frontier.schedule import Visit, decode_visits, encode_visits
    from larbinpy.records import Job, JobKind

    visit = Visit("http://a.test/p", 1.8e9, 1.7e9, '"5f-1a"', "Sun, 06 Nov 1994 08:49:37 GMT",
                  bytes(range(20)), 1.69e9, 200, 2, 1, 0, b"\x01\x02")
    job = Job(visit.url, 2, 1, kind=JobKind.REVISIT)
    site = b"what the site learned"
    line = f"{job.url}\t{encode_extra(job, encode_visits([visit], site))}".encode()
    jobs, histories = decode_entry(line)
    # to the schedule, whole, and its site's state after it
    assert jobs == [] and decode_visits(histories[0]) == ([visit], site)
    with pytest.raises(ValueError):
        decode_visits(encode_visits([visit])[:-1])


async def admission_of(url: str, node: str, tmp, bits: int = 1 << 20, k: int = 2):
    """An Admission of its own (a node that only admits), with a fresh local cache (a node's:
    exact, its bitmap of `bits` only a filter)."""
    from larbinpy.cluster.link import Link
    from larbinpy.cluster.redis_seen import Admission
    from larbinpy.frontier.diskqueue import DiskFrontier
    from larbinpy.frontier.seen import ExactSeenSet
    from larbinpy.stats import Stats

    link = Link(url, "unit", node)
    cache = ExactSeenSet(tmp / f"{node}.bitmap", bits, k)
    frontier = DiskFrontier(tmp / f"{node}-frontier")
    adm = Admission(link, cache, frontier, Stats(), lambda site: node, lambda: 1, lambda: None)
    return adm, frontier


async def test_sadd_is_a_test_and_set_across_nodes(redis_url, tmp_path):
    from larbinpy.records import Job

    a, fa = await admission_of(redis_url, "a", tmp_path)
    b, fb = await admission_of(redis_url, "b", tmp_path)
    urls = [f"http://x{i % 50}.test/p{i}" for i in range(3000)]
    a.admit([Job(u, 1) for u in urls])
    b.admit([Job(u, 1) for u in reversed(urls)])
    await asyncio.gather(a.drain(), b.drain())  # concurrently, in batches of 2000
    mine_a = [j.url for j in iter(fa.pop, None)]
    mine_b = [j.url for j in iter(fb.pop, None)]
    assert sorted(mine_a + mine_b) == sorted(urls)  # each URL new for exactly one node
    assert mine_a and mine_b
    assert a.stats.urls_seen + b.stats.urls_seen == len(urls)
    assert a.stats.outcomes["urlDup"] + b.stats.outcomes["urlDup"] == len(urls)
    assert a.link.round_trips == 2 and b.link.round_trips == 2  # 3000 URLs: two round trips
    r = aioredis.Redis.from_url(redis_url)
    assert await r.hlen("larbinpy:unit:pending:a") == len(mine_a)  # durable before queued
    await r.aclose()
    for adm in (a, b):
        await adm.link.close()


async def test_a_fetched_url_stays_pending_until_its_pages_links_are_admitted(
        redis_url, tmp_path):
    from larbinpy.cluster.streams import Fetched
    from larbinpy.records import Job

    adm, _ = await admission_of(redis_url, "a", tmp_path)
    pending = "larbinpy:unit:pending:a"
    r = aioredis.Redis.from_url(redis_url)
    await r.hset(pending, "http://a.test/page", "job")  # a URL this node holds
    waiting = asyncio.Event()

    async def settled() -> bool:
        """Admission's own answer; `waiting` tells the test the flush has asked for it."""
        waiting.set()
        return await adm.settled()

    # the page is fetched; its one link is still in the parser stage when the ack is due
    fetched = Fetched(adm.link, lambda: adm.admit([Job("http://a.test/link", 1)]), settled)
    fetched.add("http://a.test/page")
    ack = asyncio.ensure_future(fetched.flush())
    await asyncio.wait_for(waiting.wait(), WAIT_TIMEOUT)  # the flush waits on admission
    assert not ack.done()  # admission has not run: the page must stay pending
    assert await r.hkeys(pending) == [b"http://a.test/page"]  # a kill -9 now loses nothing
    admitting = asyncio.ensure_future(adm.run())
    await asyncio.wait_for(ack, 5)
    assert await r.hkeys(pending) == [b"http://a.test/link"]  # the link in, then the page out
    adm.link.stopping.set()
    adm.wake.set()
    await asyncio.wait_for(admitting, 5)
    await r.aclose()
    await adm.link.close()


async def test_no_url_is_lost_to_a_hash_collision(redis_url, tmp_path):
    """Tiny bitmaps (64 bits for 5,000 URLs: nearly every bit set) still lose nothing: the
    cache and Redis both decide by 64-bit fingerprints, and each URL is new exactly once."""
    from larbinpy.records import Job

    a, fa = await admission_of(redis_url, "a", tmp_path, bits=1 << 10, k=1)
    b, fb = await admission_of(redis_url, "b", tmp_path, bits=1 << 10, k=1)
    urls = [f"http://x{i % 70}.test/q{i}" for i in range(5000)]
    a.admit([Job(u, 1) for u in urls[:3000]])
    await a.drain()
    b.admit([Job(u, 1) for u in urls])  # 3,000 seen by a, 2,000 new
    await b.drain()
    assert sorted(j.url for j in iter(fa.pop, None)) == sorted(urls[:3000])
    assert sorted(j.url for j in iter(fb.pop, None)) == sorted(urls[3000:])
    assert b.stats.outcomes["urlDup"] == 3000
    # and the input stage's test in front of admission, b's cache, now knows all of them
    assert b.cache.missing(urls) == []
    for adm in (a, b):
        await adm.link.close()


async def test_urls_received_from_another_node_join_the_local_cache(redis_url, tmp_path):
    """b owns the sites a discovers: what b receives is in Redis's seen-set, and b's cache
    knows it too, so b's own pages linking to those URLs cost no trip to Redis."""
    import time

    from larbinpy.cluster.link import GROUP, Link
    from larbinpy.cluster.streams import Inbox
    from larbinpy.frontier.diskqueue import DiskFrontier
    from larbinpy.frontier.seen import ExactSeenSet
    from larbinpy.records import Job

    r = aioredis.Redis.from_url(redis_url)
    await r.zadd("larbinpy:unit:nodes", {"b": time.time() * 1000 + 60_000})  # b is live
    await r.xgroup_create("larbinpy:unit:in:b", GROUP, "0", mkstream=True)
    a, _ = await admission_of(redis_url, "a", tmp_path)
    a.owner = lambda site: "b"
    urls = [f"http://b{i % 7}.test/p{i}" for i in range(300)]
    a.admit([Job(u, 1) for u in urls])
    await a.drain()
    assert a.sent == 300
    cache = ExactSeenSet(tmp_path / "b.bitmap", 1 << 16)
    frontier = DiskFrontier(tmp_path / "b-frontier")
    link = Link(redis_url, "unit", "b")
    inbox = Inbox(link, frontier, lambda: 1, lambda: None, lambda histories: None, cache.add)
    reading = asyncio.ensure_future(inbox.run())
    await until(lambda: inbox.received == 300, "b receiving a's URLs")
    link.stopping.set()
    await asyncio.wait_for(reading, 5)
    assert sorted(j.url for j in iter(frontier.pop, None)) == sorted(urls)
    assert cache.missing([*urls, "http://b0.test/new"]) == ["http://b0.test/new"]
    await r.aclose()
    for lnk in (a.link, link):
        await lnk.close()


async def test_the_seen_set_is_in_small_intsets_a_level_deeper_when_full(
        redis_url, tmp_path, monkeypatch):
    from larbinpy.cluster import redis_seen
    from larbinpy.records import Job

    assert (redis_seen.CAP, redis_seen.ROOT) == (511, 4)  # 4,096-byte intsets, 10,000 at first
    monkeypatch.setattr(redis_seen, "CAP", 8)  # the same code, with sets of 8 and 10 at first
    monkeypatch.setattr(redis_seen, "ROOT", 1)
    adm, _ = await admission_of(redis_url, "a", tmp_path)
    urls = [f"http://a.test/{i}" for i in range(600)]
    adm.admit([Job(u, 1) for u in urls])
    await adm.drain()
    assert adm.stats.urls_seen == 600
    r = aioredis.Redis.from_url(redis_url)
    keys = [k.decode() async for k in r.scan_iter("larbinpy:unit:fp:*")]
    members = {int(m) for k in keys for m in await r.smembers(k)}
    assert members == {redis_seen.redis_fingerprint(u) for u in urls}  # each once, all 600
    assert sum([await r.scard(k) for k in keys]) == 600
    assert all([await r.scard(k) <= 8 for k in keys])
    assert {len(k.rsplit(":", 1)[1]) for k in keys} >= {1, 2, 3}  # levels: 10, 100, 1,000 sets
    assert {await r.object("encoding", k) for k in keys} == {b"intset"}  # 8 bytes a member
    # another node, with an empty cache, finds every one of them seen, at whatever level
    other, fo = await admission_of(redis_url, "b", tmp_path)
    other.admit([Job(u, 1) for u in [*urls, "http://a.test/new"]])
    await other.drain()
    assert [j.url for j in iter(fo.pop, None)] == ["http://a.test/new"]
    assert other.stats.outcomes["urlDup"] == 600
    await r.aclose()
    for a in (adm, other):
        await a.link.close()


def test_cluster_keys_are_checked_by_the_configuration():
    from larbinpy.config import ConfigError

    cfg = parse_config("cluster redis://127.0.0.1:6379/0\nclusterName c\nnodeId n1\n")
    assert (cfg.cluster, cfg.cluster_name, cfg.node_id) == ("redis://127.0.0.1:6379/0", "c",
                                                            "n1")
    with pytest.raises(ConfigError, match="redis://host:port/db"):
        parse_config("cluster 127.0.0.1:6379\n")


async def test_an_unreachable_redis_is_a_configuration_error(tmp_path):
    import sys

    from larbinpy.bench.localredis import _free_port

    conf = tmp_path / "larbin.conf"
    conf.write_text(f"stateDir {tmp_path}/s\nsaveDir {tmp_path}/save\nhttpPort 0\ninputPort 0\n"
                    "exitAtEnd\n"
                    f"\ncluster redis://127.0.0.1:{_free_port()}/0\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), "-q",
        stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert b"larbin.conf:7: cluster redis://" in err and b"cannot use Redis" in err


async def test_cluster_without_the_redis_client_is_a_configuration_error(tmp_path):
    import sys

    conf = tmp_path / "larbin.conf"
    conf.write_text(f"stateDir {tmp_path}/s\nsaveDir {tmp_path}/save\nhttpPort 0\ninputPort 0\n"
                    "exitAtEnd\n"
                    "cluster redis://127.0.0.1:6379/0\n")
    # the redis client not installed (it is the optional `cluster` extra)
    code = ("import sys; sys.modules['redis'] = None; from larbinpy.cli import main; "
            f"sys.exit(main(['-c', {str(conf)!r}, '-q']))")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code,
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert (f"{conf}:6: cluster needs the redis client: pip install 'larbinpy[cluster]'"
            in err.decode())
    assert not (tmp_path / "s").exists()  # refused before stateDir was touched
