"""HTTPS end to end: a loopback HTTPS web with a test CA (trustme), http <-> https links and
redirects, robots.txt per scheme+host+port, and each bad-certificate case counted as tlsError."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from conftest import html
from modernweb import Certs, TlsWeb

from larbinpy.daemon.status import snapshot
from larbinpy.daemon.statuspage import render_html
from larbinpy.demo import Page, Site, redirect

ROBOTS_HTTP = Page("User-agent: *\nDisallow: /private\n", content_type="text/plain")
ROBOTS_HTTPS = Page("User-agent: *\nDisallow: /nope.html\n", content_type="text/plain")


@pytest.fixture
async def certs(tmp_path: Path) -> Certs:
    """A fresh test CA for each test."""
    return Certs(tmp_path)


async def test_http_and_https_link_and_redirect_to_each_other(make_web, certs: Certs):
    tls = TlsWeb([Site("mix.test", "127.0.0.2", {"/robots.txt": ROBOTS_HTTPS})],
                 {"mix.test": certs.good("mix.test")})
    await tls.start()
    try:
        tw = await make_web([Site("mix.test", "127.0.0.2", {"/robots.txt": ROBOTS_HTTP})])
        plain, secure = tw.web.sites["mix.test"].pages, tls.sites["mix.test"].pages
        plain["/"] = html(tls.url("mix.test", "/secure.html"), "/to-https", "/private/x.html")
        plain["/to-https"] = redirect(tls.url("mix.test", "/redirected.html"))
        plain["/from-https.html"] = html()
        secure["/secure.html"] = html(tw.url("mix.test", "/from-https.html"), "/nope.html")
        secure["/redirected.html"] = html("/secure.html")
        crawler = await tw.crawl(f"startUrl {tw.url('mix.test')}\ncaFile {certs.ca_file}")
    finally:
        await tls.stop()
    http_paths = [h.path for h in tw.web.hits]
    https_paths = [h.path for h in tls.hits]
    # robots.txt once per scheme+host+port, each before any page of its own site
    assert http_paths[0] == "/robots.txt" and https_paths[0] == "/robots.txt"
    assert Counter(http_paths)["/robots.txt"] == 1 and Counter(https_paths)["/robots.txt"] == 1
    assert set(http_paths) == {"/robots.txt", "/", "/to-https", "/from-https.html"}
    assert set(https_paths) == {"/robots.txt", "/secure.html", "/redirected.html"}
    assert all(n == 1 for n in Counter(https_paths).values())
    out = crawler.stats.outcomes
    assert out["success"] == 4 and out["err30X"] == 1 and out["tlsError"] == 0
    assert out["forbiddenRobots"] == 2  # /private/x.html by http's rules, /nope.html by https's


def bad_certificate_web(certs: Certs) -> TlsWeb:
    """Four hosts on one IP: a good certificate and the three bad kinds, chosen by SNI."""
    hosts = {"good.test": certs.good, "expired.test": certs.expired,
             "wrongname.test": certs.wrong_name, "selfsigned.test": certs.self_signed}
    sites = [Site(h, "127.0.0.2", {"/": html("/a.html"), "/a.html": html()}) for h in hosts]
    return TlsWeb(sites, {h: make(h) for h, make in hosts.items()})


async def crawl_tls(make_web, tls: TlsWeb, conf: str):
    """Crawl the seed page of every host of `tls` (DNS from an otherwise empty test web)."""
    tw = await make_web([], extra_dns=tls.dns_records)
    seeds = "".join(f"startUrl {tls.url(h)}\n" for h in tls.sites)
    return await tw.crawl(seeds + conf, timeout=20)


@pytest.mark.parametrize("robots", ["on", "off"])
async def test_each_bad_certificate_is_a_tls_error_never_a_crash(make_web, certs, robots):
    tls = bad_certificate_web(certs)
    await tls.start()
    try:
        crawler = await crawl_tls(make_web, tls, f"caFile {certs.ca_file}\nrobots {robots}")
    finally:
        await tls.stop()
    # a handshake that fails never becomes a request: only good.test was asked for anything
    assert {h.host for h in tls.hits} == {"good.test"}
    assert {h.path for h in tls.hits} >= {"/", "/a.html"}
    assert crawler.stats.outcomes["tlsError"] == 3  # expired, wrong name, self-signed
    assert crawler.stats.outcomes["success"] == 2
    assert snapshot(crawler)["tls_verify"] is True


async def test_without_ca_file_the_test_ca_is_not_trusted(make_web, certs):
    tls = bad_certificate_web(certs)
    await tls.start()
    try:
        crawler = await crawl_tls(make_web, tls, "")
    finally:
        await tls.stop()
    assert tls.hits == []
    assert crawler.stats.outcomes["tlsError"] == 4


async def test_tls_verify_off_fetches_everything_and_says_so(make_web, certs):
    tls = bad_certificate_web(certs)
    await tls.start()
    try:
        crawler = await crawl_tls(make_web, tls, "tlsVerify off")
    finally:
        await tls.stop()
    assert {h.host for h in tls.hits} == set(tls.sites)
    assert crawler.stats.outcomes["tlsError"] == 0
    assert crawler.stats.outcomes["success"] == 8
    status = snapshot(crawler)
    assert status["tls_verify"] is False
    assert "NOT CHECKED (tlsVerify off)" in render_html(status)
