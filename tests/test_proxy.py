"""larbin's `proxy host port`, end to end through a small loopback proxy: plain HTTP in
absolute form, HTTPS through CONNECT, DNS left to the proxy unless `proxyDns local`."""

from __future__ import annotations

import asyncio
from collections import Counter

from conftest import html
from modernweb import Certs, Proxy, TlsWeb

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import Page, Site

ROBOTS = Page("User-agent: *\nDisallow: /private.html\n", content_type="text/plain")


async def proxied_web(make_web, tmp_path):
    """p.test over HTTP linking to s.test over HTTPS, and a proxy that knows both."""
    certs = Certs(tmp_path)
    tls = TlsWeb([Site("s.test", "127.0.0.3", {"/": html("/s1.html"), "/s1.html": html()})],
                 {"s.test": certs.good("s.test")})
    await tls.start()
    tw = await make_web([Site("p.test", "127.0.0.2", {"/robots.txt": ROBOTS})],
                        extra_dns=tls.dns_records)
    tw.web.sites["p.test"].pages.update({
        "/": html("/p1.html", "/private.html", tls.url("s.test", "/")),
        "/p1.html": html("/"),
    })
    proxy = Proxy({**tw.web.dns_records, **tls.dns_records})
    await proxy.start()
    return tw, tls, proxy, certs


async def test_requests_go_through_the_proxy_which_resolves_names(make_web, tmp_path):
    tw, tls, proxy, certs = await proxied_web(make_web, tmp_path)
    try:
        crawler = await tw.crawl(f"startUrl {tw.url('p.test')}\nproxy 127.0.0.1 {proxy.port}\n"
                                 f"caFile {certs.ca_file}")
    finally:
        await proxy.stop()
        await tls.stop()
    port, tls_port = tw.web.port, tls.port
    methods = Counter(m for m, _ in proxy.requests)
    # plain HTTP: absolute-form request lines; HTTPS: a CONNECT tunnel to host:port
    assert {t for m, t in proxy.requests if m == "GET"} == {
        f"http://p.test:{port}/robots.txt", f"http://p.test:{port}/",
        f"http://p.test:{port}/p1.html"}
    assert {t for m, t in proxy.requests if m == "CONNECT"} == {f"s.test:{tls_port}"}
    assert set(methods) == {"GET", "CONNECT"}
    # the servers saw every allowed page, robots.txt first, the disallowed one never
    assert [h.path for h in tw.web.hits][0] == "/robots.txt"
    assert {h.path for h in tw.web.hits} == {"/robots.txt", "/", "/p1.html"}
    assert {h.path for h in tls.hits} == {"/robots.txt", "/", "/s1.html"}
    # DNS was the proxy's job: the crawler asked its DNS server nothing
    assert sum(tw.dns.queries.values()) == 0
    assert crawler.stats.outcomes["success"] == 4
    assert crawler.stats.outcomes["forbiddenRobots"] == 1


async def test_proxy_dns_local_resolves_here_and_still_uses_the_proxy(make_web, tmp_path):
    tw, tls, proxy, certs = await proxied_web(make_web, tmp_path)
    try:
        crawler = await tw.crawl(f"startUrl {tw.url('p.test')}\nproxy 127.0.0.1 {proxy.port}\n"
                                 f"proxyDns local\ncaFile {certs.ca_file}")
    finally:
        await proxy.stop()
        await tls.stop()
    assert tw.dns.queries[("p.test", "A")] == 1 and tw.dns.queries[("s.test", "A")] == 1
    assert len(proxy.requests) == 4  # three GETs, one CONNECT
    assert crawler.stats.outcomes["success"] == 4


async def test_a_dead_proxy_is_counted_not_a_crash(make_web, tmp_path):
    tw, tls, proxy, certs = await proxied_web(make_web, tmp_path)
    await proxy.stop()
    await tls.stop()
    crawler = await tw.crawl(f"startUrl {tw.url('p.test')}\nproxy 127.0.0.1 {proxy.port}\n"
                             "maxRetries 0\ntimeoutConnect 1", timeout=30)
    assert tw.web.hits == []
    # robots.txt unreachable through the proxy: its site's URL dropped as forbiddenRobots
    assert crawler.stats.outcomes["forbiddenRobots"] == 1


async def test_the_proxy_is_trusted_where_urls_are_not(make_web, tmp_path):
    """Without allowNetworks, loopback URLs are denied, yet the configured proxy is used."""
    tw, tls, proxy, certs = await proxied_web(make_web, tmp_path)
    text = tw.config_text(f"exitAtEnd\nstartUrl {tw.url('p.test')}\nproxy 127.0.0.1 {proxy.port}\n"
                          f"caFile {certs.ca_file}\nstartUrl http://127.0.0.2:{tw.web.port}/x"
                          ).replace("allowNetworks 127.0.0.0/8 end", "")
    try:
        crawler = Crawler(parse_config(text), scratch=True)
        await asyncio.wait_for(crawler.run(), 30)
    finally:
        await proxy.stop()
        await tls.stop()
    assert {h.path for h in tw.web.hits} == {"/robots.txt", "/", "/p1.html"}
    assert crawler.stats.outcomes["deniedNetwork"] == 1  # the IP literal is still checked here
    assert crawler.stats.outcomes["success"] == 4
