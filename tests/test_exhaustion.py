"""Out of descriptors, out of disk, files cut short: the crawl waits, counts, recovers, and a
restart repairs what it finds, never asking for --scratch.

Real limits only: RLIMIT_NOFILE lowered in a real child process, a real full file system (a
small tmpfs mounted in a private mount namespace with `unshare -m`), real files cut mid-line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import free_port, until

from larbinpy.demo import Page, Site
from larbinpy.frontier.diskqueue import SiteSpill
from larbinpy.frontier.state import StateDir
from larbinpy.records import Job

REPO = Path(__file__).parents[1]


def run_child(code: str, *args: str, prefix: list[str] | None = None) -> dict:
    """Run a Python snippet in a child process; the JSON object it prints last."""
    proc = subprocess.run([*(prefix or []), sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def can_mount_tmpfs() -> str | None:
    """None if `unshare -m` can mount a tmpfs here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot mount a tmpfs: {probe.stderr.strip()}"


def tiny_disk(directory: Path, size: str) -> list[str]:
    """A command prefix: run in a private mount namespace with a tmpfs of `size` on directory."""
    reason = can_mount_tmpfs()
    if reason:
        pytest.skip(f"a full disk needs a private tmpfs: {reason}")
    directory.mkdir(parents=True, exist_ok=True)
    script = f'mount -t tmpfs -o size={size} tmpfs "{directory}" && exec "$@"'
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh"]


def on_tiny_disk(tmp_path: Path, size: str, code: str) -> tuple[dict, str]:
    """Run `code` in a child whose argv[1] is a folder on a tmpfs of `size`: the JSON object
    it prints last, and its stderr."""
    disk = tmp_path / "disk"
    proc = subprocess.run([*tiny_disk(disk, size), sys.executable, "-c", code, str(disk)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


# --- the queues' files, under a real descriptor limit and on a real full disk ---

SPILL_UNDER_FD_LIMIT = """
import json, os, resource, sys
from pathlib import Path
from larbinpy.frontier import diskqueue
from larbinpy.records import Job
d = Path(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
sites = [f"http://s{i}.test" for i in range(40)]
spill = diskqueue.SiteSpill(d)
for k in sites:
    spill.push(k, [Job(f"{k}/p{j}", 0, 0, 0) for j in range(6)])
held = []
with __import__("contextlib").suppress(OSError):
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
failed = None
try:
    spill.flush()
except OSError as exc:
    failed = exc.errno
popped_failed = None
try:
    spill.pop_many(sites[0], 2)
except OSError as exc:
    popped_failed = exc.errno
after_failure = len(spill)
for fd in held[:3]:  # three descriptors come back: the spill's fd cache must make do
    os.close(fd)
spill.flush()
popped = {k: [j.url for j in spill.pop_many(k, 2)] for k in sites}
spill.sync()
positions = spill.position()
spill.close()
for fd in held[3:]:
    os.close(fd)
again = diskqueue.SiteSpill(d, positions)
rest = {k: [j.url for j in again.pop_many(k, 100)] for k in sites}
headers = sorted({p.read_bytes()[:1].decode() for p in d.glob("*.spill")})
print(json.dumps({"failed": failed, "popped_failed": popped_failed,
                  "after_failure": after_failure, "popped": popped, "rest": rest,
                  "headers": headers}))
"""


def test_spill_under_a_real_fd_limit_loses_nothing_and_writes_whole_files(tmp_path: Path) -> None:
    out = run_child(SPILL_UNDER_FD_LIMIT, str(tmp_path))
    emfile = 24
    assert out["failed"] == emfile and out["popped_failed"] == emfile
    assert out["after_failure"] == 40 * 6  # nothing was taken or dropped by the failures
    for i in range(40):
        k = f"http://s{i}.test"
        assert out["popped"][k] == [f"{k}/p0", f"{k}/p1"]
        assert out["rest"][k] == [f"{k}/p{j}" for j in range(2, 6)]
    assert out["headers"] == ["#"]  # every spill file starts with its site's header


AIOHTTP_SHORT_OF_DESCRIPTORS = """
import asyncio, json, os, resource, sys
from aiohttp import web
from larbinpy.config import parse_config
from larbinpy.net import aio, http1  # aio: imported before the descriptors run out
from larbinpy.net.fetcher import keepalive_seconds, request_headers
from yarl import URL
from larbinpy.net.policy import NetworkPolicy

class Lookup:
    policy = NetworkPolicy(parse_config("allowNetworks 127.0.0.0/8 end\\n").allow_networks)
    async def lookup(self, host):
        return ["127.0.0.1"]

async def hello(request):
    return web.Response(text="hello")

async def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    cfg = parse_config(f"stateDir {sys.argv[1]}/state\\ntimeoutTotal 30\\n")
    held = []
    try:
        while True:
            held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass

    async def give_back():
        while http1.Shortage.waits == 0:  # once the connect has failed and waits
            await asyncio.sleep(0.01)
        for fd in held:
            os.close(fd)

    giver = asyncio.ensure_future(give_back())
    session = aio.make_session(cfg, Lookup(), request_headers(cfg), keepalive_seconds(cfg))
    resp = await aio.patient_get(session, URL(f"http://page.test:{port}/"), None)
    try:
        text = await resp.text()
    finally:
        resp.release()
    await giver
    await session.close()
    await runner.cleanup()
    print(json.dumps({"status": resp.status, "text": text, "waits": http1.Shortage.waits}))

asyncio.run(main())
"""


def test_aiohttp_connects_wait_while_descriptors_are_short(tmp_path: Path) -> None:
    """HTTPS and proxies go through aiohttp: a connect that finds no descriptor waits and tries
    again (as the HTTP/1.1 client's do), and the request gets its answer."""
    out = run_child(AIOHTTP_SHORT_OF_DESCRIPTORS, str(tmp_path))
    assert out["status"] == 200 and out["text"] == "hello"
    assert out["waits"] >= 1


QUEUES_ON_A_FULL_DISK = """
import errno, json, os, sys
from pathlib import Path
from larbinpy.frontier import diskqueue
from larbinpy.records import Job
d = Path(sys.argv[1])
filler = d / "filler"
filler.write_bytes(b"x" * (96 << 10))  # given back later: "the disk has room again"
fifo = diskqueue.SegmentFifo(d / "frontier", "p0")
spill = diskqueue.SiteSpill(d / "spill")
pushed, failed = 0, None
while failed is None:
    batch = [Job(f"http://h.test/{pushed + i}/" + "x" * 200, 0, 0, 0) for i in range(50)]
    fifo.push(batch)
    spill.push("http://h.test", batch)
    pushed += len(batch)
    try:
        fifo.flush()
        spill.flush()
    except OSError as exc:
        failed = exc.errno
whole = all(p.read_bytes().endswith(b"\\n") for p in d.rglob("*.s*") if p.stat().st_size)
filler.unlink()
fifo.sync()
spill.sync()
got_fifo = [j.url for j in iter(fifo.pop, None)]
got_spill = [j.url for j in spill.pop_many("http://h.test", pushed)]
fifo.close()
spill.close()
again = diskqueue.SegmentFifo(d / "frontier", "p0")
print(json.dumps({"failed": failed, "pushed": pushed, "whole": whole,
                  "fifo": got_fifo == got_spill and len(got_fifo), "spill": len(got_spill),
                  "reopened": len(again)}))
"""


def test_queues_on_a_full_disk_keep_every_job_and_write_again_when_there_is_room(
        tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    out = run_child(QUEUES_ON_A_FULL_DISK, str(disk), prefix=tiny_disk(disk, "512k"))
    assert out["failed"] == 28  # ENOSPC, for real
    assert out["whole"]  # no file was left ending in half a line
    assert out["fifo"] == out["spill"] == out["pushed"]  # every job, in order, in both
    assert out["reopened"] == out["pushed"]  # (nothing was popped from disk's point of view)


SEEN_TABLE_ON_A_FULL_DISK = """
import json, random, sys
from pathlib import Path
from larbinpy.frontier.fptable import FingerprintTable
d = Path(sys.argv[1])
table = FingerprintTable(d / "t.fingerprints", cache=1 << 30)  # stored into through a mapping
with open(d / "filler", "wb", buffering=0) as f:  # the disk fills up around the table
    try:
        while True:
            f.write(b"x" * 4096)
    except OSError:
        pass
rng, stored, failed = random.Random(1), [], None
try:
    while True:
        batch = [rng.getrandbits(64) | 1 for _ in range(500)]
        table.add(batch)
        stored += batch
except OSError as exc:
    failed = exc.errno
found = all(table.contains(stored))
(d / "filler").unlink()  # room again for closing (the count file)
table.close()
again = FingerprintTable(d / "t.fingerprints", cache=1 << 30)
print(json.dumps({"failed": failed, "stored": len(stored), "found": found,
                  "reopened": all(again.contains(stored))}))
"""


def test_the_seen_table_on_a_full_disk_fails_its_doubling_and_keeps_what_it_stored(
        tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    # a process killed by SIGBUS (a store into a mapped hole) would print nothing
    out = run_child(SEEN_TABLE_ON_A_FULL_DISK, str(disk), prefix=tiny_disk(disk, "1m"))
    assert out["failed"] == 28  # ENOSPC, when the table could not double
    assert out["stored"] > 0 and out["found"] and out["reopened"]


SITE_RECORDS_ON_A_FULL_DISK = """
import asyncio, errno, json, logging, sys
from pathlib import Path
from larbinpy.frontier.sitedb import SiteRecord, SiteRecords
from larbinpy.turn import TurnEnd
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
d = Path(sys.argv[1])
records = SiteRecords(d / "sites.sqlite", TurnEnd())
filler = d / "filler"

async def turn():
    await asyncio.sleep(0)  # the end of the turn: the batch is written
    await asyncio.sleep(0)

async def main():
    records.put("http://early.test", SiteRecord(1.0, 0, 1))
    await turn()
    with open(filler, "wb") as f:  # the disk full
        try:
            while True:
                f.write(b"x" * 65536)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    for i in range(2000):
        records.put(f"http://s{i}.test", SiteRecord(float(i), 0, i + 1))
    await turn()
    kept = records.get("http://s1999.test")
    filler.unlink()  # room again: the next turn's end writes them
    records.put("http://late.test", SiteRecord(2.0, 0, 1))
    await turn()
    records.close()
    return kept

kept = asyncio.run(main())
again = SiteRecords(d / "sites.sqlite")
print(json.dumps({"kept": kept.pages if kept else None, "rows": len(again),
                  "last": again.get("http://s1999.test").pages}))
"""


def test_site_records_on_a_full_disk_wait_in_memory_and_are_written_when_there_is_room(
        tmp_path: Path) -> None:
    out, stderr = on_tiny_disk(tmp_path, "256k", SITE_RECORDS_ON_A_FULL_DISK)
    assert "cannot write the state database" in stderr, stderr
    assert "can be written again" in stderr, stderr
    assert out == {"kept": 2000, "rows": 2002, "last": 2000}


CRAWL_LOG_ON_A_FULL_DISK = """
import json, os, sys
from pathlib import Path
from larbinpy.frontier.crawllog import CrawlLog, DoneRecord
from larbinpy.frontier.endings import Endings
from larbinpy.records import Job
from larbinpy.stats import Outcome
from larbinpy.turn import TurnEnd


class Batched(TurnEnd):  # a turn's end that runs only when asked, as at a loop turn's end
    def due(self):
        pass


d = Path(sys.argv[1])
turn = Batched()
log, record = CrawlLog(d / "crawl.jsonl", turn), DoneRecord(d / "done", False, turn)
endings = Endings(record.take_skip)
endings.subscribe(log.ended)
endings.subscribe(record.ended)
# lines of odd lengths, flushed in batches of 7: the disk fills in the middle of a write
for i in range(3000):
    endings.end(Job(f"http://h.test/{'x' * (i % 97)}/{i}", 1), Outcome.success, 200, i, 1)
    if i % 7 == 6:
        turn.run()
turn.run()
errors = log.write_errors + record.write_errors
log.close()
record.close()
text = (d / "crawl.jsonl").read_bytes().decode()
done = (d / "done").read_bytes().decode()
print(json.dumps({"errors": errors, "whole": text.endswith("\\n") and done.endswith("\\n"),
                  "lines": [json.loads(line)["bytes"] for line in text.splitlines()],
                  "done": len(done.splitlines())}))
"""


def test_the_crawl_log_on_a_full_disk_keeps_whole_lines(tmp_path: Path) -> None:
    """Writes cut short by a full disk are taken back to the last whole line: every line
    left parses, and they are the first ones recorded, in order."""
    out, stderr = on_tiny_disk(tmp_path, "128k", CRAWL_LOG_ON_A_FULL_DISK)
    assert out["errors"] > 0 and out["whole"]
    kept = out["lines"]
    assert 0 < len(kept) < 3000 and kept == sorted(set(kept)) and kept[0] == 0
    assert "crawl log lines lost" in stderr


# --- files cut short are repaired on open ---


def test_a_spill_file_cut_mid_line_before_the_last_is_repaired(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from larbinpy.frontier import diskqueue
    monkeypatch.setattr(diskqueue, "SPILL_SEGMENT_BYTES", 600)
    spill = SiteSpill(tmp_path)
    key = "http://s.test"
    for i in range(60):
        spill.push(key, [Job(f"{key}/p{i}", 0, 0, 0)])
        spill.flush()
    spill.close()
    files = sorted(tmp_path.glob("*.spill"), key=lambda p: int(p.name.split(".")[1]))
    assert len(files) > 2
    first = files[0]
    lines = first.read_bytes().splitlines(True)
    os.truncate(first, first.stat().st_size - 3)  # its last line loses its end
    cut = lines[-1].split(b"\t")[-1].strip().decode()
    again = SiteSpill(tmp_path)  # no StateError, no --scratch
    urls = [j.url for j in again.pop_many(key, 100)]
    assert urls == [f"{key}/p{i}" for i in range(60) if f"{key}/p{i}" != cut]
    assert "cut back" in caplog.text


def test_a_checkpoint_cut_in_the_middle_keeps_its_whole_lines(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = StateDir(str(tmp_path), {"hashSize": 1}, scratch=False)
    jobs = [Job(f"http://c.test/p{i}", 1, 0, 0) for i in range(100)]
    state.write_checkpoint({0: (3, 120)}, {"http://c.test": (5, 40)}, jobs)
    path = tmp_path / "checkpoint"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    saved = state.load()
    assert saved.frontier == {0: (3, 120)} and saved.spill == {"http://c.test": (5, 40)}
    assert 0 < len(saved.jobs) < 100 and saved.jobs == jobs[: len(saved.jobs)]
    assert "cut short" in caplog.text
    path.write_bytes(data[:10])  # not even its cursor line: queues read from their start
    saved = state.load()
    assert saved.frontier == {} and saved.jobs == [] and not saved.fresh


# --- a real crawl under pressure ---

PAGES = 200  # beyond a site's in-memory window: the rest spills to disk
SITES = ("e1.test", "e2.test", "e3.test", "e4.test")


# what the crawler logs when it puts work off for want of descriptors
SHORT_SIGNS = ("fetching paused", "waiting for descriptors", "cannot read the queue",
               "checkpoint failed", "cannot write queued jobs")


def wide_web() -> list[Site]:
    """Sites whose home page links to PAGES slow leaves: queues long enough to spill."""
    sites = []
    for n, host in enumerate(SITES):
        links = "".join(f'<a href="/p{i}.html">{i}</a>' for i in range(PAGES))
        pages = {"/": Page(f"<html><body>{links}</body></html>")}
        for i in range(PAGES):
            pages[f"/p{i}.html"] = Page(f"<html><body>page {i} of {host}</body></html>",
                                        delay=0.02)
        sites.append(Site(host, f"127.0.0.{n + 2}", pages))
    return sites


def all_pages(tw) -> set[str]:
    """Every page of the wide web."""
    return {tw.url(s.host, p) for s in wide_web() for p in s.pages}


def saved_urls(save: Path) -> list[str]:
    """URLs in the index files of `output save`."""
    return [line.split(" ")[1] for index in sorted(save.glob("d*/index"))
            for line in index.read_text().splitlines()]


def limit_fds(n: int):
    """preexec_fn: the child may open at most n descriptors."""
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return apply


async def start(tw, conf: Path, *, fds: int | None = None,
                prefix: list[str] | None = None) -> asyncio.subprocess.Process:
    """larbinpy as a real process, optionally with a low descriptor limit."""
    return await asyncio.create_subprocess_exec(
        *(prefix or []), sys.executable, "-m", "larbinpy", "-c", str(conf),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=tw.tmp,
        preexec_fn=limit_fds(fds) if fds else None)


async def collect(stream: asyncio.StreamReader, into: list[str]) -> None:
    """Keep every line of a child's stderr."""
    while line := await stream.readline():
        into.append(line.decode(errors="replace"))


async def hold_connections(ports: list[int], proc: asyncio.subprocess.Process,
                           short: Callable[[], bool]) -> list[asyncio.StreamWriter]:
    """Idle connections to the crawler's ports, each costing it a descriptor, opened until
    `short()` (the crawler says it is short of them) or it exits. The flood goes on to the end:
    a burst alone leaves the crawler the descriptors its own short-lived files free. Each port
    keeps at most Ports.MAX_CONNECTIONS open, so it takes both to run 100 descriptors out."""
    held: list[asyncio.StreamWriter] = []

    async def taken() -> bool:
        for port in ports:
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                held.append(writer)
        return short() or proc.returncode is not None

    await until(taken, "the crawler short of descriptors")
    return held


async def release(held: list[asyncio.StreamWriter]) -> None:
    """Close the held connections (the crawler gets its descriptors back)."""
    for writer in held:
        writer.close()
    for writer in held:
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def crawl_short_of_descriptors(tw, short: Callable[[str], bool]):
    """A crawl of the wide web at 100 descriptors, its ports flooded with idle connections until
    `short(its stderr so far)`: (conf, process, its stderr lines, their reader, the
    connections). Fails if the crawl ends first."""
    port, status_port = free_port(), free_port()
    seeds = "".join(f"startUrl {tw.url(h)}\n" for h in SITES)
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(f"exitAtEnd\noutput save\ncheckpointInterval 0.2\n{seeds}")
                    .replace("inputPort 0", f"inputPort {port}")
                    .replace("httpPort 0", f"httpPort {status_port}"))
    proc = await start(tw, conf, fds=100)
    err: list[str] = []
    reader = asyncio.ensure_future(collect(proc.stderr, err))
    await until(lambda: len(tw.pages_fetched()) > 20, "the crawl under way")
    held = await hold_connections([port, status_port], proc,
                                  lambda: short("".join(err)))
    assert proc.returncode is None, "the crawl ended before it was short of descriptors:\n" + \
        "".join(err)
    return conf, proc, err, reader, held


async def test_out_of_descriptors_the_crawl_waits_then_saves_every_page(make_web) -> None:
    tw = await make_web(wide_web())
    conf, proc, err, reader, held = await crawl_short_of_descriptors(tw, lambda text: (
        "Too many open files" in text and any(s in text for s in SHORT_SIGNS)))
    await release(held)
    await asyncio.wait_for(proc.wait(), 120)
    await reader
    text = "".join(err)
    assert proc.returncode == 0, text
    assert "bug in" not in text and "Traceback" not in text, text
    assert set(saved_urls(tw.tmp / "save")) == all_pages(tw)  # every page fetched is saved


async def test_stopped_out_of_descriptors_a_restart_finishes_without_scratch(make_web) -> None:
    tw = await make_web(wide_web())
    # the loop's accept refused (EMFILE), or the crawler saying it waits for descriptors
    conf, proc, err, reader, held = await crawl_short_of_descriptors(tw, lambda text: any(
        s in text for s in ("Too many open files", *SHORT_SIGNS)))
    try:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
    finally:
        await release(held)
    await reader
    first = "".join(err)
    assert "bug in" not in first, first
    proc = await start(tw, conf)
    _, again = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, again.decode()
    assert b"--scratch" not in again
    assert set(saved_urls(tw.tmp / "save")) == all_pages(tw)


async def test_a_spill_file_cut_mid_line_after_a_stop_resumes_without_scratch(make_web) -> None:
    tw = await make_web(wide_web())
    seeds = "".join(f"startUrl {tw.url(h)}\n" for h in SITES)
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(f"exitAtEnd\n{seeds}"))
    proc = await start(tw, conf)
    spill = tw.tmp / "state" / "spill"
    await until(lambda: len(tw.pages_fetched()) > 20 and any(spill.glob("*.spill")),
                "the crawl under way, with spilled jobs")
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.communicate(), 60)
    victim = max(spill.glob("*.spill"), key=lambda p: p.stat().st_size)
    last = victim.read_bytes().splitlines()[-1]
    os.truncate(victim, victim.stat().st_size - len(last) // 2)  # mid-record
    cut = last.split(b"\t")[-1].decode()
    proc = await start(tw, conf)
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert b"cut" in err and b"--scratch" not in err
    assert all_pages(tw) - set(tw.pages_fetched()) <= {cut}  # only the torn job is gone


async def test_a_full_disk_pauses_the_crawl_and_it_saves_every_page_when_there_is_room(
        make_web, tmp_path: Path) -> None:
    tw = await make_web(wide_web()[:2])
    save = tmp_path / "save"
    prefix = tiny_disk(save, "4m")
    seeds = "".join(f"startUrl {tw.url(h)}\n" for h in SITES[:2])
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(seeds + "output save\n"))  # a daemon: stopped below
    proc = await start(tw, conf, prefix=prefix)
    err: list[str] = []
    reader = asyncio.ensure_future(collect(proc.stderr, err))
    # saveDir as the child sees it (a tmpfs in its own mount namespace)
    seen = Path(f"/proc/{proc.pid}/root") / str(save).lstrip("/")
    try:
        await until(lambda: (seen / "d00000" / "index").exists(), "the first page saved")
        filler = seen / "filler"
        with contextlib.suppress(OSError), open(filler, "wb") as f:
            while True:
                f.write(b"x" * 4096)
                f.flush()
        await until(lambda: "No space left" in "".join(err), "the disk full")
        filler.unlink()
        pages = {tw.url(s.host, p) for s in wide_web()[:2] for p in s.pages}
        await until(lambda: set(saved_urls(seen)) == pages, "every page saved", timeout=120)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
        await reader
    text = "".join(err)
    assert proc.returncode == 0, text
    assert "fetching paused" in text and "fetching resumed" in text, text
    assert "are lost" not in text, text
