"""`larbinpy bench` end to end on a tiny synthetic web (figures are not asserted, only sanity)."""

from __future__ import annotations

import tempfile
import urllib.request
from pathlib import Path

from conftest import bench_json

from larbinpy.bench.harness import SynthServer
from larbinpy.bench.measure import default_dir
from larbinpy.bench.synth import PRERENDER_BYTES, SynthFactory, host_ip, host_name, page_path


def test_bench_small_json() -> None:
    """3 hosts x 20 pages: exit 0, the crawl fetched all 60 pages, every run has a throughput."""
    result = bench_json("--hosts", "3", "--pages", "20", "--http1-floor")
    assert result["crawl"]["pages"] == 60
    assert result["crawl"]["pages_per_s"] > 0
    assert result["floor"]["pages_per_s"] > 0
    assert result["http1"]["pages"] == 60  # the bare loop on the crawler's own client too
    assert result["warnings"] == []
    assert result["dir"] == (default_dir() or tempfile.gettempdir())  # said in the report


def test_bench_repeat_reports_the_median_pair_and_every_pair() -> None:
    """--repeat 3: three crawl/floor pairs against one server, each fetching the whole web;
    the figures shown are those of the pair with the median CPU ratio, and the peak RSS the
    first crawl's."""
    result = bench_json("--hosts", "3", "--pages", "5", "--repeat", "3", "--output", "none")
    assert result["repeat"] == 3
    runs = result["runs"]
    assert [r["crawl"]["pages"] for r in runs] == [15, 15, 15]
    assert [r["floor"]["pages"] for r in runs] == [15, 15, 15]
    ratios = sorted(r["ratios"]["cpu_per_page"] for r in runs)
    assert result["ratios"]["cpu_per_page"] == ratios[1]
    middle = next(r for r in runs if r["ratios"]["cpu_per_page"] == ratios[1])
    assert result["crawl"]["cpu_seconds"] == middle["crawl"]["cpu_seconds"]
    # peak RSS is the process's: the first crawl's is the only one that is the crawl's own
    assert result["crawl"]["peak_rss_mb"] == runs[0]["crawl"]["peak_rss_mb"]


def test_bench_writes_in_memory_only_where_there_is_room(tmp_path) -> None:
    assert default_dir(str(tmp_path), room=0) == str(tmp_path)
    assert default_dir(str(tmp_path), room=1 << 60) is None  # not enough room: the temp dir
    assert default_dir(str(tmp_path / "missing"), room=0) is None


def test_bench_politeness_mode_never_beats_the_politeness_clock() -> None:
    """--wait: the report has the whole-run and middle rates beside the ideal, the
    sites-in-memory budget and the CPU bound, and the server saw no two requests to one IP
    closer than waitDuration (robots.txt included)."""
    result = bench_json("--hosts", "4", "--pages", "4", "--per-host", "1", "--wait", "0.3",
                        "--no-floor", "--output", "none", "--sites-in-memory", "3")
    assert result["crawl"]["pages"] == 16
    polite = result["politeness"]
    assert polite["ideal_pages_per_s"] == round(4 / 0.3, 1)
    assert polite["budget_pages_per_s"] == 10.0  # 3 sites at work, one page each per 0.3 s
    assert polite["cpu_pages_per_s"] > polite["ideal_pages_per_s"]
    assert 0 < polite["achieved_over_ideal"] <= 1.0
    # (the budget is not a hard bound: a site whose queue is empty leaves it while its clock runs)
    assert polite["achieved_over_bound"] > 0.3
    # the crawl's pace without its start and tail: faster than the whole run's
    assert polite["middle_requests_per_s"] > 20 / result["crawl"]["seconds"]
    assert polite["requests"] == 20 and polite["gaps"] == 0  # 16 pages and 4 robots.txt
    assert polite["shortest_spacing"] >= 0.3 - polite["slack"]
    assert result["warnings"] == []


def test_bench_serves_pages_of_the_size_and_links_asked_for(tmp_path: Path) -> None:
    """--links 1: a page links only to the next one (a host's last page to a random one), so
    at most one link per host is a duplicate; the report says which web it measured. A --dir
    that does not exist yet is made."""
    where = tmp_path / "not" / "yet"
    result = bench_json("--hosts", "2", "--pages", "6", "--links", "1", "--page-bytes", "3000",
                        "--no-floor", "--output", "none", "--dir", str(where))
    assert result["dir"] == str(where) and where.is_dir()
    assert result["crawl"]["pages"] == 12
    assert result["outcomes"].get("urlDup", 0) <= 2  # 40 links a page: ~30 duplicates each
    assert 2000 < result["crawl"]["body_bytes"] / 12 < 4500  # ~3,000 bytes a page, not 15,000
    assert (result["page_bytes"], result["links"]) == (3000, 1)


def test_micro_measures_the_normalizer_and_the_extractor() -> None:
    """--micro: no network; µs per link in the three cases and µs per page, all measured,
    the latter also on the bench web's plain and dense pages."""
    result = bench_json("--micro")
    urls, extract = result["urls"], result["extract"]
    assert urls["links_per_page"] == 40
    for key in ("first_visit_us_per_link", "all_cached_us_per_link", "full_parser_us_per_link"):
        assert urls[key] > 0
    assert extract["page_kb"] > 10 and extract["us_per_page"] > 0
    shapes = result["extract_shapes"]  # the bench web's pages: plain 10 kB, dense 20 kB
    assert shapes["dense"]["nodes"] > 10 * shapes["plain"]["nodes"]
    for shape in ("plain", "dense"):
        assert shapes[shape]["extract_us_per_page"] > 0
        assert shapes[shape]["parse_and_free_us_per_page"] > 0


def test_bench_frontier_reports_rates_and_rss(tmp_path) -> None:
    from larbinpy.bench.micro import bench_frontier

    result = bench_frontier(n=5000, sites=50, directory=tmp_path)
    for key in ("frontier_push_per_s", "frontier_pop_per_s", "spill_push_per_s",
                "spill_pop_per_s", "peak_rss_mb"):
        assert result[key] > 0


def test_bench_hashset_measures_false_positives_near_the_formula() -> None:
    """5,000 URLs in 2^15 bits: K=1 takes about 14% of other URLs for seen, K=7 about 5%; the
    rates measured on 20,000 URLs never inserted are close to the formula's."""
    from larbinpy.bench.micro import bench_hashset

    result = bench_hashset(5000, bits=1 << 15, probes=20_000)
    for k in ("k1", "k7"):
        formula, measured = result[k]["formula"], result[k]["false_positive_rate"]
        assert result[k]["urls_per_s"] > 0
        assert 0.7 * formula < measured < 1.3 * formula, (k, formula, measured)
    assert result["k7"]["formula"] < result["k1"]["formula"]


def _nodes(body: bytes) -> int:
    """DOM nodes (elements, text, comments) of a page as lexbor builds its tree."""
    from selectolax.lexbor import LexborHTMLParser

    return sum(1 for _ in LexborHTMLParser(body).root.traverse(include_text=True))


def test_dense_pages_have_the_nodes_and_exactly_the_links_they_claim() -> None:
    """A dense 20 kB page holds ~3,000 nodes (DENSE_NODES_PER_KB), a plain one a few hundred;
    both carry the same links, and the extractor finds exactly those."""
    from larbinpy.bench.synth import DENSE_NODES_PER_KB, SynthFactory
    from larbinpy.links.extract import extract_links
    from larbinpy.links.urls import Normalizer

    norm = Normalizer()
    dense = SynthFactory(4, 30, port=8080, page_bytes=20000, links=30, shape="dense")
    plain = SynthFactory(4, 30, port=8080, page_bytes=20000, links=30)
    for n in (0, 7, 29):
        path = "/" if n == 0 else f"/p{n}.html"
        body = dense("h2.bench.test", path).body
        assert isinstance(body, bytes)
        assert 18000 < len(body) < 22000
        nodes = _nodes(body)
        assert 0.9 < nodes / (DENSE_NODES_PER_KB * len(body) / 1000) < 1.15
        assert 2500 < nodes < 3500
        plain_body = plain("h2.bench.test", path).body
        assert isinstance(plain_body, bytes)
        assert _nodes(plain_body) < nodes / 10
        url = dense.url(2, n)
        claimed = {norm.resolve(url, href) for href in dense.links_of(2, n)}
        for page in (body, plain_body):
            found, dropped = extract_links(page, url, norm)
            assert set(found) == claimed and dropped == 0


def test_bench_crawl_of_the_dense_web_fetches_every_page() -> None:
    """--page-shape dense: the crawl fetches every page of the web and the report says which
    shape it measured."""
    result = bench_json("--hosts", "3", "--pages", "12", "--page-shape", "dense",
                        "--page-bytes", "8000", "--no-floor", "--output", "none")
    assert result["page_shape"] == "dense"
    assert result["crawl"]["pages"] == 36
    assert result["warnings"] == []
    assert 7000 < result["crawl"]["body_bytes"] / 36 < 10000


def test_the_bench_server_serves_from_memory_the_pages_it_would_render(tmp_path: Path) -> None:
    """The server renders its web before it is ready: the pages it serves are byte for byte
    those rendered on request; a web over PRERENDER_BYTES is left to render on request."""
    with SynthServer(3, 5, tmp_path, page_bytes=4000, links=10, shape="dense") as server:
        on_request = SynthFactory(3, 5, port=server.http_port, page_bytes=4000, links=10,
                                  shape="dense")
        for h in range(3):
            for n in range(5):
                # (the names resolve through the web's own DNS: its host's address directly)
                request = urllib.request.Request(
                    f"http://{host_ip(h)}:{server.http_port}{page_path(n)}",
                    headers={"Host": f"{host_name(h)}:{server.http_port}"})
                with urllib.request.urlopen(request, timeout=10) as answer:
                    body = answer.read()
                page = on_request(host_name(h), page_path(n))
                assert page is not None and body == page.body
    too_big = SynthFactory(PRERENDER_BYTES // 15000 + 1, 1, page_bytes=15000)
    assert not too_big.prerender()


def test_bench_measures_warc_with_and_without_the_pages_images() -> None:
    """--images 2 --output warc: with requisites (the default with warc) every page's two
    images, the dense pages' stylesheet and its background image are fetched and archived;
    with `--requisites off` none is, and the archive is smaller by at least the images."""
    args = ("--hosts", "2", "--pages", "5", "--page-shape", "dense", "--page-bytes", "6000",
            "--images", "2", "--no-floor", "--output", "warc")
    on, off = bench_json(*args), bench_json(*args, "--requisites", "off")
    for result in (on, off):
        assert result["crawl"]["pages"] == 10 and result["warnings"] == []
    assert on["outcomes"]["requisite"] == 10 * 2 + 2 * 2  # images; site.css and bg.png a host
    assert "requisite" not in off["outcomes"]
    assert on["bytes_written"] - off["bytes_written"] > 24 * 8192 * 0.9


def test_bench_polite_on_a_web_of_an_ip_a_host() -> None:
    """--ips past the server's one-socket-an-IP limit: 1,500 hosts on 1,500 loopback IPs, each
    fetched (robots.txt and its page) by a polite crawl that leaves no gap on any IP."""
    result = bench_json("--hosts", "1500", "--pages", "1", "--per-host", "1", "--wait", "0.5",
                        "--ips", "1500", "--no-floor", "--output", "none")
    polite = result["politeness"]
    assert result["crawl"]["pages"] == 1500 and result["warnings"] == []
    assert polite["ips"] == 1500 and polite["requests"] == 3000 and polite["gaps"] == 0
    assert polite["ideal_pages_per_s"] == 3000.0
