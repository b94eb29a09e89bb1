"""Recrawl end to end: pages fetched again on their schedule, conditional GETs, the digest as
the truth, lying validators survived, the figures, and a restart keeping the schedule.

Real servers on loopback (tests/revisitweb.py: a LocalWeb whose pages change when the test
says so, behind honest or lying validators), the real crawler in this process, recrawlMin of
a fraction of a second so that revisits come within a test's seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest
from conftest import free_port, until
from prometheus_client.parser import text_string_to_metric_families
from revisitweb import ChangingPage, RevisitWeb

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.daemon.sitespage import render_site
from larbinpy.daemon.status import snapshot
from larbinpy.daemon.statuspage import metrics_text, render_html
from larbinpy.demo import DnsServer, Site
from larbinpy.frontier import recrawl as revisits_stage
from larbinpy.frontier.recrawldb import SiteStates
from larbinpy.frontier.schedule import Schedule

RECRAWL = "recrawl on\nrecrawlMin 0.2\nrecrawlMax 0.4\n"


@dataclass
class Lab:
    """A RevisitWeb, its DNS server and a place for the crawl's state."""

    web: RevisitWeb
    dns: DnsServer
    tmp: Path

    def url(self, host: str, path: str = "/") -> str:
        """Absolute URL of a page."""
        return self.web.url(host, path)

    def conf(self, extra: str = "", scratch_dir: str = "state") -> str:
        """A daemon's larbin.conf for this web (no ports, no exitAtEnd)."""
        return (f"stateDir {self.tmp}/{scratch_dir}\nsaveDir {self.tmp}/save\n"
                f"dnsServers {self.dns.address}\nallowNetworks 127.0.0.0/8 end\n"
                "httpPort 0\ninputPort 0\nwaitDuration 0\npagesConnexions 4\n"
                f"checkpointInterval 0.5\n{RECRAWL}{extra}\n")

    def log_lines(self) -> list[dict]:
        """The crawl log's lines."""
        path = self.tmp / "save" / "crawl.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

    @contextlib.asynccontextmanager
    async def crawling(self, extra: str = "", scratch: bool = True
                       ) -> AsyncIterator[Crawler]:
        """A crawler running as a daemon; stopped cleanly (SIGTERM's path) at the end."""
        crawler = Crawler(parse_config(self.conf(extra)), scratch=scratch)
        task = asyncio.ensure_future(crawler.run())
        try:
            yield crawler
        finally:
            crawler.request_stop()
            assert await asyncio.wait_for(task, 30) == 0


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    """Factory: a RevisitWeb of one site per mode given, each with pages `/` and `/a.html`."""
    started: list[tuple[RevisitWeb, DnsServer]] = []

    async def make(*modes: str, more: int = 0) -> Lab:
        sites, pages, by_host = [], {}, {}
        for i, mode in enumerate(modes):
            host = f"{mode}.revisit.test"
            sites.append(Site(host, f"127.0.5.{i + 1}"))
            others = [f"/p{j}.html" for j in range(more)]  # more pages, never changing
            pages[host] = {"/": ChangingPage(links=("/a.html", *others)),
                           "/a.html": ChangingPage(), **{p: ChangingPage() for p in others}}
            by_host[host] = mode
        web = RevisitWeb(sites, by_host, pages)
        await web.start()
        dns = DnsServer(web.dns_records)
        await dns.start()
        started.append((web, dns))
        return Lab(web, dns, tmp_path)

    yield make
    for web, dns in started:
        await web.stop()
        await dns.stop()


def start_urls(lab: Lab, *modes: str) -> str:
    """startUrl lines for the sites of these modes."""
    return "".join(f"startUrl {lab.url(f'{m}.revisit.test')}\n" for m in modes)


async def test_a_page_is_fetched_again_answered_304_then_changed_with_validators_verbatim(lab):
    w = await lab("honest")
    host = "honest.revisit.test"
    page = w.web.changing[host]["/a.html"]
    async with w.crawling(start_urls(w, "honest")) as crawler:
        await until(lambda: any(s.status == 304 for s in w.web.answers(host, "/a.html")),
                    "a 304 to a revisit")
        page.change()
        changed_at = len(w.web.answers(host, "/a.html"))
        await until(lambda: any(s.status == 200 and s.version == 1
                                for s in w.web.answers(host, "/a.html")[changed_at:]),
                    "the changed page fetched")
        await until(lambda: sum(s.status == 304 and s.version == 1
                                for s in w.web.answers(host, "/a.html")) >= 1,
                    "a 304 for the changed page's new ETag")
        snap = snapshot(crawler)
        status = snap["recrawl"]
        page_html = render_html(snap)
        metrics = {m.name: m for m in text_string_to_metric_families(
            metrics_text(snap)[0].decode())}
    assert "pages scheduled / due now / overdue" in page_html
    assert "estimated freshness of the copy" in page_html
    assert {"larbinpy_recrawl_pages", "larbinpy_recrawl_max_lateness_seconds",
            "larbinpy_recrawl_revisits", "larbinpy_recrawl_not_modified_share",
            "larbinpy_recrawl_freshness"} <= set(metrics)
    revisits = {s.labels["kind"]: s.value for s in metrics["larbinpy_recrawl_revisits"].samples}
    assert revisits["notModified"] == status["revisits"]["notModified"]
    answers = w.web.answers(host, "/a.html")
    assert answers[0].if_none_match is None and answers[0].status == 200  # a first visit
    for i, after in enumerate(answers[1:], start=1):
        # each revisit sends back what the last answer with a body said, verbatim
        last_200 = [a for a in answers[:i] if a.status == 200][-1]
        assert after.if_none_match == last_200.etag
    lines = [x for x in w.log_lines() if x["url"] == w.url(host, "/a.html")]
    kinds = [x["kind"] for x in lines]
    assert kinds[0] == "success" and "notModified" in kinds
    assert kinds[kinds.index("notModified"):].count("success") >= 1  # the change, seen
    assert all("next" in x and x["next"] > x["t"] for x in lines)  # every line says when
    # within recrawlMin..recrawlMax (an audit of a 304 is due at once: none here, too few),
    # from when it was scheduled: a line is written up to a loop turn later (a loaded machine
    # makes that longer), so only the upper bound holds for every line
    gaps = sorted(x["next"] - x["t"] for x in lines)
    assert gaps[-1] <= 0.4 + 0.01 and gaps[len(gaps) // 2] >= 0.2 - 0.01, gaps
    assert status["scheduled"] >= 2 and status["revisits"]["notModified"] >= 1
    assert 0 < status["not_modified_share"] <= 1 and 0 < status["freshness"] <= 1
    # a page the crawl keeps the copy of: saved again when it changed, not when it did not
    index = (w.tmp / "save" / "d00000" / "index").read_text().splitlines()
    saved = [x for x in index if x.endswith("/a.html")]
    assert len(saved) == kinds.count("success")


async def test_without_validators_the_digest_tells_an_unchanged_page(lab):
    w = await lab("none")
    host = "none.revisit.test"
    async with w.crawling(start_urls(w, "none")):
        await until(lambda: sum(x["kind"] == "unchanged" for x in w.log_lines()
                                if x["url"] == w.url(host, "/a.html")) >= 2,
                    "two unchanged revisits")
    answers = w.web.answers(host, "/a.html")
    assert all(a.if_none_match is None and a.if_modified_since is None for a in answers)
    assert all(a.status == 200 for a in answers)


def next_intervals(w: Lab, host: str) -> list[float]:
    """`next - t` of the crawl log's lines of a site's /a.html."""
    return [x["next"] - x["t"] for x in w.log_lines() if x["url"] == w.url(host, "/a.html")]


async def test_a_last_modified_that_is_always_now_is_not_a_validator(lab):
    w = await lab("lm-now")
    host = "lm-now.revisit.test"
    async with w.crawling(start_urls(w, "lm-now")):
        await until(lambda: len(w.web.answers(host, "/a.html")) >= 4, "four fetches")
    answers = w.web.answers(host, "/a.html")
    # it names the second of the answer: weak (RFC 9110), never sent back; the digest decides
    assert all(a.if_modified_since is None for a in answers)
    kinds = [x["kind"] for x in w.log_lines() if x["url"] == w.url(host, "/a.html")]
    assert kinds[0] == "success" and set(kinds[1:]) == {"unchanged"}
    assert all(0.2 - 0.01 <= t <= 0.4 + 0.01 for t in next_intervals(w, host))


async def test_an_etag_that_changes_on_every_answer_is_dropped_for_its_site(lab):
    w = await lab("etag-churn")
    host = "etag-churn.revisit.test"
    async with w.crawling(start_urls(w, "etag-churn")):
        await until(lambda: len(w.web.answers(host, "/a.html")) >= 4, "four fetches")
    answers = sorted((s for s in w.web.served if s.host == host), key=lambda s: s.at)
    # sent verbatim until an unchanged body under a new ETag proves it false for the site
    # (on either page): from then on no page of the site gets one
    asked = [a for a in answers if a.if_none_match is not None]
    assert asked and all(any(b.etag == a.if_none_match for b in answers) for a in asked)
    proven = answers.index(asked[0])
    assert len(asked) <= 2 and all(a.if_none_match is None for a in answers[proven + 2:])
    kinds = [x["kind"] for x in w.log_lines() if x["url"] == w.url(host, "/a.html")]
    assert kinds[0] == "success" and set(kinds[1:]) == {"unchanged"}


async def test_a_restart_keeps_each_sites_budget_and_the_validators_it_proved_false(lab):
    w = await lab("etag-churn", "honest")
    churn, honest = "etag-churn.revisit.test", "honest.revisit.test"
    keys = {h: w.url(h, "/")[:-1] for h in (churn, honest)}
    seeds = start_urls(w, "etag-churn", "honest")

    def state_of(crawler: Crawler, host: str) -> revisits_stage.SiteRecrawl | None:
        site = crawler.sites.by_key.get(keys[host])
        return None if site is None else crawler.recrawl.site_state(site)

    def revisited(host: str, since: float, n: int) -> bool:
        return sum(a.at > since for a in w.web.answers(host, "/a.html")) >= n

    async with w.crawling(seeds) as crawler:
        await until(lambda: (s := state_of(crawler, churn)) is not None and not s.etag_trusted,
                    "the churning ETag proved false")
        await until(lambda: revisited(honest, 0.0, 3), "the honest site revisited")
    states = SiteStates(w.tmp / "state" / "schedule" / "sites.sqlite")
    saved = {h: states.get(keys[h], 1.0) for h in keys}
    states.close()
    assert saved[churn] is not None and saved[churn].etag_trusted is False
    assert saved[honest] is not None and saved[honest].etag_trusted is True
    # its two pages (one may be between a 304 and its audit, counted again when checked)
    assert saved[honest].budget.pages in (1, 2) and saved[honest].budget.mu > 0
    stopped = time.time()
    async with w.crawling(seeds, scratch=False) as crawler:
        await until(lambda: revisited(churn, stopped, 2) and revisited(honest, stopped, 2),
                    "both sites revisited after the restart")
        after = {h: state_of(crawler, h) for h in keys}
    assert after[churn] is not None and after[churn].etag_trusted is False
    # the pages scheduled before the restart are still counted once in their site's budget
    assert after[honest] is not None and after[honest].budget.pages in (1, 2)
    # the churning site never gets its ETag back; the honest one keeps getting its own
    assert all(a.if_none_match is None for a in w.web.served if a.host == churn
               and a.at > stopped)
    assert any(a.if_none_match for a in w.web.served if a.host == honest and a.at > stopped)


async def test_a_304_that_hides_a_change_is_caught_and_the_site_loses_its_validators(
        lab, monkeypatch):
    # recrawlMin 0.2 s makes every page look fast-changing to the estimator: the risk bound
    # is raised so that audits count within the test's seconds (the rule is the same)
    monkeypatch.setattr(revisits_stage, "AUDIT_EVERY", 3)
    monkeypatch.setattr(revisits_stage, "AUDIT_RISK", 0.9)
    w = await lab("false-304")
    host = "false-304.revisit.test"
    page = w.web.changing[host]["/a.html"]

    def answers() -> list:
        return w.web.answers(host, "/a.html")

    def validated_since_last_200() -> bool:
        """A 304 answered validators since the page's last 200 (the crawler holds a strong
        Last-Modified again: a change now can only be hidden, not found by a plain fetch)."""
        got = answers()
        last = max((i for i, a in enumerate(got) if a.status == 200), default=len(got))
        return any(a.status == 304 and a.if_modified_since for a in got[last:])

    async with w.crawling(start_urls(w, "false-304")) as crawler:

        def trusted() -> bool:
            """The site's validators are still sent."""
            site = crawler.sites.by_key.get(w.url(host, "/")[:-1])
            return site is None or crawler.recrawl.site_state(site).validators_trusted

        changes = 0
        while trusted():
            await until(lambda: validated_since_last_200() or not trusted(),
                        f"a 304 before change {changes + 1}")
            if not trusted():
                break
            page.change()  # the server goes on answering 304 to conditional requests
            changes += 1
            await until(lambda v=changes: any(a.status == 200 and a.version == v
                                              for a in answers()),
                        f"change {changes} found by an unconditional check")
        found = len(answers())
        await until(lambda: len(answers()) >= found + 3, "three more fetches")
        state = crawler.recrawl.site_state(crawler.sites.by_key[w.url(host, "/")[:-1]])
    # two strikes, or one a Last-Modified before the 304 proved (a change a second older)
    assert state.false_304s == revisits_stage.AUDIT_STRIKES
    assert 1 <= changes <= revisits_stage.AUDIT_STRIKES
    for version in range(1, changes + 1):  # each change was found by a check without validators
        first = next(a for a in answers() if a.status == 200 and a.version == version)
        assert first.if_none_match is None and first.if_modified_since is None
    # from then on the site gets no validators: its 304s proved false
    assert all(a.if_modified_since is None and a.status == 200 for a in answers()[found:])
    kinds = [x["kind"] for x in w.log_lines() if x["url"] == w.url(host, "/a.html")]
    assert kinds.count("success") == changes + 1 and kinds[-1] == "unchanged"


async def test_last_modified_of_one_second_resolution_never_hides_a_change(lab):
    w = await lab("lm-coarse")
    host = "lm-coarse.revisit.test"
    page = w.web.changing[host]["/a.html"]
    page.change()  # its Last-Modified names this second
    async with w.crawling(start_urls(w, "lm-coarse")):
        for n in range(1, 7):  # changes within the second of its Last-Modified, while crawled
            await until(lambda n=n: len(w.web.answers(host, "/a.html")) > n, "one more fetch")
            page.change()
    answers = w.web.answers(host, "/a.html")
    seen = -1
    for a in answers:  # a 304 only ever for the version the crawler had (none here)
        if a.status == 304:
            assert a.version == seen
        else:
            seen = a.version
    # a Last-Modified under a second before the answer's Date is not sent back (how many
    # were depends on how soon each fetch came after its change: the machine's load)
    for i, a in enumerate(answers):
        if a.if_modified_since is not None:
            gave = next(p for p in reversed(answers[:i]) if p.status == 200)
            lm = parsedate_to_datetime(a.if_modified_since).timestamp()
            assert math.floor(gave.at) - lm >= 1, (a, gave)


async def test_warc_revisit_records_pass_warcio_and_pywb_replays_every_capture(lab):
    from replay import Pywb, pywb_bin
    from test_warc import check

    w = await lab("honest", "none")
    honest, plain = "honest.revisit.test", "none.revisit.test"
    page = w.web.changing[honest]["/a.html"]
    # captures a second apart at least: pywb tells captures apart by their second
    slow = "recrawlMin 1.1\nrecrawlMax 1.2\noutput warc\noutput mirror\noutput links\n"
    async with w.crawling(start_urls(w, "honest", "none") + slow):
        await until(lambda: any(a.status == 304 for a in w.web.answers(honest, "/a.html")),
                    "a 304", timeout=20)
        for version in (1, 2):  # changed twice
            page.change()
            await until(lambda v=version: any(a.status == 200 and a.version == v
                                              for a in w.web.answers(honest, "/a.html")),
                        f"version {version} fetched", timeout=20)
        await until(lambda: sum(x["kind"] == "unchanged" for x in w.log_lines()
                                if x["url"] == w.url(plain, "/a.html")) >= 1,
                    "an unchanged 200", timeout=20)
    warcs = sorted((w.tmp / "save").glob("*.warc.gz"))
    check(warcs)  # warcio check: every digest verified
    # mirror holds the last version; links saw each version with a body, not the revisits
    mirrored = next(p for p in (w.tmp / "save").rglob("a.html") if honest in str(p)).read_text()
    assert "version 2" in mirrored
    links = [json.loads(x) for x in (w.tmp / "save" / "links.jsonl").read_text().splitlines()]
    assert sum(x["url"] == w.url(honest, "/a.html") for x in links) == 3
    if pywb_bin() is None:
        pytest.skip("pywb is not installed (make .venv-pywb): replay not checked")
    work = w.tmp / "pywb"
    work.mkdir()
    with Pywb(warcs, work) as pywb:
        for host in (honest, plain):
            url = w.url(host, "/a.html")
            captures = pywb.replay_all(url)
            kept = [a for a in w.web.answers(host, "/a.html")]
            assert len(captures) == len(kept)
            last = None
            for (capture, status, body), served in zip(captures, kept, strict=True):
                version = served.version if served.status == 200 else last
                last = version
                assert status == 200 and f"version {version}</p>".encode() in body, capture
            assert {c.mime == "warc/revisit" for c, _, _ in captures} == {False, True}


async def crawler_process(w: Lab, conf: Path) -> asyncio.subprocess.Process:
    """larbinpy as a child process (so it can be killed for real)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), "-q",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=w.tmp)


def early_fetches(w: Lab, host: str, since: float) -> list[str]:
    """Requests after `since` to a page before the due time the crawl log gave it last
    before `since` (a granularity of slack): fetched before its time."""
    due: dict[str, float] = {}
    for x in w.log_lines():
        if x["t"] < since and "next" in x:
            due[x["url"]] = x["next"]
    early, first = [], set()
    for a in sorted(w.web.served, key=lambda a: a.at):
        url = w.url(host, a.path)
        if a.at < since or url in first:
            continue
        first.add(url)
        if a.at < due.get(url, 0) - 0.1:
            early.append(f"{a.path} at {a.at - since:.2f} s, due {due[url] - since:.2f} s")
    return early


async def test_schedules_resume_after_kill_9_and_sigterm_keeps_them(lab):
    w = await lab("honest", more=8)
    host = "honest.revisit.test"
    conf = w.tmp / "larbin.conf"
    conf.write_text(w.conf(start_urls(w, "honest") + "recrawlMin 0.6\nrecrawlMax 1.2\n"
                           "checkpointInterval 0.3\npagesConnexions 2\n"))
    pages = 10
    procs: list[asyncio.subprocess.Process] = []

    async def start() -> asyncio.subprocess.Process:
        procs.append(await crawler_process(w, conf))
        return procs[-1]

    async def sigterm(proc: asyncio.subprocess.Process) -> None:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()

    def first_after(since: float) -> list[str | None]:
        """If-None-Match of each page's first request after `since`."""
        firsts: dict[str, str | None] = {}
        for a in sorted(w.web.served, key=lambda a: a.at):
            if a.at > since:
                firsts.setdefault(a.path, a.if_none_match)
        return list(firsts.values())

    try:
        proc = await start()
        await until(lambda: len(w.web.served) >= 3 * pages, "three rounds of fetches")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        killed = time.time()
        proc = await start()
        await until(lambda: sum(a.at > killed for a in w.web.served) >= 2 * pages,
                    "two rounds after the restart")
        # no page fetched before its due time, but for the fetches in flight at the kill
        assert len(early_fetches(w, host, killed)) <= 2, early_fetches(w, host, killed)
        # every page comes back as a revisit with its validators (no first pass again)
        assert None not in first_after(killed) and len(first_after(killed)) == pages
        await sigterm(proc)
        stopped = time.time()
        proc = await start()
        await until(lambda: sum(a.at > stopped for a in w.web.served) >= pages, "a round more")
        await sigterm(proc)
        assert early_fetches(w, host, stopped) == []  # a clean stop keeps every schedule
        assert None not in first_after(stopped) and len(first_after(stopped)) == pages
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_the_done_record_keeps_no_revisit_and_a_kill_9_stops_none(lab):
    """Issue 45: the done-record took every revisit's URL until the next checkpoint (it grew
    with revisits). And after a `kill -9`, a site whose queue held only jobs the record said
    were done had them skipped with no fetch ending, so its waiting revisits were never fed:
    the daemon revisited nothing again. Now the record holds the first pass only (the
    schedule decides revisits), and a skipped job lets the site's revisits go."""
    w = await lab("honest", more=8)
    conf = w.tmp / "larbin.conf"
    conf.write_text(w.conf(start_urls(w, "honest") + "recrawlMin 0.2\nrecrawlMax 0.4\n"
                           "checkpointInterval 600\npagesConnexions 2\n"))
    pages = 10
    done = w.tmp / "state" / "done"
    proc = await crawler_process(w, conf)
    try:
        await until(lambda: len(w.web.served) >= 6 * pages, "five rounds of revisits")
        assert len(done.read_text().splitlines()) <= pages  # no line a revisit
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        killed = time.time()
        proc = await crawler_process(w, conf)

        def revisits_after() -> Counter[str]:
            return Counter(a.path for a in w.web.served if a.at > killed)

        await until(lambda: len(revisits_after()) == pages
                    and min(revisits_after().values()) >= 3, "every page revisited 3 times "
                    "after the restart")
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def sitemap(lab: Lab, host: str, lastmod: float) -> str:
    """A urlset listing /a.html with a lastmod."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(lastmod))
    return ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"<url><loc>{lab.url(host, '/a.html')}</loc><lastmod>{stamp}</lastmod></url>"
            "</urlset>")


async def test_a_sitemap_lastmod_makes_a_page_due_until_it_proves_false(lab):
    from larbinpy.demo import Page

    w = await lab("honest", more=3)
    host = "honest.revisit.test"
    site = w.web.sites[host]
    site.pages["/robots.txt"] = Page(f"Sitemap: {w.url(host, '/sitemap.xml')}\n",
                                     content_type="text/plain")
    site.pages["/sitemap.xml"] = Page(sitemap(w, host, time.time() - 7200),
                                      content_type="application/xml")
    page = w.web.changing[host]["/a.html"]

    def a_fetches() -> int:
        return len(w.web.answers(host, "/a.html"))

    def sitemap_reads() -> int:
        return sum(x.path == "/sitemap.xml" for x in w.web.hits)

    # revisits far off: only a lastmod makes /a.html due within the test; robots.txt (and so
    # the sitemap) is read again each time the site has work after robotsTtl
    slow = "recrawlMin 30\nrecrawlMax 60\nrobotsTtl 0.2\ndepthInSite 0\n"
    async with w.crawling(f"startUrl {w.url(host, '/a.html')}\n" + slow) as crawler:
        await until(lambda: a_fetches() == 1 and sitemap_reads() == 1, "the first pass")
        for n, (changes, expect) in enumerate([(True, 200), (False, 304)]):
            if changes:
                page.change()
            site.pages["/sitemap.xml"] = Page(sitemap(w, host, time.time() + 2),
                                              content_type="application/xml")
            await asyncio.sleep(0.25)  # robotsTtl runs out (a condition on the clock)
            crawler.input.submit([w.url(host, f"/p{n}.html")])  # work for the site
            await until(lambda n=n: a_fetches() == n + 2, f"lastmod {n + 1} acted on")
            assert w.web.answers(host, "/a.html")[-1].status == expect
        # the second lastmod was false (a 304): the site's lastmods are not trusted any more
        page.change()
        site.pages["/sitemap.xml"] = Page(sitemap(w, host, time.time() + 2),
                                          content_type="application/xml")
        def sitemap_lines() -> int:
            return sum(x["url"].endswith("/sitemap.xml") for x in w.log_lines())

        before = sitemap_lines()
        await asyncio.sleep(0.25)
        crawler.input.submit([w.url(host, "/p2.html")])
        # its line is written after its lastmods were checked
        await until(lambda: sitemap_lines() > before, "the sitemap read again")
        assert w.url(host, "/a.html") not in crawler.recrawl.claims
        site_record = crawler.sites.by_key[w.url(host, "/")[:-1]]
        assert crawler.recrawl.site_state(site_record).lastmod_trusted is False
    assert a_fetches() == 3


async def test_submit_force_makes_a_known_page_due_now(lab):
    w = await lab("honest")
    host = "honest.revisit.test"
    url = w.url(host, "/a.html")
    http = free_port()
    async with w.crawling(start_urls(w, "honest") + f"recrawlMin 30\nrecrawlMax 60\n"
                          f"inputPort {http}\n") as crawler:
        await until(lambda: len(w.web.answers(host, "/a.html")) == 1, "the first pass")
        await until(lambda: crawler.recrawl.schedule.get(url) is not None, "scheduled")
        await until(lambda: crawler.turn.pending is False, "its line written")
        run = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "larbinpy", "submit", "--port", str(http), "--force", url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(run.communicate(), 30)
        assert run.returncode == 0, (out, err)
        await until(lambda: len(w.web.answers(host, "/a.html")) == 2, "fetched again at once")
        # a revisit (validators sent), not a second first visit
        assert w.web.answers(host, "/a.html")[1].if_none_match is not None
        await until(lambda: len([x for x in w.log_lines() if x["url"] == url]) >= 2,
                    "the revisit's crawl-log line")  # the server answers before it is written
        kinds = [x["kind"] for x in w.log_lines() if x["url"] == url]
        assert kinds == ["success", "notModified"]


async def test_never_fetched_urls_go_before_due_revisits(lab):
    w = await lab("honest", more=12)
    host = "honest.revisit.test"
    new = [w.url(host, f"/p{i}.html") for i in range(12)]
    # the seed alone first (depth 0: its links are not followed)
    async with w.crawling(f"startUrl {w.url(host, '/a.html')}\nwaitDuration 0.05\n"
                          "depthInSite 0\n") as crawler:
        await until(lambda: len(w.web.answers(host, "/a.html")) >= 3, "revisits going on")
        submitted = time.time()
        assert crawler.input.submit(new).accepted == 12
        await until(lambda: all(any(w.url(host, s.path) == u for s in w.web.served)
                                for u in new), "the new URLs fetched")
        last_new = max(s.at for s in w.web.served if w.url(host, s.path) in new)
    revisits = [s for s in w.web.answers(host, "/a.html") if submitted < s.at < last_new]
    # the 12 new URLs took over 0.55 s (waitDuration apart), over two revisit intervals: at
    # most the revisit already queued when they came went before them
    assert last_new - submitted >= 0.55 and len(revisits) <= 1, revisits
    gaps = [b.at - a.at for a, b in zip(w.web.served, w.web.served[1:], strict=False)]
    assert min(gaps) >= 0.05 - 0.005  # waitDuration holds between revisits and new URLs


async def publish(w: Lab, host: str, articles: int) -> list[float]:
    """Publish articles on the site's front page one after the other, each once the one before
    was fetched: the seconds each took to be fetched."""
    front = w.web.changing[host]["/"]
    delays = []
    for k in range(articles):
        path = f"/new{k}.html"
        w.web.changing[host][path] = ChangingPage()
        front.links = (path, *front.links)
        front.change()
        published = time.monotonic()
        await until(lambda path=path: w.web.answers(host, path), f"{path} fetched")
        delays.append(time.monotonic() - published)
    return delays


async def test_a_front_page_listing_new_articles_is_revisited_for_them_and_they_come_soon(lab):
    """A front page that lists each new article as it appears (so it changes at every visit,
    too fast for a copy of it to stay fresh) is revisited for what it discovers: each new
    article is fetched within seconds, the crawl log's line of the revisit that found it says
    so, and status.json reports the pages found and the delay."""
    w = await lab("honest", more=30)
    host = "honest.revisit.test"
    extra = "recrawlMax 30\nwaitDuration 0.05\nconnectionsPerHost 1\n"
    async with w.crawling(start_urls(w, "honest") + extra) as crawler:
        await until(lambda: len(w.web.answers(host, "/p29.html")) >= 1, "the first pass")
        delays = await publish(w, host, 8)
        await until(lambda: crawler.recrawl.figures()["discovery"]["found_by_revisits"] >= 8,
                    "the discoveries counted")
        figures = crawler.recrawl.figures()["discovery"]
        detail = crawler.site_view(f"{host}:{w.web.port}")  # /sites/HOST
        page = render_site(host, detail)
    assert sorted(delays)[len(delays) // 2] < 2.0, delays
    assert detail and detail[0]["discovers_most"][0]["url"] == w.url(host)
    assert "pages that discover most" in page and w.url(host) in page
    assert figures["delay_median_s"] is not None and figures["top_pages"][0]["url"] == w.url(host)
    found = [line for line in w.log_lines() if line["url"] == w.url(host) and line.get("new")]
    assert sum(line["new"] for line in found) >= 8
    # what a restart reads: the front page's record keeps its discovery estimate
    kept = Schedule(w.tmp / "state" / "schedule").get(w.url(host))
    assert kept is not None and revisits_stage.Policy.found(kept.stats) > 0


async def test_a_site_emitting_new_urls_without_end_does_not_delay_another_sites_news(lab):
    """A site whose front page lists new URLs at every fetch, without end (a calendar, a
    session-id trap), spends its own politeness budget on them: while it keeps its own
    connection busy with its endless new pages, another site's new articles are still fetched
    within seconds."""
    w = await lab("honest", "trap", more=10)
    news, trap = "honest.revisit.test", "trap.revisit.test"
    calendar = w.web.changing[trap]["/"]
    stop = asyncio.Event()

    async def emit() -> None:
        """The trap: 20 new days on its front page every 50 ms."""
        k = 0
        while not stop.is_set():
            days = tuple(f"/day{k + j}.html" for j in range(20))
            for path in days:
                w.web.changing[trap][path] = ChangingPage()
            calendar.links = days + calendar.links[:40]
            calendar.change()
            k += 20
            await asyncio.sleep(0.05)

    def days_fetched() -> int:
        return sum(1 for path in list(w.web.changing[trap]) if w.web.answers(trap, path)
                   and path.startswith("/day"))

    extra = "recrawlMax 30\nwaitDuration 0.05\nconnectionsPerHost 1\n"
    async with w.crawling(start_urls(w, "honest", "trap") + extra):
        await until(lambda: len(w.web.answers(news, "/p9.html")) >= 1, "the first pass")
        emitter = asyncio.ensure_future(emit())
        try:
            await until(lambda: days_fetched() >= 50, "the trap's first days")
            before = days_fetched()
            delays = await publish(w, news, 6)
            trapped = days_fetched() - before
        finally:
            stop.set()
            await emitter
    assert sorted(delays)[len(delays) // 2] < 2.0, delays
    assert trapped >= 30  # the trap kept its own connection busy all along
