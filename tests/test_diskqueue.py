"""The on-disk queues: order, exact counts, cursors, crash recovery, bounded memory."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from larbinpy.frontier import diskqueue
from larbinpy.frontier.diskqueue import DiskFrontier, SegmentFifo, SiteSpill
from larbinpy.frontier.joblines import decode_job, encode_jobs
from larbinpy.frontier.state import StateDir, StateError
from larbinpy.records import Job, JobKind

REPO = Path(__file__).resolve().parent.parent


def make(n: int, start: int = 0, priority: int = 0, host: str = "h") -> list[Job]:
    """n distinct jobs, numbered from start."""
    return [Job(f"http://{host}.test/p{i}", i % 7, priority, i % 2)
            for i in range(start, start + n)]


def drain(queue: SegmentFifo | DiskFrontier) -> list[Job]:
    """Pop until empty."""
    out = []
    while (job := queue.pop()) is not None:
        out.append(job)
    return out


def segments(directory: Path, name: str = "q") -> list[Path]:
    """Segment files of one FIFO, oldest first."""
    return sorted(directory.glob(f"{name}.*.seg"), key=lambda p: int(p.name.split(".")[1]))


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny segments and buffers, so a few hundred jobs cross many files and windows."""
    monkeypatch.setattr(diskqueue, "SEGMENT_JOBS", 100)
    monkeypatch.setattr(diskqueue, "BUFFER_BYTES", 1000)
    monkeypatch.setattr(diskqueue, "READ_BYTES", 512)
    monkeypatch.setattr(diskqueue, "SCAN_BYTES", 700)
    monkeypatch.setattr(diskqueue, "SPILL_SEGMENT_BYTES", 2000)


# --- SegmentFifo: order and counts ---


@pytest.mark.usefixtures("small")
def test_fifo_keeps_order_and_exact_len_across_many_segment_rotations(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    rng = random.Random(1)
    expected: list[Job] = []
    got: list[Job] = []
    pushed = 0
    while pushed < 5000:
        k = rng.randint(1, 300)
        batch = make(k, pushed)
        fifo.push(batch)
        expected.extend(batch)
        pushed += k
        if rng.random() < 0.3:
            fifo.flush()
        for _ in range(rng.randint(0, 250)):
            job = fifo.pop()
            if job is None:
                break
            got.append(job)
        assert len(fifo) == len(expected) - len(got)
    got.extend(drain(fifo))
    assert got == expected
    assert len(fifo) == 0 and fifo.pop() is None
    assert len(segments(tmp_path)) >= 20  # rotated many times; nothing deleted without release


def test_pop_sees_pushed_jobs_that_are_not_flushed_yet(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(3))
    assert fifo.pop() == make(3)[0]
    fifo.push(make(2, 3))
    assert drain(fifo) == make(5)[1:]


def test_a_generator_of_many_jobs_is_pushed_whole_and_in_order(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(job for job in make(5000))
    assert len(fifo) == 5000
    assert drain(fifo) == make(5000)


def test_urls_with_tabs_and_non_ascii_survive_the_round_trip(tmp_path: Path) -> None:
    jobs = [Job("http://h.test/a\tb", 1, 2, 3), Job("http://h.test/é\udcff", -1, 0, 0)]
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(jobs)
    fifo.flush()
    assert list(SegmentFifo(tmp_path, "q").jobs()) == jobs
    assert drain(fifo) == jobs


TAGGED = [Job("http://h.test/t", 3, 1, 2, tag=42), Job("http://h.test/s.xml", 2, 0, 0, kind=1),
          Job("http://h.test/r", 1, 0, 0, tag=-7, retries=2), Job("http://h.test/plain", 5)]


def test_tags_kinds_and_retries_survive_fifo_spill_and_checkpoint(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path / "f", "q")
    fifo.push(TAGGED)
    fifo.flush()
    assert list(SegmentFifo(tmp_path / "f", "q").jobs()) == TAGGED
    assert drain(fifo) == TAGGED
    spill = SiteSpill(tmp_path / "s")
    spill.push("http://h.test", TAGGED)
    spill.flush()
    assert spill.pop_many("http://h.test", 10) == TAGGED
    state = StateDir(str(tmp_path / "st"), {}, scratch=True)
    state.write_checkpoint({}, {}, TAGGED)
    assert state.load().jobs == TAGGED


def test_old_job_lines_still_parse_and_untagged_lines_are_unchanged(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push([Job("http://h.test/plain", 5, 1, 2)])
    fifo.flush()
    name = next(p for p in tmp_path.iterdir() if p.suffix == ".seg")
    assert name.read_bytes() == b"1\t5\t2\thttp://h.test/plain\n"  # the old format, as is
    with open(name, "ab") as f:  # a line written by an older larbinpy, and a tagged one
        f.write(b"0\t4\t0\thttp://h.test/old\n0\t4\t1:9:0:0\thttp://h.test/new\n")
    assert list(SegmentFifo(tmp_path, "q").jobs())[1:] == [
        Job("http://h.test/old", 4, 0, 0), Job("http://h.test/new", 4, 0, 1, tag=9)]


# The bytes every larbinpy so far wrote for TAGGED: FIFO segments, spill files and checkpoints
# all hold these lines, so state written before a change of this code must still load after it.
TAGGED_LINES = (b"1\t3\t2:42:0:0\thttp://h.test/t\n0\t2\t0:0:1:0\thttp://h.test/s.xml\n"
                b"0\t1\t0:-7:0:2\thttp://h.test/r\n0\t5\t0\thttp://h.test/plain\n")


def test_fifo_spill_and_checkpoint_write_the_same_job_lines(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path / "f", "q")
    fifo.push(TAGGED)
    fifo.flush()
    assert segments(tmp_path / "f")[0].read_bytes() == TAGGED_LINES
    spill = SiteSpill(tmp_path / "s")
    spill.push("h.test", TAGGED)
    spill.flush()
    (spill_file,) = (tmp_path / "s").glob("*.spill")
    assert spill_file.read_bytes().endswith(TAGGED_LINES)  # after the file's header line
    state = StateDir(str(tmp_path / "st"), {}, scratch=True)
    state.write_checkpoint({0: (0, 0)}, {}, TAGGED)
    body = b'{"frontier":{"0":[0,0]},"spill":{}}\n' + TAGGED_LINES
    assert (tmp_path / "st" / "checkpoint").read_bytes() == (
        b"larbinpy-checkpoint 2\n" + body + f"end 5 {zlib.crc32(body)}\n".encode())


def test_a_checkpoint_written_by_hand_in_the_format_loads(tmp_path: Path) -> None:
    body = b'{"frontier":{"1":[3,120]},"spill":{"h.test":[0,40]}}\n' + TAGGED_LINES
    state = StateDir(str(tmp_path), {}, scratch=True)
    (tmp_path / "checkpoint").write_bytes(
        b"larbinpy-checkpoint 2\n" + body + f"end 5 {zlib.crc32(body)}\n".encode())
    saved = state.load()
    assert (saved.frontier, saved.spill, saved.jobs) == ({1: (3, 120)}, {"h.test": (0, 40)}, TAGGED)


@given(st.lists(st.builds(
    Job, st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",))),
    st.integers(-2**40, 2**40), st.integers(-9, 9), st.integers(0, 20), st.integers(-5, 5),
    st.sampled_from(JobKind), st.integers(0, 9))))
def test_every_job_line_decodes_to_the_job_it_encodes(jobs: list[Job]) -> None:
    lines = encode_jobs(jobs).encode("utf-8", "surrogateescape").split(b"\n")
    assert lines[-1] == b"" and [decode_job(line) for line in lines[:-1]] == jobs


_NO_TAB = st.characters(blacklist_characters="\t\n", blacklist_categories=("Cs",))


@given(st.lists(st.builds(
    Job, st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",))),
    st.integers(-2**40, 2**40), st.integers(-9, 9), st.integers(0, 20), st.integers(-5, 5),
    st.sampled_from(JobKind), st.integers(0, 9), st.none() | st.text(_NO_TAB))))
def test_a_job_found_on_a_page_keeps_that_page_through_its_line(jobs: list[Job]) -> None:
    lines = encode_jobs(jobs).encode("utf-8", "surrogateescape").split(b"\n")
    assert [decode_job(line) for line in lines[:-1]] == jobs


def test_lines_written_before_via_existed_still_read() -> None:
    """Older state: plain and tagged lines, a tab in the URL; no via."""
    assert decode_job(b"1\t4\t0\thttp://h.test/a\tb") == Job("http://h.test/a\tb", 4, 1)
    assert decode_job(b"2\t3\t1:7:1:2\thttp://h.test/") == Job(
        "http://h.test/", 3, 2, 1, 7, JobKind.SITEMAP, 2)


def test_fifo_files_with_via_lines_reopen_and_replay(tmp_path: Path) -> None:
    """The files' line check on open accepts job lines with a via field."""
    jobs = [Job(f"http://h.test/p{i}", 3, 0, i % 2, i % 3, via="http://h.test/") for i in range(9)]
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(jobs)
    fifo.flush()
    fifo.close()
    again = SegmentFifo(tmp_path, "q")
    assert [again.pop() for _ in jobs] == jobs


@pytest.mark.parametrize("line", [b"", b"1\t2\t3", b"x\t2\t3\thttp://h.test/",
                                  b"1\t2\t3:4\thttp://h.test/", b"1\t2\t3:4:5:x\thttp://h.test/"])
def test_a_malformed_job_line_is_a_value_error(line: bytes) -> None:
    with pytest.raises(ValueError):
        decode_job(line)


def test_damage_after_open_stops_pop_at_the_damaged_line(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(3))
    fifo.flush()
    seg = segments(tmp_path)[0]
    data = bytearray(seg.read_bytes())
    second = data.index(b"\n") + 1
    data[second:second + 1] = b"x"
    seg.write_bytes(bytes(data))  # the file was checked when the FIFO opened: pop finds it
    assert fifo.pop() == make(1)[0]
    with pytest.raises(StateError, match=rf"{seg.name}: malformed job line at byte {second};"):
        fifo.pop()


def test_a_url_with_a_newline_is_refused(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    with pytest.raises(ValueError):
        fifo.push([Job("http://h.test/a\nb", 1)])
    assert len(fifo) == 0


# --- cursors and deletion ---


@pytest.mark.usefixtures("small")
def test_reopen_at_a_saved_cursor_yields_exactly_the_jobs_after_it(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(1000))
    popped = [fifo.pop() for _ in range(347)]
    assert popped == make(347)
    cursor = fifo.position()
    fifo.push(make(10, 1000))
    fifo.flush()
    again = SegmentFifo(tmp_path, "q", cursor)
    assert len(again) == 663
    assert drain(again) == make(663, 347)
    fifo.restore(cursor)
    assert len(fifo) == 663 and fifo.pop() == make(1, 347)[0]


@pytest.mark.usefixtures("small")
def test_consumed_segments_are_deleted_only_on_release(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(1000))
    early = fifo.position()
    for _ in range(550):
        fifo.pop()
    cursor = fifo.position()
    before = segments(tmp_path)
    assert len(before) >= 10 and cursor[0] == 5  # 100 jobs a segment
    fifo.release(early)  # the durable checkpoint is older: nothing may go
    assert segments(tmp_path) == before
    fifo.release(cursor)
    assert segments(tmp_path) == before[5:]
    assert drain(SegmentFifo(tmp_path, "q", cursor)) == make(450, 550)


def test_release_never_deletes_what_is_still_to_be_popped(tmp_path: Path,
                                                         small: None) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(500))
    fifo.pop()
    fifo.release((99, 0))  # a cursor ahead of ours must not cost jobs
    assert drain(fifo) == make(499, 1)


def test_a_cursor_inside_a_line_or_on_a_missing_segment_is_refused(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(10))
    fifo.flush()
    size = segments(tmp_path)[0].stat().st_size
    # past the data: the file was cut short after the checkpoint; what is left is read
    assert len(SegmentFifo(tmp_path, "q", (0, size + 30))) == 0
    with pytest.raises(StateError, match="line start"):
        SegmentFifo(tmp_path, "q", (0, 3))
    with pytest.raises(StateError, match=r"q\.7\.seg"):
        SegmentFifo(tmp_path, "q", (7, 0))


# --- crashes ---


@pytest.mark.usefixtures("small")
def test_a_second_instance_sees_everything_flushed_without_close(tmp_path: Path) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(777))
    fifo.flush()
    fifo.push(make(5, 777))  # buffered only: a crash now may lose these, and only these
    other = SegmentFifo(tmp_path, "q")
    assert len(other) == 777
    assert drain(other) == make(777)


@pytest.mark.parametrize("tail", [b"3\t2\t0\thttp://h.test/to", b"garbage\n", b"3\t2\n", b"\n"])
def test_a_torn_last_line_is_truncated_on_open_and_nothing_complete_lost(
    tmp_path: Path, small: None, tail: bytes
) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(250))
    fifo.flush()
    last = segments(tmp_path)[-1]
    size = last.stat().st_size
    with open(last, "ab") as f:
        f.write(tail)
    reopened = SegmentFifo(tmp_path, "q")
    assert last.stat().st_size == size
    assert len(reopened) == 250
    reopened.push(make(5, 250))
    assert drain(reopened) == make(255)


@pytest.mark.parametrize("which", [0, -1])
def test_garbage_inside_a_segment_raises_state_error_naming_the_file(
    tmp_path: Path, small: None, which: int
) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(250))
    fifo.flush()
    seg = segments(tmp_path)[which]
    data = bytearray(seg.read_bytes())
    line_start = data.index(b"\n", 100) + 1
    data[line_start:line_start + 3] = b"x?y"
    seg.write_bytes(bytes(data))
    with pytest.raises(StateError, match=rf"{seg.name}: malformed job line at byte {line_start}"):
        SegmentFifo(tmp_path, "q")


@pytest.mark.usefixtures("small")
def test_a_segment_other_than_the_last_cut_mid_line_is_repaired(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fifo = SegmentFifo(tmp_path, "q")
    fifo.push(make(250))
    fifo.flush()
    first = segments(tmp_path)[0]
    whole = len(first.read_bytes().splitlines())
    os.truncate(first, first.stat().st_size - 4)
    again = drain(SegmentFifo(tmp_path, "q"))
    # the torn line is cut, every other job is still there, in order, and the cut is logged
    assert again == make(whole - 1) + make(250 - whole, whole)
    assert first.read_bytes().endswith(b"\n")
    assert "q.0.seg: cut back" in caplog.text


FIFO_CHILD = """
import os, random, sys
from pathlib import Path
from larbinpy.frontier import diskqueue
from larbinpy.records import Job
diskqueue.SEGMENT_JOBS = 5000
fifo = diskqueue.SegmentFifo(Path(sys.argv[1]), "q")
report = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
rng, i = random.Random(int(sys.argv[3])), 0
while True:
    k = rng.randint(1, 3000)
    fifo.push(Job(f"http://h{j}.test/" + "x" * (j % 50), j % 9, 0, 0) for j in range(i, i + k))
    fifo.flush()
    i += k
    os.write(report, b"%d\\n" % i)  # only after flush() returned
"""

SPILL_CHILD = """
import os, random, sys
from pathlib import Path
from larbinpy.frontier import diskqueue
from larbinpy.records import Job
diskqueue.SPILL_SEGMENT_BYTES = 20000
spill = diskqueue.SiteSpill(Path(sys.argv[1]))
report = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
rng, i = random.Random(int(sys.argv[3])), 0
while True:
    for _ in range(rng.randint(1, 300)):
        spill.push(f"http://s{i % 5}.test", [Job(f"http://s{i % 5}.test/{i}", 1, 0, 0)])
        i += 1
    spill.flush()
    os.write(report, b"%d\\n" % i)
"""


def run_and_kill(script: str, tmp_path: Path, seed: int) -> int:
    """Run a writer child, SIGKILL it at a random moment; how many jobs it reported flushed."""
    data, report = tmp_path / "data", tmp_path / "report"
    child = subprocess.Popen([sys.executable, "-c", script, str(data), str(report), str(seed)],
                             cwd=REPO, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not (report.exists() and report.stat().st_size):
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        if time.monotonic() > deadline:
            child.kill()
            child.wait()
            raise AssertionError("the writer child reported no flushed job in 20 s")
        time.sleep(0.01)
    time.sleep(random.Random(seed).uniform(0.0, 0.4))
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    lines = report.read_bytes().split(b"\n")
    return int(lines[-2])  # the last whole report line (each one is a single write)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kill_9_of_a_pushing_process_loses_no_flushed_job(tmp_path: Path, seed: int) -> None:
    flushed = run_and_kill(FIFO_CHILD, tmp_path, seed)
    fifo = SegmentFifo(tmp_path / "data", "q")
    got = drain(fifo)
    assert len(got) >= flushed > 0
    assert [j.url for j in got] == [f"http://h{j}.test/" + "x" * (j % 50) for j in range(len(got))]
    assert [j.depth for j in got[:100]] == [j % 9 for j in range(100)]


@pytest.mark.parametrize("seed", [4, 5])
def test_kill_9_of_a_spilling_process_loses_no_flushed_job(tmp_path: Path, seed: int) -> None:
    flushed = run_and_kill(SPILL_CHILD, tmp_path, seed)
    spill = SiteSpill(tmp_path / "data")
    assert len(spill) >= flushed > 0
    for s in range(5):
        got = [j.url for j in spill.pop_many(f"http://s{s}.test", 10**9)]
        assert got == [f"http://s{s}.test/{i}" for i in range(s, 5 * len(got), 5)]
        assert len(got) >= (flushed - s + 4) // 5


# --- DiskFrontier ---


def test_frontier_serves_highest_priority_first_and_fifo_within(tmp_path: Path) -> None:
    frontier = DiskFrontier(tmp_path)
    rng = random.Random(7)
    jobs = [Job(f"http://h.test/{i}", 3, rng.choice([-2, 0, 1, 5]), 0) for i in range(3000)]
    for i in range(0, 3000, 250):
        frontier.push(jobs[i:i + 250])
    assert len(frontier) == 3000
    assert frontier.sizes() == {p: sum(j.priority == p for j in jobs) for p in (5, 1, 0, -2)}
    got = drain(frontier)
    assert got == sorted(jobs, key=lambda j: -j.priority)  # sorted() is stable: FIFO within
    assert len(frontier) == 0


@pytest.mark.usefixtures("small")
def test_frontier_reopens_every_priority_at_its_saved_cursor(tmp_path: Path) -> None:
    frontier = DiskFrontier(tmp_path)
    frontier.push(make(300, 0, priority=2) + make(300, 300, priority=0))
    assert [frontier.pop() for _ in range(120)] == make(120, 0, priority=2)
    saved = frontier.position()
    frontier.push(make(50, 600, priority=9))  # a priority born after the checkpoint
    frontier.flush()
    again = DiskFrontier(tmp_path, saved)
    assert len(again) == 180 + 300 + 50
    assert again.sizes() == {9: 50, 2: 180, 0: 300}
    assert drain(again) == (make(50, 600, priority=9) + make(180, 120, priority=2)
                            + make(300, 300, priority=0))
    assert list(DiskFrontier(tmp_path, saved).jobs()) == list(
        DiskFrontier(tmp_path, saved).jobs())
    before = len(list(tmp_path.glob("p2.*.seg")))
    frontier.release(saved)
    assert len(list(tmp_path.glob("p2.*.seg"))) == before - 1
    assert len(DiskFrontier(tmp_path, saved)) == 530


# --- SiteSpill ---


def test_spill_pops_each_sites_jobs_oldest_first(tmp_path: Path) -> None:
    spill = SiteSpill(tmp_path)
    for r in range(10):
        for s in range(20):
            spill.push(f"http://s{s}.test", make(5, r * 5, host=f"s{s}"))
    assert len(spill) == 1000 and spill.count("http://s3.test") == 50
    assert spill.pop_many("http://s3.test", 7) == make(7, host="s3")
    assert spill.count("http://s3.test") == 43 and len(spill) == 993
    spill.flush()
    assert spill.pop_many("http://s3.test", 100) == make(43, 7, host="s3")
    assert spill.pop_many("http://s3.test", 100) == []
    assert spill.pop_many("http://nobody.test", 5) == []
    assert sorted(spill.sites()) == sorted(f"http://s{s}.test" for s in range(20) if s != 3)


@pytest.mark.usefixtures("small")
def test_spill_reopens_at_saved_cursors_across_its_files(tmp_path: Path) -> None:
    spill = SiteSpill(tmp_path)
    for i in range(0, 200, 10):
        spill.push("a", make(10, i, host="a"))
        spill.flush()
    spill.push("b", make(30, host="b"))
    spill.flush()
    assert len(list(tmp_path.glob("*.spill"))) > 3  # "a" spans several files
    assert spill.pop_many("a", 150) == make(150, host="a")
    saved = spill.position()
    spill.push("a", make(10, 200, host="a"))
    spill.push("c", make(3, host="c"))  # a site spilled after the checkpoint
    spill.sync()
    again = SiteSpill(tmp_path, saved)
    assert (again.count("a"), again.count("b"), again.count("c")) == (60, 30, 3)
    assert again.pop_many("a", 1000) == make(60, 150, host="a")
    assert again.pop_many("c", 1000) == make(3, host="c")


@pytest.mark.usefixtures("small")
def test_spill_files_go_only_when_consumed_and_released(tmp_path: Path) -> None:
    spill = SiteSpill(tmp_path)
    for i in range(0, 200, 10):
        spill.push("a", make(10, i, host="a"))
        spill.flush()
    files = len(list(tmp_path.glob("*.spill")))
    spill.pop_many("a", 120)
    old = spill.position()
    spill.pop_many("a", 80)
    assert len(list(tmp_path.glob("*.spill"))) == files
    spill.release(old)  # part of "a" was still waiting at that checkpoint
    assert 1 < len(list(tmp_path.glob("*.spill"))) < files
    done = spill.position()
    spill.release(done)
    assert list(tmp_path.glob("*.spill")) == []
    assert spill.position() == {}
    assert done["a"][0] > 0
    restarted = SiteSpill(tmp_path, done)  # a restart from that checkpoint: nothing left
    assert len(restarted) == 0
    restarted.push("a", make(4, 500, host="a"))  # a new generation, never confused with `done`
    restarted.flush()
    assert SiteSpill(tmp_path, done).pop_many("a", 10) == make(4, 500, host="a")


def test_spill_keeps_few_files_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diskqueue, "SPILL_FDS", 4)
    before = len(os.listdir("/proc/self/fd"))
    spill = SiteSpill(tmp_path)
    for s in range(50):
        spill.push(f"site{s}", make(3, host=f"s{s}"))
    spill.flush()
    for s in range(50):
        assert spill.pop_many(f"site{s}", 3) == make(3, host=f"s{s}")
    assert len(os.listdir("/proc/self/fd")) - before <= 4
    spill.close()


@pytest.mark.usefixtures("small")
def test_spill_truncates_a_torn_tail_and_refuses_damage(tmp_path: Path) -> None:
    spill = SiteSpill(tmp_path)
    for i in range(0, 200, 10):
        spill.push("a", make(10, i, host="a"))
        spill.flush()
    files = sorted(tmp_path.glob("*.spill"), key=lambda p: int(p.name.split(".")[1]))
    with open(files[-1], "ab") as f:
        f.write(b"1\t2\t0\thttp://a.te")
    (tmp_path / f"{files[-1].name.split('.')[0]}.99.spill").write_bytes(b"#a")  # torn new file
    again = SiteSpill(tmp_path)
    assert again.pop_many("a", 1000) == make(200, host="a")
    assert not (tmp_path / f"{files[-1].name.split('.')[0]}.99.spill").exists()
    data = files[0].read_bytes()
    files[0].write_bytes(data[:3] + b"!" + data[4:])  # the first job line, after "#a\n"
    with pytest.raises(StateError, match=files[0].name):
        SiteSpill(tmp_path)


# --- memory and speed ---


PATH = "a/fairly/typical/path/to/page"


def stream(n: int, sites: int, rounds: int) -> Iterator[tuple[str, list[Job]]]:
    """n jobs as (site, batch) pairs: every site gets a batch in each round; priority by site."""
    per = n // sites // rounds
    for r in range(rounds):
        for s in range(sites):
            yield f"s{s}", [Job(f"http://s{s}.test/{PATH}{r * per + k}", 2, s % 3, 0)
                            for k in range(per)]


def check_bounded_memory(tmp_path: Path, n: int, sites: int, limit_mb: float) -> None:
    """Push n jobs into a DiskFrontier and a SiteSpill, pop them all back, under a heap limit."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        frontier, spill = DiskFrontier(tmp_path / "frontier"), SiteSpill(tmp_path / "spill")
        for site, batch in stream(n, sites, 10):
            frontier.push(batch)
            spill.push(site, batch)
        frontier.flush()
        spill.flush()
        assert len(frontier) == len(spill) == n
        last: dict[str, int] = {}
        prio, popped = 3, 0
        while (job := frontier.pop()) is not None:
            site, num = job.url[7:].split(f".test/{PATH}")
            assert job.priority <= prio and int(num) > last.get(site, -1)
            prio, last[site], popped = job.priority, int(num), popped + 1
        assert popped == n
        for s in range(sites):
            got = spill.pop_many(f"s{s}", n)
            want = [f"http://s{s}.test/{PATH}{k}" for k in range(n // sites)]
            assert [j.url for j in got] == want
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < limit_mb * 2**20, f"heap peak {peak / 2**20:.1f} MB"


def test_memory_stays_small_with_100k_jobs_queued(tmp_path: Path) -> None:
    # Held in memory, these 100,000 jobs would take ~19 MB as Jobs, ~6 MB as unwritten lines.
    check_bounded_memory(tmp_path, 100_000, 1_000, limit_mb=4)


@pytest.mark.slow
def test_memory_stays_small_with_a_million_jobs_over_10k_sites(tmp_path: Path) -> None:
    check_bounded_memory(tmp_path, 1_000_000, 10_000, limit_mb=30)
