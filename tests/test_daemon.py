"""The daemon as an operator runs it: its own process, log files, a browser on the status page."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import sys
import urllib.request

import pytest
from conftest import free_port, html, until

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.daemon.progress import Progress
from larbinpy.demo import Site


def web() -> list[Site]:
    """One small site."""
    return [Site("d.test", "127.0.0.2", {"/": html("/a.html", "/b.html"),
                                         "/a.html": html(), "/b.html": html()})]


async def start_daemon(tw, extra: str = "") -> tuple[asyncio.subprocess.Process, int]:
    """larbinpy without exitAtEnd, status and input on one port; waits until it answers."""
    port = free_port()
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(extra).replace("httpPort 0\ninputPort 0\n", "")
                    + f"\nhttpPort {port}\ninputPort {port}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), cwd=tw.tmp,
        stderr=asyncio.subprocess.PIPE)

    async def answers() -> bool:
        if proc.returncode is not None:
            raise AssertionError(f"the daemon exited ({proc.returncode}) before answering")
        try:
            await asyncio.to_thread(get, port, "/status.json")
            return True
        except OSError:
            return False

    try:
        await until(answers, f"the daemon's status page answering on port {port}")
    except BaseException:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        raise
    return proc, port


def get(port: int, path: str) -> bytes:
    """GET a path of the daemon's port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.read()


def submit(port: int, url: str) -> dict:
    """POST one URL to the input port."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/urls", data=url.encode(),
                                 headers={"Content-Type": "text/plain"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


async def wait_idle(port: int, pages: int) -> dict:
    """Poll status.json until idle with at least `pages` pages fetched; its last answer."""
    status: dict = {}

    async def idle() -> bool:
        nonlocal status
        status = json.loads(await asyncio.to_thread(get, port, "/status.json"))
        return status["idle"] and status["pages"] >= pages

    await until(idle, f"the daemon idle after {pages} pages")
    return status


async def test_sighup_reopens_the_log_file_for_logrotate(make_web):
    tw = await make_web(web())
    log = tw.tmp / "larbinpy.log"
    proc, port = await start_daemon(tw, f"logFile {log}\n")
    try:
        await asyncio.to_thread(submit, port, tw.url("d.test"))
        await wait_idle(port, 3)
        rotated = tw.tmp / "larbinpy.log.1"
        log.rename(rotated)  # what logrotate does
        proc.send_signal(signal.SIGHUP)
        await until(lambda: log.exists() and "log files reopened" in log.read_text(),
                    f"{log} made again, saying the log files were reopened")
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    assert "stopping" in log.read_text()  # logging went on in the new file


def chromium() -> str | None:
    """Path of a Chromium binary, if one is installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
async def test_status_page_shows_the_figures_in_a_real_browser(make_web):
    browser = chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (.ci/run installs Debian's chromium)")
    tw = await make_web(web())
    proc, port = await start_daemon(tw)
    try:
        await asyncio.to_thread(submit, port, tw.url("d.test"))
        await wait_idle(port, 3)
        dump = await asyncio.create_subprocess_exec(
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tw.tmp / 'chrome'}", "--dump-dom",
            f"http://127.0.0.1:{port}/",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        dom, _ = await asyncio.wait_for(dump.communicate(), 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 30)
    page = dom.decode()
    assert "<h1>larbinpy" in page
    assert "pages fetched</th><td>3</td>" in page
    assert "<th>success</th><td>3</td>" in page
    assert '<svg id="chart"' in page or "throughput chart" in page


def logged(tw, extra: str) -> str:
    """Config lines: log to tmp/larbinpy.log, links output, waitDuration 30 (after the first
    page of d.test two of its URLs stay queued), then `extra`."""
    return f"logFile {tw.tmp / 'larbinpy.log'}\noutput links\nrobots off\nwaitDuration 30\n{extra}"


async def crawl_one_page_then(tw, extra: str, stop: signal.Signals) -> tuple[int, str]:
    """A daemon (`logged` lines) gets d.test, fetches a page, then gets `stop`; (its port,
    the log so far)."""
    proc, port = await start_daemon(tw, logged(tw, extra))
    try:
        await asyncio.to_thread(submit, port, tw.url("d.test"))
        await until(lambda: json.loads(get(port, "/status.json"))["pages"] >= 1, "a page")
    finally:
        proc.send_signal(stop)
        await asyncio.wait_for(proc.communicate(), 30)
    return port, (tw.tmp / "larbinpy.log").read_text()


async def start_again(tw, extra: str, before: str) -> str:
    """The same daemon started again and stopped at once; what it added to the log."""
    proc, _ = await start_daemon(tw, logged(tw, extra))
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.communicate(), 30)
    return (tw.tmp / "larbinpy.log").read_text()[len(before):]


async def test_the_log_says_config_state_ports_and_outputs_at_start(make_web):
    """Started, stopped with two URLs still queued (waitDuration 30), started again: the log
    names the file, the state dir (new, then resumed with its count), ports and outputs."""
    tw = await make_web(web())
    port, first = await crawl_one_page_then(tw, "", signal.SIGTERM)
    assert "stopping: no new fetches; waiting for the 0 in flight" in first
    assert "larbinpy.progress: stopped after " in first.splitlines()[-1]  # the end, in the file
    assert f"config {tw.tmp / 'larbin.conf'}" in first
    assert f"stateDir {tw.tmp / 'state'}: new crawl" in first
    assert f"status page (httpPort) on http://127.0.0.1:{port}/" in first
    assert f"input port (inputPort) on http://127.0.0.1:{port}/urls" in first
    assert f"outputs: links in {tw.tmp / 'save'}" in first
    again = await start_again(tw, "", first)
    assert f"stateDir {tw.tmp / 'state'}: resumed, about 2 URLs to fetch" in again


async def test_a_restart_after_kill_9_before_any_checkpoint_says_resumed(make_web):
    """Killed before its first checkpoint, the crawl left FIFOs and a done-record: the next
    start resumes them and says so (not "new crawl")."""
    tw = await make_web(web())
    _, first = await crawl_one_page_then(tw, "checkpointInterval 3600\n", signal.SIGKILL)
    assert f"stateDir {tw.tmp / 'state'}: new crawl" in first
    again = await start_again(tw, "checkpointInterval 3600\n", first)
    assert "new crawl" not in again
    assert f"stateDir {tw.tmp / 'state'}: resumed" in again


async def test_without_a_terminal_progress_goes_to_the_log(make_web, monkeypatch, caplog):
    monkeypatch.setattr(Progress, "LOG_EVERY", 0.5)
    caplog.set_level(logging.INFO, logger="larbinpy.progress")
    tw = await make_web(web())
    crawler = Crawler(parse_config(tw.config_text("")), scratch=True, progress=True)
    task = asyncio.ensure_future(crawler.run())
    try:
        crawler.input.submit([tw.url("d.test")])
        crawler.changed()
        await until(lambda: any("pages" in r.getMessage() and "errors 0" in r.getMessage()
                                for r in caplog.records if r.name == "larbinpy.progress"),
                    "a progress line in the log")
    finally:
        crawler.request_stop()
        assert await asyncio.wait_for(task, 30) == 0
