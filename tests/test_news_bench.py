"""The news bench (`larbinpy bench --news`): its web publishes at its rates and lists what it
says it lists, and its measure tells a crawler that finds new articles from one that does not."""

from __future__ import annotations

import email.utils
import math
import re
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import bench_json

from larbinpy.bench.news import (
    ANNOUNCE,
    LISTED,
    RATES,
    NewsServer,
    NewsWeb,
    analyse,
    article_path,
    host_name,
)
from larbinpy.bench.synth import host_ip


def test_the_sites_publish_at_their_rates_and_the_seed_fixes_the_times() -> None:
    """Over 4,000 s each site publishes rate x 4,000 articles, within 4 standard deviations
    (Poisson); the same seed publishes at the same offsets from any start."""
    web = NewsWeb(seed=3, t0=1000.0)
    log = web.log(until=5000.0)
    for i, site in enumerate(log["sites"]):
        new = [t for t in site["published"] if t > 1000.0]
        expected = RATES[i] * 4000
        assert abs(len(new) - expected) < 4 * math.sqrt(expected) + 1, (site["host"], len(new))
        assert (site["sitemap"], site["feed"]) == ANNOUNCE[i]
    later = NewsWeb(seed=3, t0=9000.0).log(until=9100.0)
    for a, b in zip(log["sites"], later["sites"], strict=True):
        assert [round(t - 9000, 6) for t in b["published"]] == \
            [round(t - 1000, 6) for t in a["published"] if t <= 1100]


def get(server: NewsServer, i: int, path: str, headers: dict[str, str] | None = None
        ) -> tuple[int, str, dict[str, str]]:
    """GET `path` of site i straight from its loopback IP: status, body, headers."""
    req = urllib.request.Request(f"http://{host_ip(i, '127.0.6.0')}:{server.http_port}{path}",
                                 headers={"Host": host_name(i), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, "", dict(err.headers)


def newest_at(published: list[float], t: float, skip: int = 0) -> list[int]:
    """Numbers of the LISTED newest articles at `t` after the `skip` newest (1: the oldest)."""
    count = sum(p <= t for p in published)
    return list(range(count - skip, max(0, count - skip - LISTED), -1))


def test_the_front_page_archive_feed_and_sitemap_list_the_newest(tmp_path: Path) -> None:
    """A real server: site 0 (sitemap and feed) after a second or two; the front page lists
    the newest 20 when it answered, archive/1 the next 20, archive/2 the rest; the feed and the
    sitemap list the newest 20 with their dates; robots.txt declares the sitemap; an article's
    ETag gets a 304; an article not yet published is a 404."""
    with NewsServer(tmp_path, initial=45, others=5, lifetime=60) as server:
        time.sleep(1.5)
        got = {path: get(server, 0, path) for path in
               ("/", "/archive/1", "/archive/2", "/archive/3", "/feed.xml", "/sitemap.xml",
                "/robots.txt", "/article/9999.html")}
        status, _, headers = get(server, 7, article_path(1))
        again = get(server, 7, article_path(1), {"If-None-Match": headers["ETag"]})
        truth = server.truth()
    site = truth["sites"][0]
    assert site["sitemap"] and site["feed"]
    published = site["published"]
    answered = {a[3]: a for a in truth["answers"] if a[2] == host_name(0)}

    def listed(path: str) -> list[int]:
        return [int(n) for n in re.findall(r"/article/(\d+)\.html", got[path][1])]

    assert listed("/") == newest_at(published, answered["/"][0])
    assert '<link rel="alternate" type="application/rss+xml" href="/feed.xml">' in got["/"][1]
    assert "/archive/1" in got["/"][1] and "/page/5.html" in got["/"][1]
    assert listed("/archive/1") == newest_at(published, answered["/archive/1"][0], LISTED)
    rest = newest_at(published, answered["/archive/2"][0], 2 * LISTED)
    assert listed("/archive/2") == rest and 5 <= len(rest) <= LISTED
    assert got["/archive/3"][0] == 404 or listed("/archive/3")
    feed = got["/feed.xml"][1]
    assert listed("/feed.xml")[::2] == newest_at(published, answered["/feed.xml"][0])
    dates = [email.utils.parsedate_to_datetime(d).timestamp()
             for d in re.findall(r"<pubDate>([^<]+)</pubDate>", feed)]
    assert dates == [math.floor(published[n - 1]) for n in listed("/feed.xml")[::2]]
    assert listed("/sitemap.xml") == newest_at(published, answered["/sitemap.xml"][0])
    assert got["/sitemap.xml"][1].count("<lastmod>") == LISTED
    assert f"Sitemap: http://{host_name(0)}:{server.http_port}/sitemap.xml" in \
        got["/robots.txt"][1]
    assert got["/article/9999.html"][0] == 404
    assert status == 200 and again[0] == 304
    assert truth["pages"] and {p["kind"] for p in truth["pages"]} == \
        {"front", "archive", "feed", "sitemap", "other", "article"}


def test_the_measure_on_a_hand_made_log() -> None:
    """One site: a front page and an article that existed at the start, an article published
    at 10 and found at 13 (a delay of 3 s), one published at 20 never found."""
    t0, host = 1000.0, host_name(0)

    def page(path: str, kind: str, born: float | None, changes: list[float]) -> dict:
        return {"url": f"http://{host}{path}", "host": host, "path": path, "kind": kind,
                "born": born, "changes": changes}

    truth = {"t0": t0, "sites": [{"host": host, "rate": 0.5, "sitemap": False, "feed": False,
                                  "published": [t0 - 5, t0 + 10, t0 + 20]}],
             "pages": [page("/", "front", None, [t0 + 10, t0 + 20]),
                       page("/article/1.html", "article", None, []),
                       page("/article/2.html", "article", t0 + 10, []),
                       page("/article/3.html", "article", t0 + 20, [])],
             "answers": [[t0 + s, t0 + s + 0.01, host, path, 200, v, 0, 0]
                         for s, path, v in ((1, "/", 0), (2, "/article/1.html", 0),
                                            (12, "/", 1), (13, "/article/2.html", 0))]}
    r = analyse(truth, t0 + 30, wait=0.5)
    assert r["first_pass_s"] == 2.0 and r["steady_s"] == 28.0
    assert (r["new_articles"], r["found"], r["found_share"]) == (2, 1, 0.5)
    assert r["delay_median_s"] == r["delay_p90_s"] == 3.0
    # articles: 1 fresh from its answer's end (2.01) to 30 of 28 s; 2 from 13.01 to 30 of its
    # 20 s; 3 never of its 10
    assert r["fresh_articles"] == pytest.approx((27.99 + 16.99) / (28 + 20 + 10), abs=1e-4)
    # the front page: v0 fresh 2-10, v1 fresh 12.01-20
    assert r["fresh_listings"] == pytest.approx((8 + 7.99) / 28, abs=1e-4)
    assert r["politeness"]["short_gaps"] == 0


def test_the_poller_finds_new_articles_at_once_and_a_client_that_never_revisits_none() -> None:
    """End to end on a small web: the front-page poller finds 90% or more of the articles
    published after its first pass, within a second or two; a client that fetches each URL once
    finds none of them; neither breaks politeness."""
    r = bench_json("--news", "--news-clients", "poller,once", "--seconds", "10", "--wait",
                   "0.05", "--news-others", "10", "--news-initial", "20", timeout=120)
    poller, once = r["clients"]["poller"], r["clients"]["once"]
    assert poller["new_articles"] >= 5 and once["new_articles"] >= 5
    assert poller["found_share"] >= 0.9
    assert poller["delay_median_s"] < 1.0 and poller["delay_p90_s"] < 2.0
    assert once["found_share"] <= 0.1
    for c in (poller, once):
        assert c["politeness"]["short_gaps"] == 0
        for name in ("fresh_articles", "fresh_others", "fresh_listings"):
            assert 0 <= c[name] <= 1
    assert once["fresh_listings"] < poller["fresh_listings"]
