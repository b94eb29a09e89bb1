"""The seen-set: `seenSet exact` loses no new URL to a bitmap collision, survives kill -9 and
restarts, reads a bitmap-only stateDir; `seenSet bitmap` behaves like larbin's hash set."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import c_extension, html, until

from larbinpy.daemon.status import snapshot
from larbinpy.daemon.statuspage import metrics_text
from larbinpy.demo import Page, Site
from larbinpy.frontier import seen as seen_module
from larbinpy.frontier.fptable import BUCKET_BYTES, MIN_BUCKETS, SLOTS, WINDOW, FingerprintTable
from larbinpy.frontier.seen import (
    RECENT_KEY_MAX,
    RECENT_MAX,
    BitmapSeenSet,
    ExactSeenSet,
    open_seen_set,
)

TINY = 1 << 10  # bits: a few thousand URLs fill it


def offer(seen, urls: list[str], batch: int = 50) -> int:
    """Feed URLs a page's worth at a time as the input stage does; return how many were new."""
    admitted = 0
    for i in range(0, len(urls), batch):
        fresh = seen.missing(urls[i:i + batch])
        seen.add(fresh)
        admitted += len(fresh)
    return admitted


def urls(n: int, start: int = 0) -> list[str]:
    """n distinct URLs."""
    return [f"http://h{i % 97}.test/page/{i}.html" for i in range(start, start + n)]


def test_exact_admits_every_distinct_url_where_the_bitmap_drops_them(tmp_path: Path):
    distinct = urls(20_000)
    bitmap = BitmapSeenSet(tmp_path / "b.bitmap", TINY)
    exact = ExactSeenSet(tmp_path / "seen.bitmap", TINY)
    assert offer(bitmap, distinct) < len(distinct) // 10  # larbin: collisions drop URLs
    assert offer(exact, distinct) == len(distinct)
    assert offer(exact, distinct[::7]) == 0  # and every one is seen afterwards
    exact.close()
    again = ExactSeenSet(tmp_path / "seen.bitmap", TINY)  # a restart keeps it all
    assert again.missing(distinct) == []
    assert again.missing(["http://new.test/"]) == ["http://new.test/"]
    again.close()


def crowded(bucket: int, home: int, n: int) -> list[int]:
    """n distinct fingerprints of one bucket (of a MIN_BUCKETS table) and one home slot."""
    return [bucket + MIN_BUCKETS * (j + 1) + (home << 40) for j in range(n)]


# a table read with pread (no cache), and one read through its mapping
CACHES = pytest.mark.parametrize("cache", [0, 1 << 30], ids=["pread", "mapped"])


@CACHES
def test_the_table_finds_fingerprints_past_their_window_and_round_its_bucket(
        tmp_path: Path, cache: int):
    path = tmp_path / "t.fingerprints"
    table = FingerprintTable(path, cache)
    # a run of 3 windows from one home slot, and one near the bucket's end that wraps round
    deep, wrapped = crowded(5, 100, 3 * WINDOW), crowded(9, SLOTS - 3, WINDOW)
    table.add(deep + wrapped)
    absent = crowded(5, 100, 4 * WINDOW)[3 * WINDOW:] + crowded(9, SLOTS - 3, 2 * WINDOW)[WINDOW:]
    assert table.contains(deep + wrapped) == [True] * len(deep + wrapped)
    assert table.contains(absent) == [False] * len(absent)
    assert table.buckets == MIN_BUCKETS and table.count == len(deep + wrapped)
    table.add(deep[::3])  # stored ones are not stored twice
    assert table.count == len(deep + wrapped)
    table.close()
    again = FingerprintTable(path, cache)  # all of it was in the file
    assert again.contains(deep + wrapped + absent) == [True] * 64 + [False] * len(absent)
    again.close()


@CACHES
def test_a_full_bucket_doubles_the_table_and_keeps_every_fingerprint(tmp_path: Path, cache: int):
    table = FingerprintTable(tmp_path / "t.fingerprints", cache)
    full = crowded(7, 0, SLOTS + 1)  # one more than bucket 7 holds
    table.add(full)
    assert table.buckets == 2 * MIN_BUCKETS  # bucket 7 split into buckets 7 and 71
    assert table.contains(full) == [True] * len(full)
    assert table.contains(crowded(7, 0, SLOTS + 9)[SLOTS + 1:]) == [False] * 8
    table.close()


def test_a_table_outgrowing_its_cache_is_read_from_the_file_and_keeps_every_fingerprint(
        tmp_path: Path):
    path = tmp_path / "t.fingerprints"
    table = FingerprintTable(path, cache=2 * MIN_BUCKETS * BUCKET_BYTES)  # two sizes mapped
    rng = random.Random(7)
    stored, absent = [rng.getrandbits(64) | 1 for _ in range(30_000)], []
    for start in range(0, len(stored), 1000):  # grows to 2 (mapped), then 4 times MIN_BUCKETS
        table.add(stored[start:start + 1000])
        absent += [rng.getrandbits(64) | 1 for _ in range(100)]
        assert table.contains(stored[:start + 1000:7]) == [True] * len(stored[:start + 1000:7])
        assert table.contains(absent) == [False] * len(absent)
    assert table.buckets * BUCKET_BYTES > table.cache
    table.close()
    again = FingerprintTable(path, cache=1 << 30)  # reopened with a cache it fits in
    assert again.contains(stored + absent) == [True] * len(stored) + [False] * len(absent)
    assert again.count == len(stored)
    again.close()


def test_urls_that_left_the_memo_of_recent_urls_are_still_seen(tmp_path: Path):
    distinct = urls(5 * RECENT_MAX)  # the memo keeps at most 2 * RECENT_MAX of them
    seen = ExactSeenSet(tmp_path / "seen.bitmap", 1 << 20)
    assert offer(seen, distinct) == len(distinct)
    # the oldest from the table, the latest from the memo
    assert [k for i in range(0, len(distinct), 50) for k in seen.missing(distinct[i:i + 50])] == []
    memo = seen.bitmap._recent | seen.bitmap._older
    assert RECENT_MAX <= len(memo) <= 2 * RECENT_MAX  # bounded, whatever the crawl's size
    assert offer(seen, urls(1000, start=len(distinct))) == 1000
    seen.close()


def test_the_seen_test_in_use_is_the_c_twin_unless_told() -> None:
    """A page's links are tested by `_seenbits` where it was built (a failed build falls back
    to Python without a word: this says so), by Python under LARBINPY_PURE=1."""
    from larbinpy import PURE

    if PURE:
        assert seen_module._seenbits is None
    else:
        assert seen_module._seenbits is c_extension("frontier._seenbits")


def both_twins(monkeypatch, seen_set, keys: list[str]) -> tuple[list[str], list[str]]:
    """`missing(keys)` by the C twin and by the Python code, each from the same memo of recent
    URLs; the memo each leaves must be the same too (the answers are compared by the caller)."""
    twin = c_extension("frontier._seenbits")
    memo = seen_set if isinstance(seen_set, BitmapSeenSet) else seen_set.bitmap
    before = set(memo._recent), set(memo._older)
    answers, memos = [], []
    for module in (twin, None):
        monkeypatch.setattr(seen_module, "_seenbits", module)
        memo._recent, memo._older = set(before[0]), set(before[1])
        answers.append(seen_set.missing(list(keys)))
        memos.append((memo._recent, memo._older))
    assert memos[0] == memos[1]
    return answers[0], answers[1]


@pytest.mark.parametrize("functions, bits", [(1, 1 << 12), (3, 1 << 12), (3, 12_289), (5, 999)])
def test_the_c_twin_answers_as_the_python_seen_set(monkeypatch, tmp_path: Path, functions: int,
                                                   bits: int):
    """A bitmap about half full (so bits decide), a fingerprint table near its highest load in
    its 64 buckets (windows full and cut short at a bucket's end: whole buckets read), URLs in
    and out of the memo, repeated, and not ASCII: both twins name the same missing URLs."""
    rng = random.Random(bits + functions)
    stored = [f"http://h{rng.randrange(40)}.test/{rng.getrandbits(40):x}/{i}"
              for i in range(11_000)]
    absent = [f"http://h{i % 7}.test/é/{i}?q=%E2%82%AC" for i in range(3000)]
    for cls in (BitmapSeenSet, ExactSeenSet):
        path = tmp_path / f"{cls.__name__}.bitmap"
        seen_set = (ExactSeenSet(path, bits, functions, cache=1 << 20) if cls is ExactSeenSet
                    else BitmapSeenSet(path, bits, functions))  # (the table read from memory)
        for i in range(0, len(stored), 500):
            seen_set.add(stored[i:i + 500] if cls is ExactSeenSet else stored[i:i + 25])
        if cls is ExactSeenSet:
            assert seen_set.table.buckets == MIN_BUCKETS and seen_set.table.mapped() is not None
        memo = seen_set if isinstance(seen_set, BitmapSeenSet) else seen_set.bitmap
        memo._recent = set(rng.sample(stored, 1000))  # most stored URLs left the memo
        memo._older = set(rng.sample(stored, 1000))
        for _ in range(40):
            page = rng.sample(stored, 30) + rng.sample(absent, 20)
            page += page[:5]  # a page may link to a URL twice
            rng.shuffle(page)
            c, py = both_twins(monkeypatch, seen_set, page)
            assert c == py
            if cls is ExactSeenSet:
                assert set(c) == set(page) & set(absent)  # exact: every stored URL is seen
        seen_set.close()


def test_the_c_twin_finds_the_python_bit_positions(monkeypatch, tmp_path: Path):
    """Bits set by the Python positions (128-bit sums, an odd number of bits) are the ones the C
    twin tests: every added URL is seen by it, and a URL with one clear bit is missing."""
    for functions in (1, 2, 7):
        seen_set = BitmapSeenSet(tmp_path / f"{functions}.bitmap", (1 << 33) + 17, functions)
        added = urls(300)
        seen_set.add(added)
        seen_set._recent.clear()
        c, py = both_twins(monkeypatch, seen_set, added + urls(300, start=300))
        assert c == py == urls(300, start=300)
        seen_set.close()


def test_long_urls_stay_out_of_the_memo_and_are_still_seen(tmp_path: Path):
    seen = ExactSeenSet(tmp_path / "seen.bitmap", 1 << 20, cache=1 << 20)
    long = [f"http://h.test/{'a' * RECENT_KEY_MAX}/{i}" for i in range(20)]
    short = urls(20)
    assert offer(seen, long + short) == 40  # each page with long and short URLs
    assert offer(seen, short) == 0  # a page of short ones only
    assert seen.missing(long + short) == []  # the long ones from the table
    memo = seen.bitmap._recent | seen.bitmap._older
    assert set(short) <= memo and not memo & set(long)  # memory: at most RECENT_KEY_MAX a key
    seen.close()


def test_bitmap_mode_reports_its_expected_loss(tmp_path: Path):
    seen = BitmapSeenSet(tmp_path / "b.bitmap", 1 << 14)
    lost = 30_000 - offer(seen, urls(30_000))
    assert 0.5 < seen.fill() < 1
    assert seen.expected_loss() == pytest.approx(lost, rel=0.1)


def test_a_bitmap_only_state_dir_keeps_its_urls_seen(tmp_path: Path):
    path = tmp_path / "seen.bitmap"
    old = BitmapSeenSet(path, 1 << 20)  # written by larbinpy before the exact store
    offer(old, urls(500))
    old.close()
    seen = open_seen_set(path, 1 << 20, 1, "exact")
    assert seen.missing(urls(500)) == []
    later = urls(500, start=500)
    assert offer(seen, later) == 500
    seen.close()
    seen = open_seen_set(path, 1 << 20, 1, "exact")
    assert seen.missing(urls(1000)) == []
    seen.close()


def test_switching_to_bitmap_and_back_keeps_what_was_seen(tmp_path: Path):
    path = tmp_path / "seen.bitmap"
    seen = open_seen_set(path, TINY, 1, "exact")
    offer(seen, urls(300))
    seen.close()
    seen = open_seen_set(path, TINY, 1, "bitmap")  # the bits are the whole seen-set now
    offer(seen, urls(300, start=300))
    seen.close()
    seen = open_seen_set(path, TINY, 1, "exact")
    assert seen.missing(urls(600)) == []
    seen.close()


# --- real crawls ---

def big_site(host: str, ip: str, pages: int, delay: float = 0.0) -> Site:
    """`pages` distinct pages, page i linking to 10i+1..10i+10, its parent and the home page."""
    content = {}
    for i in range(pages):
        links = [f"/p{j}.html" for j in range(10 * i + 1, 10 * i + 11) if j < pages]
        links += [f"/p{max(i - 1, 0) // 10}.html", "/p0.html"]
        content[f"/p{i}.html"] = Page(html(*links).body, delay=delay)
    content["/"] = html("/p0.html")
    return Site(host, ip, content)


@pytest.mark.parametrize("mode", ["exact", "bitmap"])
async def test_a_crawl_with_a_tiny_hash_set(make_web, mode: str):
    site = big_site("many.test", "127.0.0.2", 3000)
    tw = await make_web([site])
    crawler = await tw.crawl(f"startUrl {tw.url('many.test')}\ndepthInSite 100\n"
                             f"hashSize 2^10\nseenSet {mode}\n", timeout=240)
    fetched = Counter(tw.pages_fetched())
    expected = {tw.url(site.host, p) for p in site.pages}
    status = snapshot(crawler)["seen_set"]
    metrics = metrics_text(snapshot(crawler))[0].decode()
    assert status["kind"] == mode and status["bitmap_fill"] > 0.5
    assert "larbinpy_seen_expected_loss" in metrics
    if mode == "exact":
        assert set(fetched) == expected  # every one of the 3000 distinct pages
        assert max(fetched.values()) == 1
        assert status["expected_loss"] < 1e-9
    else:
        assert len(fetched) < len(expected) // 2  # larbin: 1024 bits cannot tell 3000 apart
        assert status["expected_loss"] > 100  # and the status page says so


def slow_web() -> list[Site]:
    """Three sites of 200 slowish pages."""
    return [big_site(f"k{n}.test", f"127.0.0.{n + 2}", 200, delay=0.01) for n in range(3)]


async def start(tw, conf: Path) -> asyncio.subprocess.Process:
    """The crawler as a separate process (so it can be killed for real)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), "-q",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=tw.tmp,
    )


async def test_kill_9_loses_and_repeats_no_seen_decision(make_web):
    tw = await make_web(slow_web())
    seeds = "".join(f"startUrl {tw.url(f'k{n}.test')}\n" for n in range(3))
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(
        f"exitAtEnd\ndepthInSite 100\npagesConnexions 3\ncheckpointInterval 0.2\n"
        f"hashSize 2^10\nseenSet exact\n{seeds}"))
    every = sorted(tw.url(s.host, p) for s in slow_web() for p in s.pages)
    seen_before: set[str] = set()
    for k in range(4):
        proc = await start(tw, conf)
        target = len(tw.pages_fetched()) + 40 + 25 * k
        await until(lambda t=target: len(tw.pages_fetched()) >= t, "pages fetched")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        seen = open_seen_set(tw.tmp / "state" / "seen.bitmap", TINY, 1, "exact")
        seen_now = set(every) - set(seen.missing(every))
        seen.close()
        # every URL fetched so far was queued, then marked seen: still seen after the kill
        assert set(tw.pages_fetched()) <= seen_now
        # nothing marked seen by an earlier run was forgotten (it would be admitted again)
        assert seen_before <= seen_now
        seen_before = seen_now
    proc = await start(tw, conf)
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    # re-fetches after a kill come from replaying the queues since the last checkpoint (see
    # test_resume), not from the seen-set; what the seen-set decides shows as every page fetched
    assert set(tw.pages_fetched()) == set(every)


def test_check_config_warns_when_the_bitmap_alone_is_small(tmp_path: Path):
    conf = tmp_path / "c.conf"
    reports = {}
    for line in ("seenSet bitmap\nhashSize 2^24", "seenSet bitmap\nhashSize 2^34",
                 "seenSet exact\nhashSize 2^24"):
        conf.write_text(line + "\n")
        result = subprocess.run([sys.executable, "-m", "larbinpy", "check-config", "-c",
                                 str(conf)], capture_output=True, text=True, check=True)
        reports[line] = result.stdout
    # 10^7 URLs in 2^24 bits: 1 - e^(-10^7 / 2^24) = 44.9% of new URLs dropped
    assert "WARNING: hashSize 16777216 is small" in reports["seenSet bitmap\nhashSize 2^24"]
    assert "drops 44.9% of new URLs" in reports["seenSet bitmap\nhashSize 2^24"]
    assert "WARNING" not in reports["seenSet bitmap\nhashSize 2^34"]
    assert "WARNING" not in reports["seenSet exact\nhashSize 2^24"]
    assert "no new URL is lost" in reports["seenSet exact\nhashSize 2^24"]


def test_bench_seen_counts_what_each_seen_set_loses(tmp_path: Path):
    from larbinpy.bench.measure import seen_bench

    (tmp_path / "e").mkdir()
    (tmp_path / "b").mkdir()
    exact = seen_bench(20_000, tmp_path / "e", "exact", bits=1 << 14)
    bitmap = seen_bench(20_000, tmp_path / "b", "bitmap", bits=1 << 14)
    assert exact["lost"] == 0 and exact["admitted"] == 20_000
    assert bitmap["lost"] > 1000  # 20,000 URLs in 16,384 bits
    assert exact["links_tested"] == bitmap["links_tested"] > 3 * 20_000
    assert exact["us_per_link"] > 0 and exact["peak_rss_mb"] > 0


def test_hash_size_defaults_small_only_where_the_fingerprints_decide():
    from larbinpy.config import parse_config

    assert parse_config("").hash_size == 1 << 27  # exact: the bitmap is a filter (16 MiB)
    assert parse_config("seenSet bitmap\n").hash_size == 1 << 30  # its fill is the loss
    # a cluster node's seen-set is always exact (Redis's cache), whatever seenSet says
    assert parse_config("cluster redis://127.0.0.1:6379/0\n").hash_size == 1 << 27
    assert parse_config("cluster redis://127.0.0.1:6379/0\nseenSet bitmap\n").hash_size == 1 << 27
    assert parse_config("seenSet bitmap\nhashSize 2^20\n").hash_size == 1 << 20
