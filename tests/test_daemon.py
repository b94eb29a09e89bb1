"""The daemon as an operator runs it: its own process, log files, a browser on the status page."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sys
import urllib.request

import pytest
from conftest import free_port, html

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
    for _ in range(200):
        try:
            await asyncio.to_thread(get, port, "/status.json")
            return proc, port
        except OSError:
            await asyncio.sleep(0.05)
    proc.kill()
    raise AssertionError("daemon did not start")


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
    """Poll status.json until idle with at least `pages` pages fetched (bounded)."""
    for _ in range(200):
        status = json.loads(await asyncio.to_thread(get, port, "/status.json"))
        if status["idle"] and status["pages"] >= pages:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"not idle: {status}")


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
        for _ in range(100):
            if log.exists():
                break
            await asyncio.sleep(0.05)
        assert log.exists() and "log files reopened" in log.read_text()
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
