"""Broad crawls: many sites in bounded memory (the site table's budget, seeds by the million)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import html, until

from larbinpy.bench import measure
from larbinpy.clock import FakeClock
from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.demo import DnsServer, Page, Site
from larbinpy.frontier import sites as sites_module
from larbinpy.frontier.diskqueue import SiteSpill
from larbinpy.frontier.politeness import Politeness
from larbinpy.frontier.sitedb import SiteRecord, SiteRecords
from larbinpy.frontier.sites import Sites
from larbinpy.net.cares import LoopResolver
from larbinpy.net.policy import NetworkPolicy
from larbinpy.records import Job
from larbinpy.stages import dns as dns_module
from larbinpy.stages.dns import Dns
from larbinpy.stats import Stats

SITES = 40
PEAK_MB = 150  # a crawler reading a seed file: its imports, caches and one batch
SUBMIT_MORE_MB = 12  # `larbinpy submit` of many URLs beyond one: a 1 MiB request and its JSON


def many_sites() -> list[Site]:
    """SITES hosts on four IPs, two pages each, every home page linking the next host's."""
    return [Site(f"s{i}.test", f"127.0.0.{2 + i % 4}", {"/": html("/p.html"), "/p.html": html("/")})
            for i in range(SITES)]


async def test_max_sites_in_memory_bounds_the_sites_with_work_and_the_crawl_still_ends(make_web):
    tw = await make_web(many_sites())
    for i, site in enumerate(tw.web.sites.values()):  # links to other hosts: new sites found
        site.pages["/"] = html("/p.html", tw.url(f"s{(i + 7) % SITES}.test"))
    seeds = "".join(f"startUrl {tw.url(f's{i}.test')}\n" for i in range(0, SITES, 2))
    cfg = parse_config(tw.config_text(f"exitAtEnd\nmaxSitesInMemory 3\n{seeds}"))
    busy: list[int] = []

    def started(site, job) -> None:  # noqa: ANN001 - the crawler's on_page_fetch
        sites = crawler.sites
        busy.append(len(sites.by_key) - len(sites.idle))

    crawler = Crawler(cfg, scratch=True, on_page_fetch=started)
    await asyncio.wait_for(crawler.run(), 60)
    fetched = Counter(tw.pages_fetched())
    assert set(fetched) == {tw.url(f"s{i}.test", p) for i in range(SITES) for p in ("/", "/p.html")}
    assert all(n == 1 for n in fetched.values()), fetched
    assert max(busy) <= 3 and len(busy) == 2 * SITES


def seed_lines(n: int, bad: dict[int, str]) -> str:
    """n lines of seeds for one host, line k (1-based) replaced by bad[k]."""
    return "".join(bad.get(k, f"http://seed.test/p{k}.html") + "\n" for k in range(1, n + 1))


# Runs a command and prints its peak RSS (kB) as its last line of stderr. A small process of its
# own forks it: the kernel's peak for a child starts from its parent's size at the fork (it
# survives exec), so a child of the test process would inherit the test's. SIGTERM is passed on.
PEAK = ("import resource, signal, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); "
        "signal.signal(signal.SIGTERM, lambda *_: p.terminate()); code = p.wait(); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
        "sys.exit(code)")


def child(cmd: list[str], log: Path, cwd: Path, stdin: Path | None = None) -> subprocess.Popen:
    """A larbinpy process, its stderr into `log` (with its peak RSS last, see PEAK)."""
    with open(log, "wb") as err, open(stdin or os.devnull, "rb") as inp:
        return subprocess.Popen([sys.executable, "-c", PEAK, sys.executable, "-m", "larbinpy",
                                 *cmd], stdin=inp, stdout=subprocess.DEVNULL, stderr=err,
                                cwd=cwd)


async def ended(proc: subprocess.Popen, log: Path) -> tuple[int, float]:
    """Wait for the process: (exit code, its peak RSS in MB)."""
    code = await asyncio.to_thread(proc.wait, 120)
    return code, int(log.read_text().splitlines()[-1]) / 1024


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LINES = [100_000, pytest.param(1_000_000, marks=pytest.mark.slow)]
BAD = {17: "not a url", 4242: "mailto:x@y.test", -1: "ftp://seed.test/x"}  # -1: the last line


@pytest.mark.parametrize("n", LINES)
async def test_a_huge_seed_file_is_streamed_in_bounded_memory_naming_its_bad_lines(
        tmp_path: Path, n: int) -> None:
    bad = {(n if k == -1 else k): v for k, v in BAD.items()}
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(seed_lines(n, bad))
    async with DnsServer({}, silent={"seed.test"}) as dns:  # no fetch: the seeds are the test
        conf = tmp_path / "larbin.conf"
        conf.write_text(f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\n"
                        f"dnsServers {dns.address}\nhttpPort 0\ninputPort 0\n"
                        f"seedFile {seeds}\n")
        log = tmp_path / "crawler.log"
        proc = child(["-c", str(conf), "--scratch"], log, tmp_path)
        started = time.monotonic()
        await until(lambda: "new URLs" in log.read_text(), "the seed file read", timeout=120)
        read_in = time.monotonic() - started
        proc.send_signal(signal.SIGTERM)
        code, peak_mb = await ended(proc, log)
    text = log.read_text()
    assert code == 0, text
    assert f"seedFile {seeds} read ({n} lines): {n - len(bad)} new URLs" in text
    for line, url in bad.items():
        assert f"seedFile {seeds} line {line}: {url} refused:" in text
    assert peak_mb < PEAK_MB, f"{peak_mb:.0f} MB for {n} seeds read in {read_in:.1f} s"


@pytest.mark.parametrize("n", LINES)
async def test_submit_streams_a_huge_list_from_stdin_naming_its_bad_lines(
        tmp_path: Path, n: int) -> None:
    bad = {(n if k == -1 else k): v for k, v in BAD.items()}
    urls = tmp_path / "urls.txt"
    urls.write_text(seed_lines(n, bad))
    port = free_port()
    async with DnsServer({}, silent={"seed.test"}) as dns:
        conf = tmp_path / "larbin.conf"
        conf.write_text(f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\n"
                        f"dnsServers {dns.address}\nhttpPort 0\ninputPort {port}\n")
        crawler = child(["-c", str(conf), "--scratch"], tmp_path / "crawler.log", tmp_path)
        await until(lambda: "input port (inputPort) on" in (tmp_path / "crawler.log").read_text(),
                    "the crawler listening")
        one = tmp_path / "one.txt"  # the client's own size: one URL
        one.write_text("http://seed.test/one.html\n")
        base_log = tmp_path / "base.log"
        _, base_mb = await ended(child(["-c", str(conf), "submit", "-"], base_log, tmp_path,
                                       stdin=one), base_log)
        client_log = tmp_path / "submit.log"
        client = child(["-c", str(conf), "submit", "-"], client_log, tmp_path, stdin=urls)
        code, peak_mb = await ended(client, client_log)
        crawler.send_signal(signal.SIGTERM)
        assert (await ended(crawler, tmp_path / "crawler.log"))[0] == 0
    text = client_log.read_text()
    assert code == 1, text  # some were rejected
    for line, url in bad.items():
        assert f"rejected stdin line {line}: {url}:" in text
    # the URLs held whole: 24 MB more at 100,000 (measured), ten times that at a million
    assert peak_mb - base_mb < SUBMIT_MORE_MB, f"{peak_mb:.0f} MB for {n} URLs, {base_mb:.0f} for 1"


async def test_kill_9_resumes_with_every_sites_clock_robots_verdict_and_page_count(make_web):
    wait = 3.0  # longer than a restart takes: a clock forgotten would show as a shorter gap
    sites = [Site(f"k{i}.test", f"127.0.0.{2 + i}", {
        "/": html("/a.html", "/b.html", "/c.html"), "/a.html": html(), "/b.html": html(),
        "/c.html": html(),
        "/robots.txt": Page("User-agent: *\nDisallow: /c.html\n", content_type="text/plain"),
    }) for i in range(6)]
    tw = await make_web(sites)
    seeds = "".join(f"startUrl {tw.url(s.host)}\n" for s in sites)
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(f"exitAtEnd\nmaxPagesPerSite 2\n{seeds}").replace(
        "waitDuration 0\n", f"waitDuration {wait}\n"))
    run = [sys.executable, "-m", "larbinpy", "-c", str(conf), "-q"]
    proc = await asyncio.create_subprocess_exec(*run, cwd=tw.tmp, stderr=subprocess.DEVNULL)
    await until(lambda: len(tw.pages_fetched()) >= 8, "8 pages fetched")  # 2nd pages going
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    asked = Counter(name.rstrip(".") for name, _ in tw.dns.queries.elements())
    proc = await asyncio.create_subprocess_exec(*run, cwd=tw.tmp, stderr=subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    asked_again = Counter(name.rstrip(".") for name, _ in tw.dns.queries.elements()) - asked
    assert not asked_again, asked_again  # each site's DNS answer was in its row, TTL not over
    for site in sites:
        hits = sorted(h.start for h in tw.web.hits_for(site.host))
        gaps = [b - a for a, b in zip(hits, hits[1:], strict=False)]
        assert min(gaps) > wait - 0.2, (site.host, gaps)  # across the kill too
        robots = [h for h in tw.web.hits_for(site.host) if h.path == "/robots.txt"]
        assert len(robots) == 1  # its verdict survived
        pages = {h.path for h in tw.web.hits_for(site.host) if h.path != "/robots.txt"}
        assert len(pages) == 2 and "/c.html" not in pages  # maxPagesPerSite over both runs
    refetched = len(tw.pages_fetched()) - len(set(tw.pages_fetched()))
    assert refetched <= 6  # at most what was in flight: one fetch a site


def test_a_forgotten_site_comes_back_with_its_clock_back_off_and_pages_from_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sites_module, "MAX_IDLE_SITES", 0)
    records = SiteRecords(tmp_path / "sites.sqlite")
    clock = FakeClock(time.monotonic(), time.time() - time.monotonic())
    sites = Sites(Stats(), 5.0, SiteSpill(tmp_path / "spill"), records=records, clock=clock)
    politeness = Politeness(sites, clock, 1, lambda site, now: False, lambda entry: None)
    now = clock.now()
    sites.enqueue(Job("http://a.test/", 1), now)
    site = sites.by_key["http://a.test"]
    sites.resolved(site, "10.0.0.1", robots_first=False, answer=(now + 300, ["10.0.0.1"]))
    sites.take(site)
    politeness.start_fetch(site)
    sites.count_page(site)
    sites.back_off(site, now + 60)  # a 429: nothing before a minute has passed
    politeness.end_fetch(site)
    sites.rest(site)
    assert sites.evict(now) == 1 and not sites.by_key  # forgotten, clock pending or not
    assert sites.ips["10.0.0.1"].ready_at == now + 5.0  # its IP's clock stays until it passes
    sites.enqueue(Job("http://a.test/again", 1), now + 1)
    back = sites.by_key["http://a.test"]
    assert (back.backoffs, back.pages) == (1, 1) and abs(back.ready_at - (now + 60)) < 0.01
    assert back.dns is not None and back.dns[1] == ["10.0.0.1"]  # its DNS answer, and its TTL
    assert abs(back.dns[0] - (now + 300)) < 0.01
    assert sites.evict(now + 6) == 0 and "10.0.0.1" not in sites.ips  # the clock passed
    records.close()


def test_a_page_in_flight_is_counted_on_disk_before_its_fetch_ends(tmp_path: Path) -> None:
    """A kill during a fetch leaves the site's row with that page counted: the restart may
    fetch it again (it was in flight) but never one page more than `maxPagesPerSite`."""
    records = SiteRecords(tmp_path / "sites.sqlite")
    clock = FakeClock(time.monotonic(), time.time() - time.monotonic())
    sites = Sites(Stats(), 0.0, SiteSpill(tmp_path / "spill"), records=records, page_limit=2,
                  clock=clock)
    politeness = Politeness(sites, clock, 1, lambda site, now: False, lambda entry: None)
    now = clock.now()
    sites.enqueue(Job("http://a.test/", 1), now)
    site = sites.by_key["http://a.test"]
    sites.resolved(site, "10.0.0.1", robots_first=False)
    sites.take(site)
    politeness.start_fetch(site)  # the order the pipeline has: the fetch starts, then is counted
    sites.count_page(site)
    records.close()  # what a kill leaves: no end_fetch
    after = SiteRecords(tmp_path / "sites.sqlite")
    saved = after.get("http://a.test")
    after.close()
    assert saved is not None and saved.pages == 1


async def test_c_ares_keeps_no_answers_of_its_own() -> None:
    """The DNS stage has its own bounded cache; c-ares's would hold every answer for its TTL
    (1.3 kB each: hundreds of MB in a broad crawl). A changed answer shows it asked again."""
    async with DnsServer({"moved.test": ["127.0.0.2"]}, ttl=3600) as dns:
        resolver = LoopResolver(nameservers=[dns.address], timeout=2, tries=2)
        first = await resolver.query_dns("moved.test", "A")
        dns.set("moved.test", ["127.0.0.3"])
        second = await resolver.query_dns("moved.test", "A")
        await resolver.close()
    assert [r.data.addr for r in first.answer] == ["127.0.0.2"]
    assert [r.data.addr for r in second.answer] == ["127.0.0.3"]
    assert dns.queries[("moved.test", "A")] == 2


def test_the_shared_ip_probe_counts_pages_a_window_and_leaves_out_the_last_partial_one() -> None:
    starts = [100.0 + t for t in (0.0, 0.5, 1.9, 2.0, 2.5, 3.9, 4.1, 7.0)]
    # [0, 2): 3 fetches; [2, 4): 3; [4, 6): 1; [6, 8): the crawl stopping, left out
    assert measure._windows(starts, 2.0) == [1.5, 1.5, 0.5]
    assert measure._windows(starts[:3], 2.0) == []


async def test_the_dns_cache_forgets_the_oldest_answers_first_a_renewed_one_last(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dns_module, "MAX_CACHE", 2)
    hosts = {f"{name}.test": [f"127.0.0.{i + 2}"] for i, name in enumerate("abc")}
    async with DnsServer(hosts) as server:
        cfg = parse_config(f"dnsServers {server.address}\nallowNetworks 127.0.0.0/8 end\n")
        dns = Dns(cfg, Stats(), Sites(Stats(), 0.0, spill=None),  # type: ignore[arg-type]
                  NetworkPolicy(cfg.allow_networks), lambda s: None)
        workers = dns.start()
        try:
            for host in hosts:
                assert await asyncio.wait_for(dns.lookup(host), 30) == hosts[host]
            now = asyncio.get_running_loop().time()
            dns.purge(now)
            assert list(dns.cache) == ["b.test", "c.test"]  # beyond 2: the oldest went
            dns.cache["b.test"] = (now - 1, dns.cache["b.test"][1])  # b's TTL is over
            assert await asyncio.wait_for(dns.lookup("b.test"), 30) == hosts["b.test"]
            assert list(dns.cache) == ["c.test", "b.test"]  # asked again: the newest
            dns.cache["c.test"] = (now - 1, dns.cache["c.test"][1])
            dns.purge(now)
            assert list(dns.cache) == ["b.test"]  # an expired answer at the front goes too
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await dns.close()


def test_a_site_row_of_an_earlier_version_reads_as_one_without_a_dns_answer(
        tmp_path: Path) -> None:
    path = tmp_path / "sites.sqlite"
    old = sqlite3.connect(path)  # the table as the first version made it
    old.execute("CREATE TABLE sites (site TEXT PRIMARY KEY, ready_at REAL NOT NULL, backoffs "
                "INTEGER NOT NULL, pages INTEGER NOT NULL) WITHOUT ROWID")
    old.execute("INSERT INTO sites VALUES ('http://old.test', 5.0, 1, 2)")
    old.commit()
    old.close()
    records = SiteRecords(path)
    assert records.get("http://old.test") == SiteRecord(5.0, 1, 2)
    records.put("http://new.test", SiteRecord(6.0, 0, 1, ("10.0.0.1", "10.0.0.2"), 99.0))
    records.close()
    again = SiteRecords(path)
    assert again.get("http://new.test") == SiteRecord(6.0, 0, 1, ("10.0.0.1", "10.0.0.2"), 99.0)
    assert len(again) == 2
    again.close()


def test_a_checkpoint_walk_gives_every_windowed_job_each_priority_in_order(
        tmp_path: Path) -> None:
    sites = Sites(Stats(), 0.0, SiteSpill(tmp_path / "spill"))
    jobs = [Job(f"http://{host}.test/{i}", 1, priority=p) for i, (host, p) in enumerate(
        [("a", 1), ("a", 5), ("a", 1), ("b", 0), ("a", 5), ("b", 0)])]
    for job in jobs:
        sites.enqueue(job, 0.0)
    sites.enqueue(Job("http://idle.test/", 1), 0.0)
    sites.take(sites.by_key["http://idle.test"])  # a site with nothing in its window
    walked = sites.jobs()
    assert sorted(walked, key=jobs.index) == jobs
    for priority in (0, 1, 5):  # each priority's jobs in the order they came
        assert [j for j in walked if j.priority == priority] == [
            j for j in jobs if j.priority == priority]
