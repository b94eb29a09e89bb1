"""IPv6 end to end on ::1: AAAA records, `ipVersion 4|6|any`, IPv6 literals in URLs, and the
per-IP politeness clock keyed by /64."""

from __future__ import annotations

import pytest
from conftest import html
from modernweb import ipv6_loopback
from test_crawl import gaps

from larbinpy.config import parse_config
from larbinpy.demo import Site
from larbinpy.frontier.sites import Sites
from larbinpy.net.policy import NetworkPolicy
from larbinpy.records import Site as SiteRecord
from larbinpy.stages.dns import Dns, politeness_key
from larbinpy.stats import Stats

NO_V6 = ipv6_loopback()
needs_v6 = pytest.mark.skipif(NO_V6 is not None, reason=NO_V6 or "")
OPEN_V6 = "allowNetworks ::1/128 end\n"


def v6_web() -> list[Site]:
    """v6.test only on ::1 (AAAA), dual.test on 127.0.0.2 and ::1, and the ::1 literal."""
    return [
        Site("v6.test", "::1", {"/": html("/a.html"), "/a.html": html()}),
        Site("dual.test", "127.0.0.2", {"/": html()}),
        Site("::1", "::1", {"/": html("/lit.html"), "/lit.html": html()}),
    ]


async def start(make_web):
    """The web, with dual.test in DNS under both families."""
    sites = v6_web()
    tw = await make_web(sites, extra_dns={"dual.test": ["127.0.0.2", "::1"]})
    tw.web.sites["dual.test"].pages["/"] = html(tw.url("v6.test", "/"), tw.url("[::1]", "/"))
    return tw


@needs_v6
async def test_aaaa_hosts_and_ipv6_literals_are_crawled_over_ipv6(make_web):
    tw = await start(make_web)
    crawler = await tw.crawl(f"startUrl {tw.url('dual.test')}\n{OPEN_V6}")
    seen = {(h.host, h.path, h.ip) for h in tw.web.hits}
    assert ("v6.test", "/a.html", "::1") in seen
    assert ("::1", "/lit.html", "::1") in seen  # http://[::1]:port/ literal, no DNS at all
    assert ("dual.test", "/", "127.0.0.2") in seen  # any: A first, IPv4 when a host has both
    assert tw.dns.queries[("v6.test", "AAAA")] == 1
    assert crawler.stats.outcomes["success"] == 5


@needs_v6
async def test_ip_version_6_uses_only_aaaa(make_web):
    tw = await start(make_web)
    crawler = await tw.crawl(f"startUrl {tw.url('dual.test')}\nipVersion 6\n{OPEN_V6}")
    assert {h.ip for h in tw.web.hits} == {"::1"}
    assert tw.dns.queries[("dual.test", "A")] == 0
    assert crawler.stats.outcomes["success"] == 5


@needs_v6
async def test_ip_version_4_never_reaches_an_ipv6_only_host(make_web):
    tw = await start(make_web)
    crawler = await tw.crawl(f"startUrl {tw.url('dual.test')}\nipVersion 4\n{OPEN_V6}")
    assert {h.ip for h in tw.web.hits} == {"127.0.0.2"}  # neither v6.test nor the literal
    assert tw.dns.queries[("v6.test", "AAAA")] == 0
    assert crawler.stats.outcomes["noDNS"] == 2


@needs_v6
async def test_ipv6_loopback_stays_denied_unless_allowed(make_web):
    tw = await start(make_web)
    crawler = await tw.crawl(f"startUrl {tw.url('dual.test')}")
    assert {h.ip for h in tw.web.hits} == {"127.0.0.2"}
    assert crawler.stats.outcomes["deniedNetwork"] == 2  # v6.test and the [::1] literal


@needs_v6
async def test_two_names_on_one_ipv6_host_share_its_politeness_clock(make_web):
    tw = await make_web([
        Site("p.test", "::1", {"/": html("/1", "/2", "/3")}),
        Site("q.test", "::1", {"/": html("/1", "/2")}),
    ])
    tw.web.sites["p.test"].pages["/"] = html("/1", "/2", tw.url("q.test", "/"))
    await tw.crawl(f"startUrl {tw.url('p.test')}\nwaitDuration 0.2\n{OPEN_V6}")
    hits = tw.web.hits
    assert {h.host for h in hits} == {"p.test", "q.test"} and len(hits) >= 8
    assert min(gaps(hits)) >= 0.2 - 0.02, gaps(hits)


def test_politeness_key_is_the_address_or_its_slash_64():
    assert politeness_key("192.0.2.7") == "192.0.2.7"
    assert politeness_key("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert politeness_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert politeness_key("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert politeness_key("::ffff:192.0.2.7") == "192.0.2.7"  # an IPv4 host, written as IPv6


async def test_the_dns_stage_gives_one_clock_to_a_slash_64():
    """Hosts on two addresses of one /64 get the same IpSlot; another /64 gets its own."""
    cfg = parse_config("allowNetworks 2001:db8::/32 end\n")
    sites = Sites(Stats(), 0.0, spill=None)  # type: ignore[arg-type]
    dns = Dns(cfg, Stats(), sites, NetworkPolicy(cfg.allow_networks), lambda s: None)
    records = {}
    for host, ip in (("a.test", "2001:db8:0:1::a"), ("b.test", "2001:db8:0:1::b"),
                     ("c.test", "2001:db8:0:2::c")):
        site = SiteRecord(f"http://{host}", host)
        dns.waiting_sites += 1
        dns._resolved(site, [ip])
        records[host] = site
    assert records["a.test"].ip is records["b.test"].ip
    assert records["a.test"].ip is not records["c.test"].ip


def test_ip_literals_are_told_from_host_names() -> None:
    """A literal needs no DNS query; a name, even one with digits, does."""
    from larbinpy.stages.dns import ip_literal

    assert ip_literal("127.0.0.2") == "127.0.0.2"
    assert ip_literal("[::1]") == "::1"
    assert ip_literal("[::ffff:1.2.3.4]") == "::ffff:102:304"
    for name in ("example.com", "h12.bench.test", "1.2.3.4.example", "1e100", "ab", "", "[]",
                 "1.2.3.256"):
        assert ip_literal(name) is None, name
