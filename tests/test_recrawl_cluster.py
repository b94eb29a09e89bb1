"""Recrawl in a cluster: the node that owns a site keeps its pages' schedules, and when a node
joins, the revisits of the sites it now owns go to it with their pages' history and what the
sites' validators proved. Two nodes in
this process, one real redis-server, the loopback web of tests/revisitweb.py (each node sends
its own `From`)."""

from __future__ import annotations

import asyncio

import pytest
import redisserver
from conftest import until
from revisitweb import ChangingPage, RevisitWeb
from test_cluster import wait_for_nodes

from larbinpy.cluster import membership
from larbinpy.cluster.membership import owner_of
from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import DnsServer, Site
from larbinpy.frontier import recrawl as revisits_stage

redis_url = redisserver.redis_url
HOSTS = 8


@pytest.fixture(autouse=True)
def fast_heartbeats(monkeypatch):
    """Nodes beat fast (joins show at once); no node dies here, so expiry is long; no audit
    of 304s (unconditional fetches are counted below)."""
    monkeypatch.setattr(membership, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(membership, "EXPIRY_S", 30.0)
    monkeypatch.setattr(revisits_stage, "AUDIT_FIRST", 10**6)
    monkeypatch.setattr(revisits_stage, "AUDIT_EVERY", 10**6)


async def test_a_joining_node_takes_over_the_revisits_of_the_sites_it_now_owns(
        tmp_path, redis_url):
    hosts = [f"c{i}.revisit.test" for i in range(HOSTS)]
    pages = {h: {"/": ChangingPage(links=("/a.html",)), "/a.html": ChangingPage()}
             for h in hosts}
    web = RevisitWeb([Site(h, f"127.0.6.{1 + i % 3}") for i, h in enumerate(hosts)],
                     dict.fromkeys(hosts, "honest"), pages)
    await web.start()
    dns = DnsServer(web.dns_records)
    await dns.start()
    nodes: list[tuple[Crawler, asyncio.Task[int]]] = []

    def start(node: str, body: str = "") -> Crawler:
        d = tmp_path / node
        crawler = Crawler(parse_config(
            f"stateDir {d}/state\nsaveDir {d}/save\ndnsServers {dns.address}\n"
            "allowNetworks 127.0.0.0/8 end\nhttpPort 0\ninputPort 0\nwaitDuration 0\n"
            "pagesConnexions 4\ncheckpointInterval 0.5\nrecrawl on\nrecrawlMin 0.3\n"
            f"recrawlMax 0.6\ncluster {redis_url}\nclusterName test\nnodeId {node}\n"
            f"From {node}@test\n{body}\n"), scratch=True)
        nodes.append((crawler, asyncio.ensure_future(crawler.run())))
        return crawler

    def requests(host: str, since: float = 0.0) -> list[str]:
        """The nodes that asked `host` for /a.html after `since`, in order."""
        return [h.headers.get("From", "?").split("@")[0] for h in web.hits
                if h.host == host and h.path == "/a.html" and h.start > since]

    try:
        moved = [h for h in hosts if owner_of(web.url(h).rstrip("/"), ["n1", "n2"]) == "n2"]
        assert moved and len(moved) < HOSTS  # the ids split the sites (the port decides)
        # one site that moves changes its ETag on every answer: n1 learns not to send it
        churn = moved[0]
        web.modes[churn] = "etag-churn"
        seeds = "".join(f"startUrl {web.url(h)}\n" for h in hosts)
        n1 = start("n1", seeds)
        await wait_for_nodes(redis_url, n1)
        await until(lambda: all(len(requests(h)) >= 2 for h in hosts), "n1 revisiting all")
        n2 = start("n2")
        await wait_for_nodes(redis_url, n1, n2)
        joined = asyncio.get_running_loop().time()
        # every site goes on being revisited, by its owner only once the handover is done
        try:
            await until(lambda: all(requests(h, joined).count("n2") >= 3 for h in moved),
                        "n2 revisiting the sites it took over")
        except AssertionError as exc:
            raise AssertionError({h: requests(h, joined) for h in moved}) from exc
        settled = max(h.start for h in web.hits)
        await until(lambda: all(len(requests(h, settled)) >= 2 for h in hosts),
                    "two more rounds everywhere")
        for h in hosts:
            owner = "n2" if h in moved else "n1"
            assert set(requests(h, settled)) == {owner}, (h, requests(h, settled))
        # the pages came to n2 with their history: its first revisit of a taken-over page
        # already sends the validator n1 had (only n1's first fetch went without one)
        for h in moved[1:]:
            served = web.answers(h, "/a.html")
            assert sum(s.if_none_match is None for s in served) == 1, (h, served)
        # and with what the site proved: n2 never sends the churning ETag n1 stopped sending
        # (only n1's first revisit of the site did, which proved it false)
        served = web.answers(churn, "/") + web.answers(churn, "/a.html")
        assert sum(s.if_none_match is not None for s in served) == 1, served
        assert len(n2.recrawl.schedule) >= len(moved)
    finally:
        for crawler, _ in nodes:
            crawler.request_stop()
        results = await asyncio.wait_for(asyncio.gather(*(t for _, t in nodes)), 30)
        await web.stop()
        await dns.stop()
    assert results == [0] * len(nodes)
