"""The recrawl schedule on disk (frontier/schedule.py): real files, and a real process killed."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from larbinpy.frontier import schedule as sched
from larbinpy.frontier.schedule import Schedule, Visit, lm_epoch, lm_text

REPO = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000.0


def page(i: int, due: float, rng: random.Random | None = None) -> Visit:
    """A page as the synthetic web has them: most with an ETag and a Last-Modified."""
    rng = rng or random.Random(i)
    etag = f'"{rng.getrandbits(32):x}-{rng.getrandbits(20):x}"' if i % 10 < 8 else None
    lm = lm_text(int(T0) - rng.randrange(10**7)) if i % 10 < 7 else None
    return Visit(f"http://h{i % 9973:05d}.web.test/sec{i % 7}/p{i}.html", due, due - 3600,
                 etag, lm, rng.randbytes(20), due - 7200, 200, i % 5, i % 3, i % 2,
                 rng.randbytes(8))


def drain(s: Schedule, until: float, step: float = 7.0, limit: int = 10**9) -> list[Visit]:
    """Pop everything due by `until`, advancing the clock by `step`; checks none is early."""
    out, t = [], T0
    while t <= until:
        got = s.pop_due(t, limit)
        assert all(v.due <= t for v in got)
        out += got
        t += step
    return out


def same(a: Visit, b: Visit) -> bool:
    """Equal records (times kept to the millisecond)."""
    return (a.url, a.etag, a.last_modified, a.digest, a.status, a.depth, a.priority, a.tag,
            a.stats) == (b.url, b.etag, b.last_modified, b.digest, b.status, b.depth,
                         b.priority, b.tag, b.stats) and all(
        abs(x - y) < 1e-3 for x, y in ((a.due, b.due), (a.fetched_at, b.fetched_at),
                                       (a.captured_at, b.captured_at)))


def test_last_modified_is_an_epoch_only_when_it_round_trips() -> None:
    assert lm_epoch("Tue, 01 Dec 2026 08:59:47 GMT") == 1796115587
    assert lm_text(1796115587) == "Tue, 01 Dec 2026 08:59:47 GMT"
    assert lm_epoch("Wed, 01 Dec 2026 08:59:47 GMT") is None  # wrong weekday
    assert lm_epoch("Tue, 1 Dec 2026 08:59:47 GMT") is None
    assert lm_epoch("Tuesday, 01-Dec-26 08:59:47 GMT") is None


def test_blocks_round_trip_every_field() -> None:
    rng = random.Random(3)
    visits = [page(i, T0 + rng.uniform(0, 100), rng) for i in range(300)]
    visits[5].last_modified = "yesterday, about noon"
    visits[6].etag = 'W/"weak ünïcode"'
    visits[7].digest, visits[7].stats, visits[7].fetched_at = b"", b"", 0.0
    visits[8].last_modified = lm_text(0x5F3A1B2C)
    visits[8].etag = '"5f3a1b2c-1b2c"'  # nginx: the mtime in hex, then the size
    visits[9].last_modified, visits[9].etag = lm_text(0x5F3A1B2C), '"\x00-5f3a1b2c"'
    rng.shuffle(visits)
    block = sched.encode_block(visits)
    n, body = sched._HEAD.unpack_from(block)[1], block[sched._HEAD.size:]
    visits.sort(key=lambda v: v.url)  # a block keeps its records in URL order
    assert [v.url for v in visits] == sched.block_urls(body, n)
    assert all(same(a, b) for a, b in zip(visits, sched.decode_block(body, n), strict=True))


def test_pages_come_out_when_due_earliest_bucket_first(tmp_path: Path) -> None:
    s = Schedule(tmp_path, granularity=5.0)
    rng = random.Random(1)
    visits = [page(i, T0 + rng.uniform(0, 3000)) for i in range(3000)]
    s.put_many(visits)
    assert len(s) == 3000
    s.flush()
    got = drain(s, T0 + 3100)
    assert sorted(v.url for v in got) == sorted(v.url for v in visits)
    buckets = [int(v.due * 1000) // 5000 for v in got]
    assert buckets == sorted(buckets)
    by_url = {v.url: v for v in visits}
    assert all(same(v, by_url[v.url]) for v in got)
    assert s.pop_due(T0 + 10**6, 10) == []


def test_a_page_put_again_comes_out_once_with_its_new_history(tmp_path: Path) -> None:
    s = Schedule(tmp_path, granularity=1.0)
    s.put_many(page(i, T0 + 100 + i) for i in range(50))
    s.flush()
    later = [page(i, T0 + 2000, random.Random(99)) for i in range(0, 50, 2)]
    sooner = [page(i, T0 + 10) for i in range(1, 50, 4)]
    s.put_many(later + sooner)
    s.flush()
    s.put(page(3, T0 + 500))  # twice before a flush: the last put wins
    assert len(s) == 50
    got = drain(s, T0 + 2100)
    urls = [v.url for v in got]
    assert len(urls) == len(set(urls)) == 50
    due = {v.url: v.due for v in got}
    assert due[later[0].url] == pytest.approx(T0 + 2000)
    assert due[sooner[1].url] == pytest.approx(T0 + 10)
    assert due[page(3, 0).url] == pytest.approx(T0 + 500)
    assert same(next(v for v in got if v.url == later[1].url), later[1])


def test_get_force_and_drop(tmp_path: Path) -> None:
    s = Schedule(tmp_path, granularity=2.0)
    visits = [page(i, T0 + 86400 * (1 + i % 20)) for i in range(500)]
    s.put_many(visits)
    assert same(s.get(visits[7].url), visits[7])  # still buffered
    s.flush()
    assert same(s.get(visits[8].url), visits[8])
    assert s.get("http://nowhere.test/") is None
    assert s.force(visits[9].url, T0 + 30)
    assert not s.force("http://nowhere.test/", T0)
    assert s.drop(visits[10].url)
    assert not s.drop("http://nowhere.test/")
    assert len(s) == 499
    got = drain(s, T0 + 40, step=1.0)
    assert [v.url for v in got] == [visits[9].url]
    assert got[0].due <= T0 + 30 and got[0].etag == visits[9].etag
    s.put(visits[9])  # rescheduled after the fetch
    rest = drain(s, T0 + 86400 * 21, step=3600.0)
    assert sorted(v.url for v in rest) == sorted(v.url for i, v in enumerate(visits) if i != 10)


def test_figures_count_what_is_due_and_how_late(tmp_path: Path) -> None:
    s = Schedule(tmp_path, granularity=1.0)
    s.put_many(page(i, T0 + i) for i in range(100))
    s.flush()
    s.pop_due(T0 + 1, 1)  # spreads the far bucket
    fig = s.figures(T0 + 50.5)
    assert fig.scheduled == 100
    assert 49 <= fig.due_now <= 51
    assert 47 <= fig.overdue <= 49
    assert 49 <= fig.max_lateness_s <= 50  # page 1, due at T0 + 1 (page 0 was popped)


def test_reopen_pops_again_what_was_in_flight_and_nothing_put_since(tmp_path: Path) -> None:
    s = Schedule(tmp_path, granularity=1.0)
    s.put_many(page(i, T0 + i % 100) for i in range(1000))
    s.flush()
    first = s.pop_due(T0 + 50, 300)
    for v in first[:200]:  # fetched and put again
        s.put(page(int(v.url.rsplit("p", 1)[1][:-5]), T0 + 5000))
    s.flush()
    saved = s.position()
    s.sync()
    s.release(saved)
    s.close()  # the other 100 were in flight: not put again
    s = Schedule(tmp_path, saved)
    again = drain(s, T0 + 50)
    flying = {v.url for v in first[200:]}
    assert flying <= {v.url for v in again}
    assert not {v.url for v in first[:200]} & {v.url for v in again}
    rest = drain(s, T0 + 6000, step=50.0)
    urls = [v.url for v in again + rest]
    assert len(urls) == len(set(urls)) == 1000


def test_a_page_long_in_flight_holds_no_files_and_a_restart_pops_it_again(
        tmp_path: Path) -> None:
    """Issue 45: one revisit waiting for its site while time runs on held every bucket file
    since (and their records in memory) until it was fetched. Now a checkpoint copies it
    forward: the files kept span FAN buckets, and a restart still pops it, history intact."""
    s = Schedule(tmp_path, granularity=1.0)
    slow = page(0, T0)
    s.put(slow)
    s.flush()
    assert [v.url for v in s.pop_due(T0 + 2, 10)] == [slow.url]  # in flight from now on
    t = T0
    for step in range(1, 11):  # 10 checkpoints, 50 buckets apart: 500 buckets of revisits
        for i in range(50):
            s.put(page(step * 100 + i, t + i))
        s.flush()
        t += 50
        for v in s.pop_due(t, 10**6):  # fetched at once: put again far ahead
            s.put(replace(v, due=t + 10**5))
        pos = s.position()
        s.sync()
        s.release(pos)
        files = list(tmp_path.glob("n*.blk"))
        assert len(files) <= sched.FAN + 51, step  # not one a bucket since the slow page
    assert s.get(slow.url) == slow  # the run goes on with the record it popped
    s.close()
    s = Schedule(tmp_path, pos)  # a kill: the slow page was never fetched
    again = s.pop_due(t + 2, 10**6)
    assert [v.url for v in again] == [slow.url] and same(again[0], slow)


KILL_CHILD = """
import json, os, random, sys
sys.path.insert(0, "tests")
from pathlib import Path
from test_schedule import T0, page
from larbinpy.frontier.schedule import Schedule
directory, report = Path(sys.argv[1]), sys.argv[2]
s = Schedule(directory, granularity=1.0, buffer_records=500)
rng, n, t = random.Random(int(sys.argv[3])), 0, T0
fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
while True:
    for _ in range(200):  # new pages
        s.put(page(n, t + rng.uniform(0, 400), rng))
        n += 1
    t += 5
    for v in s.pop_due(t, 150):  # revisits: put again later
        s.put(page(int(v.url.rsplit("p", 1)[1][:-5]), t + rng.uniform(50, 400), rng))
    pos = s.position()
    s.flush()
    os.write(fd, (json.dumps({"n": n, "t": t, "pos": pos}) + "\\n").encode())
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_while_writing_loses_no_flushed_page(tmp_path: Path, seed: int) -> None:
    directory, report = tmp_path / "schedule", tmp_path / "report"
    child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(directory), str(report),
                              str(seed)], cwd=REPO, stderr=subprocess.PIPE)
    want = 20 + 15 * seed  # rounds written before the kill: it lands mid-write at some point
    deadline = time.monotonic() + 60
    while not (report.exists() and report.read_bytes().count(b"\n") >= want):
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            raise AssertionError(f"the writer child did not report {want} rounds in 60 s")
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    last = json.loads(report.read_bytes().split(b"\n")[-2])
    s = Schedule(directory, tuple(last["pos"]))
    assert len(s) >= last["n"]
    got = drain(s, last["t"] + 1000, step=5.0)
    urls = [v.url for v in got]
    assert len(urls) == len(set(urls))  # no page twice
    every = {page(i, 0).url for i in range(last["n"])}
    assert every <= set(urls)  # none flushed was lost


def test_bytes_a_page_on_disk(tmp_path: Path) -> None:
    """Pages as the bench makes them (URLs of the synthetic web, nginx ETags on 80%,
    Last-Modified on 85%, digests, estimator states), enough of them that blocks are whole
    and the index is well loaded, as at scale: at most 64 bytes a page, index included."""
    from larbinpy.bench.schedbench import _stats_pool, make_page

    rng = random.Random(5)
    pool, n = _stats_pool(rng, 256), 50_000
    s = Schedule(tmp_path, granularity=60.0)
    s.put_many(make_page(j, n // 100, T0 + rng.uniform(3600, 2 * 86400), rng, pool)
               for j in range(n))
    s.sync()
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert size / n <= 64, size / n
    assert len(s) == n


SPREAD_CHILD = """
import os, sys
sys.path.insert(0, "tests")
from pathlib import Path
from test_schedule import T0, page
from larbinpy.frontier.schedule import Schedule
s = Schedule(Path(sys.argv[1]), granularity=1.0)
start = T0 // 64 * 64  # the start of a far bucket (64 fine buckets of 1 s)
s.put_many(page(i, start + (i % 6000) / 100) for i in range(30_000))
s.flush()
with open(sys.argv[2], "w") as f:
    f.write("ready\\n")
s.pop_due(start + 1, 10)  # spreads the far bucket over its 64 fine ones
with open(sys.argv[2], "a") as f:
    f.write("spread\\n")
"""


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_kill_9_while_spreading_a_far_bucket_loses_and_doubles_nothing(
        tmp_path: Path, seed: int) -> None:
    directory, report = tmp_path / "schedule", tmp_path / "report"
    child = subprocess.Popen([sys.executable, "-c", SPREAD_CHILD, str(directory), str(report)],
                             cwd=REPO, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (report.exists() and report.read_text().startswith("ready")):
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            raise AssertionError("the spreading child did not report ready in 60 s")
        time.sleep(0.005)
    time.sleep(random.Random(seed).uniform(0.0, 1.5))  # the kill lands in it (~1 s) or after
    child.send_signal(signal.SIGKILL)
    child.wait()
    s = Schedule(directory)
    got = drain(s, T0 // 64 * 64 + 200, step=1.0)
    urls = [v.url for v in got]
    assert len(urls) == len(set(urls)) == 30_000


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_operations_match_a_model(tmp_path: Path, seed: int) -> None:
    """Puts, pops, forces, drops, flushes and clean reopens in random order, against a dict:
    nothing comes out early or twice, nothing due stays in, the last put's history wins."""
    rng = random.Random(seed)
    s = Schedule(tmp_path, granularity=1.0, buffer_records=rng.choice([7, 50, 10_000]))
    model: dict[str, Visit] = {}  # scheduled pages, not in flight
    flying: dict[str, Visit] = {}  # popped, not put again yet
    # in flight at a restart, not popped since: its record may be a copy in a later bucket
    # (`Schedule._rehome`), so a force puts it due at the reader's bucket (still due now)
    restored: set[str] = set()
    now = T0
    for step in range(1500):
        op = rng.random()
        if op < 0.45:
            url_i = rng.randrange(400)
            v = page(url_i, now + rng.choice([0.0, rng.uniform(0, 30), rng.uniform(0, 300)]),
                     rng)
            if v.url in model or v.url in flying or rng.random() < 0.5:
                s.put(v)
                model[v.url] = v
                flying.pop(v.url, None)
                restored.discard(v.url)
        elif op < 0.75:
            now += rng.uniform(0, 8)
            limit = rng.choice([3, 1000])
            got = s.pop_due(now, limit)
            for v in got:
                assert v.url in model, "popped a page not scheduled (or twice)"
                assert v.due <= now
                want = model.pop(v.url)
                assert same_but_due(v, want) or (v.url in restored and same_but_due(
                    v, replace(want, due=v.due)))
                restored.discard(v.url)
                flying[v.url] = v
            if len(got) < limit:  # all that was due came out, to the granularity
                assert not [u for u, v in model.items() if v.due < now - 2.0]
        elif op < 0.8 and model:
            url = rng.choice(sorted(model))
            assert s.force(url, now)
            model[url] = replace(model[url], due=min(model[url].due, now))
        elif op < 0.85 and (model or flying):
            url = rng.choice(sorted(model.keys() | flying.keys()))
            assert s.drop(url)
            model.pop(url, None)
            flying.pop(url, None)
        elif op < 0.9:
            s.flush()
        elif op < 0.93:
            pos = s.position()
            s.sync()
            s.release(pos)
            s.close()
            s = Schedule(tmp_path, pos)
            model.update(flying)  # a restart pops the pages in flight again
            restored |= flying.keys()
            flying.clear()
        elif flying:
            url = rng.choice(sorted(flying))  # fetched: put again
            v = replace(flying.pop(url), due=now + rng.uniform(0, 100))
            s.put(v)
            model[url] = v
        assert len(s) == len(model) + len(flying), step
    s.flush()
    now += 400
    for v in s.pop_due(now, 10**9):
        assert same_but_due(v, model.pop(v.url))
    assert not model  # everything due came out


def same_but_due(got: Visit, want: Visit) -> bool:
    """The same history, due when asked or at most two buckets later (a put never shares
    the bucket of the page's previous record: it moves on)."""
    return same(replace(got, due=want.due), want) and want.due - 1e-3 <= got.due <= want.due + 2


def test_the_schedule_bench_runs_and_makes_its_folder(tmp_path: Path) -> None:
    from conftest import bench_json

    where = tmp_path / "not" / "there"
    got = bench_json("--schedule", "300", "--dir", str(where))["schedule"]
    assert where.is_dir() and not any(where.iterdir())  # made, and its files removed after
    assert got["pages"] == got["scheduled"] == 300
    assert got["pops_per_s"] > 0 and got["puts_per_s"] > 0
    assert got["bytes_per_page_after_revisits"] > 0 and got["peak_rss_mb"] > 0
    assert got["revisits"] >= 300


def test_the_schedule_bench_pops_only_the_revisits_asked(tmp_path: Path) -> None:
    from conftest import bench_json

    got = bench_json("--schedule", "3000", "--revisits", "500", "--dir", str(tmp_path))
    assert got["schedule"]["scheduled"] == 3000  # every page still scheduled
    assert 500 <= got["schedule"]["revisits"] < 3000

