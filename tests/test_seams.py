"""The stages' seams (what a cluster node replaces): the embedded defaults and their contracts.

Input's `Admission` gets only new, in-scope jobs, and the embedded one queues them on the FIFO
and marks them seen; the site table's `Forward` keeps a taken job out of the table entirely.
"""

from __future__ import annotations

from pathlib import Path

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.frontier.diskqueue import SiteSpill
from larbinpy.frontier.seen import BitmapSeenSet
from larbinpy.frontier.sites import Sites
from larbinpy.links.urls import Normalizer
from larbinpy.records import Job
from larbinpy.stages.input import Input
from larbinpy.stats import Stats


def built_crawler(tmp_path: Path) -> Crawler:
    """An embedded crawler whose stages are built but not running."""
    cfg = parse_config(f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\n"
                       "httpPort 0\ninputPort 0\noutput none\n")
    return Crawler(cfg, scratch=True)


def popped(crawler: Crawler) -> list[str]:
    """Every URL on the crawler's FIFOs, in order."""
    urls = []
    while (job := crawler.frontier.pop()) is not None:
        urls.append(job.url)
    return urls


def test_the_embedded_admission_queues_new_urls_once_and_marks_them_seen(tmp_path):
    crawler = built_crawler(tmp_path)
    try:
        urls = [f"http://a.test/{i}" for i in range(3)]
        crawler.input.submit([*urls, urls[0]])
        crawler.input.add_links(Job("http://a.test/", 3), "http://a.test/",
                                [urls[1], "http://a.test/new"])
        assert crawler.sequencer.wake.is_set()  # the sequencer is told
        assert popped(crawler) == [*urls, "http://a.test/new"]
        assert crawler.seen.missing([*urls, "http://a.test/new"]) == []
        assert crawler.stats.urls_seen == 4
        assert crawler.stats.outcomes["urlDup"] == 1  # the link seen before
    finally:
        crawler._close()


class Recorded:
    """An `Admission` that keeps what it is given (the seam a cluster node plugs into)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], bool]] = []

    def admit(self, jobs: list[Job], force: bool = False) -> None:
        self.calls.append(([j.url for j in jobs], force))


def test_input_admits_only_new_in_scope_urls_and_passes_force_on(tmp_path):
    cfg = parse_config("noExternalLinks\n")
    seen = BitmapSeenSet(tmp_path / "seen", 1 << 20)
    seen.add(["http://a.test/old"])
    admission = Recorded()
    inp = Input(cfg, Normalizer(), seen, None, Stats(), admission,  # type: ignore[arg-type]
                lambda: None)
    inp.add_links(Job("http://a.test/", 3), "http://a.test/",
                  ["http://a.test/old", "http://b.test/out", "http://a.test/new"])
    inp.submit(["http://a.test/old"], force=True)
    inp.submit(["http://a.test/old", "ftp://a.test/x"])
    assert admission.calls == [(["http://a.test/new"], False), (["http://a.test/old"], True)]
    seen.close()


def test_a_forwarded_job_never_enters_the_site_table(tmp_path):
    taken: list[tuple[str, str]] = []

    def forward(key: str, job: Job) -> bool:
        """Sites of b.test belong elsewhere."""
        if key == "http://b.test":
            taken.append((key, job.url))
            return True
        return False

    started: list[str] = []
    sites = Sites(Stats(), 0.0, SiteSpill(tmp_path / "spill"), forward=forward)
    sites.connect(on_new_site=lambda site: started.append(site.key),
                  on_job=lambda site: None)
    for url in ("http://a.test/1", "http://b.test/1", "http://a.test/2", "http://b.test/2"):
        sites.enqueue(Job(url, 1), now=0.0)
    assert taken == [("http://b.test", "http://b.test/1"), ("http://b.test", "http://b.test/2")]
    assert list(sites.by_key) == started == ["http://a.test"]  # DNS asked for a.test only
    assert sites.queued == sites.in_memory == 2
    assert [j.url for j in sites.jobs()] == ["http://a.test/1", "http://a.test/2"]
