"""`larbinpy bench --micro / --frontier N / --hashset N`: one structure of the crawler alone.

No network and no event loop: each function feeds a single piece (the URL normalizer, the
link extractor, the disk queues, the hash set) inputs made beforehand, so the time measured
is that piece's own cost per URL, link or page, which the whole-crawl figures of `measure.py`
cannot separate.
"""

from __future__ import annotations

import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from selectolax.lexbor import LexborDocumentOptions, LexborHTMLParser

from larbinpy.bench.synth import SynthFactory, host_name, page_path
from larbinpy.frontier.diskqueue import BATCH, DiskFrontier, SiteSpill
from larbinpy.frontier.seen import BitmapSeenSet, false_positive_rate
from larbinpy.links.extract import extract_links
from larbinpy.links.urls import Normalizer
from larbinpy.records import Job

# --- links: the normalizer and the extractor ---


def _page_hrefs(i: int) -> list[str]:
    """Page i's hrefs as a site would write them: 25 site-navigation links (the same on every
    page), 10 relative links of its own, 5 absolute links to other sites."""
    nav = [f"/section/{k}/item-{k * 7}.html" for k in range(20)]
    nav += ["/", "/about", "/contact", "/search?q=x&page=2", "/news/"]
    rel = [f"article-{i}-{k}.html" for k in range(10)]
    ext = [f"https://cdn{k}.example{k}.org/path/to/{i}/{k}" for k in range(5)]
    # Copies, as the extractor hands over fresh strings for every page.
    return [h.encode().decode() for h in nav + rel + ext]


def bench_urls(pages: int = 2000) -> dict[str, float]:
    """µs per link resolved by `Normalizer.resolve_many`, in the three cases a crawl mixes.

    * first visit: each page once, so only the site navigation is in the cache;
    * all cached: the same pages again, every link answered by the cache;
    * full parser: hrefs that are new on every page and need the WHATWG parser (dot segments,
      upper-case scheme and host, escapes, a space, non-ASCII), so every lookup misses.
    """
    batches = [(f"https://www.example.com/blog/post-{i}.html", _page_hrefs(i))
               for i in range(pages)]
    links = sum(len(hrefs) for _, hrefs in batches)

    def run(norm: Normalizer) -> float:
        start = time.perf_counter()
        for base, hrefs in batches:
            norm.resolve_many(base, hrefs)
        return (time.perf_counter() - start) / links * 1e6

    warm = Normalizer()
    first_visit = run(warm)
    all_cached = run(warm)
    slow = ["../a/./b{}.html", "HTTP://Example.COM/%7Ex{}", "//Ex.org/a b{}", "b{}.html?x=é#f"]
    hard = [(f"http://e.com/{i}/p", [h.format(i) for h in slow]) for i in range(pages)]
    norm, start = Normalizer(), time.perf_counter()
    for base, hrefs in hard:
        norm.resolve_many(base, hrefs)
    full_parser = (time.perf_counter() - start) / (pages * len(slow)) * 1e6
    return {"pages": pages, "links_per_page": links / pages,
            "first_visit_us_per_link": round(first_visit, 3),
            "all_cached_us_per_link": round(all_cached, 3),
            "full_parser_us_per_link": round(full_parser, 3)}


def _page_html(i: int, nav: str, text: str) -> bytes:
    """A page of about 15 KB: navigation, 10 relative links in paragraphs, 5 external links,
    a long footer of text."""
    body = [f'<p>{text}<a href="article-{i}-{k}.html">more</a></p>' for k in range(10)]
    body += [f'<a href="https://ext{k}.example.org/p/{i}">ext</a>' for k in range(5)]
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>t</title></head><body>'
        f"<nav><ul>{nav}</ul></nav><main>{''.join(body)}</main>"
        f"<footer><p>{text * 45}</p></footer></body></html>"
    ).encode()


def bench_extract(pages: int = 500) -> dict[str, float]:
    """µs per page for `extract_links` (parse with lexbor, find the links, resolve them) on
    pages of about 15 KB with 40 links: what the parser stage spends per page on links."""
    nav = "".join(f'<li><a href="/section/{k}/">Section {k}</a></li>' for k in range(25))
    text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor. " * 3
    bodies = [_page_html(i, nav, text) for i in range(pages)]
    norm = Normalizer()
    start = time.perf_counter()
    for i, body in enumerate(bodies):
        extract_links(body, f"https://www.example.com/blog/p{i}.html", norm)
    per_page = (time.perf_counter() - start) / pages * 1e6
    return {"pages": pages, "page_kb": round(len(bodies[0]) / 1000, 1),
            "us_per_page": round(per_page, 1)}


def bench_extract_shapes(pages: int = 200, rounds: int = 5) -> dict[str, dict[str, float]]:
    """µs per page (thread CPU time, median of `rounds`) for `extract_links` on the bench's
    plain (10 kB) and dense (20 kB, ~3,000 nodes) pages of 20 links, and the part of it
    lexbor's parse and the freeing of its tree take alone: the share no Python code can cut."""
    result = {}
    for shape, size in (("plain", 10000), ("dense", 20000)):
        web = SynthFactory(10, pages, port=8080, page_bytes=size, links=20, shape=shape)
        bodies = [(_body(web, n), web.url(0, n)) for n in range(pages)]
        norm = Normalizer()
        extract, parse = [], []
        for _ in range(rounds):
            spent = [0.0, 0.0]
            for body, url in bodies:  # the two, alternated page by page: same caches, same load
                t0 = time.thread_time()
                extract_links(body, url, norm)
                t1 = time.thread_time()
                _parse_only(body)
                spent[0] += t1 - t0
                spent[1] += time.thread_time() - t1
            extract.append(spent[0] / len(bodies) * 1e6)
            parse.append(spent[1] / len(bodies) * 1e6)
        root = LexborHTMLParser(bodies[1][0]).root
        assert root is not None  # an HTML document always has one
        nodes = sum(1 for _ in root.traverse(include_text=True))
        result[shape] = {"page_bytes": len(bodies[1][0]), "nodes": nodes,
                         "extract_us_per_page": round(statistics.median(extract), 1),
                         "parse_and_free_us_per_page": round(statistics.median(parse), 1)}
    return result


def _body(web: SynthFactory, n: int) -> bytes:
    """Page n of the synthetic web's first host."""
    page = web(host_name(0), page_path(n))
    assert page is not None and isinstance(page.body, bytes)
    return page.body


def _parse_only(body: bytes) -> None:
    """Parse an ASCII page as `extract_links` does and free the tree: lexbor's own part."""
    tree = LexborHTMLParser(body, encoding=False, options=LexborDocumentOptions.WO_EVENTS)
    del tree


# --- state: the disk queues and the hash set ---


def _job_pool(sites: int) -> list[list[Job]]:
    """64 batches of BATCH synthetic jobs over `sites` sites and 3 priorities, reused in turn."""
    return [[Job(f"http://site{i % sites}.example.com/dir/page{i}.html", 5, i // BATCH % 3)
             for i in range(b * BATCH, (b + 1) * BATCH)] for b in range(64)]


def _rate(n: int, seconds: float) -> float:
    """Jobs per second."""
    return n / seconds if seconds > 0 else float("inf")


def bench_frontier(n: int = 10_000_000, sites: int = 100_000,
                   directory: Path | None = None) -> dict[str, float]:
    """Push then pop n jobs through DiskFrontier, then SiteSpill: URLs/s each way, peak RSS.

    Jobs come from a small pool made beforehand, so the rates are the queues' own cost. The
    spill receives one job at a time, round-robin over the sites (its worst case: one small
    append per site per buffer flush).
    """
    pool = _job_pool(sites)
    keys = [[j.url[7:j.url.index("/", 7)] for j in batch] for batch in pool]
    result: dict[str, float] = {"jobs": n, "sites": sites}
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        frontier = DiskFrontier(Path(tmp) / "frontier")
        t0 = time.perf_counter()
        for b, start in enumerate(range(0, n, BATCH)):
            frontier.push(pool[b % 64][: n - start])
        frontier.flush()
        t1 = time.perf_counter()
        popped = 0
        while frontier.pop() is not None:
            popped += 1
        result["frontier_push_per_s"] = _rate(n, t1 - t0)
        result["frontier_pop_per_s"] = _rate(popped, time.perf_counter() - t1)
        frontier.close()
        assert popped == n, (popped, n)
        spill = SiteSpill(Path(tmp) / "spill")
        t0 = time.perf_counter()
        for b, start in enumerate(range(0, n, BATCH)):
            for key, job in zip(keys[b % 64][: n - start], pool[b % 64], strict=False):
                spill.push(key, [job])
        spill.flush()
        t1 = time.perf_counter()
        popped = 0
        for s in range(sites):
            while batch := spill.pop_many(f"site{s}.example.com", 100):
                popped += len(batch)
        result["spill_push_per_s"] = _rate(n, t1 - t0)
        result["spill_pop_per_s"] = _rate(popped, time.perf_counter() - t1)
        spill.close()
        assert popped == n, (popped, n)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def bench_hashset(n: int, bits: int = 1 << 28, probes: int = 1_000_000) -> dict[str, Any]:
    """Insert n URLs (batches of 1,000: test then set, as the input stage does); measure the
    throughput and the false-positive rate on URLs never inserted, against the formula."""
    result: dict[str, Any] = {"urls": n, "bits": bits}
    for k in (1, 7):
        with tempfile.TemporaryDirectory(prefix="larbinpy-hash-") as tmp:
            seen = BitmapSeenSet(Path(tmp) / "seen.bitmap", bits, k)
            start = time.perf_counter()
            for base in range(0, n, 1000):
                batch = [f"http://h{i % 100_003}.example.org/p/{i}" for i in
                         range(base, min(base + 1000, n))]
                seen.add(seen.missing(batch))
            rate = n / (time.perf_counter() - start)
            others = [f"http://other{i}.example.net/q/{i}" for i in range(probes)]
            measured = 1 - len(seen.missing(others)) / probes
            seen.close()
        result[f"k{k}"] = {"urls_per_s": round(rate), "false_positive_rate": measured,
                           "formula": false_positive_rate(bits, k, n)}
    return result
