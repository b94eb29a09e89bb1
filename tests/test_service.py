"""contrib/larbinpy.service as docs/operations.md's "Running as a service" installs it: rated
hardened by systemd, no restart loop on a bad configuration, every path the larbin.conf shown
there writes is writable under the unit, and the crawler works inside the unit's system-call
sandbox."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
from conftest import free_port, html, until
from unitsandbox import unit_settings

from larbinpy.config import parse_config
from larbinpy.crawler import crawl_log_path
from larbinpy.demo import Page, Site

REPO = Path(__file__).parents[1]
UNIT = REPO / "contrib" / "larbinpy.service"
GUIDE = REPO / "docs" / "operations.md"  # where the steps to install the unit are
SETTINGS = unit_settings(UNIT)
EXPOSURE_LIMIT = 3.0
needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed")


def setting(name: str) -> str:
    """The one value of a unit setting."""
    values = SETTINGS.get(name, [])
    assert len(values) == 1, f"{name}: {values}"
    return values[0]


def guide_config() -> tuple[str, str]:
    """The larbin.conf the guide tells the operator to install: (its path, its text)."""
    guide = GUIDE.read_text()
    m = re.search(r"^ *```\n *# (/etc/\S+)\n(.*?)^ *```", guide, re.S | re.M)
    assert m, "docs/operations.md shows no larbin.conf for the service"
    return m[1], textwrap.dedent(m[2])


@needs_systemd_analyze
def test_systemd_rates_the_unit_hardened():
    result = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(UNIT)],
                            capture_output=True, text=True, timeout=120)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", result.stdout)
    assert m, result.stdout + result.stderr
    assert float(m[1]) <= EXPOSURE_LIMIT, result.stdout


@needs_systemd_analyze
def test_systemd_finds_nothing_wrong_in_the_unit(tmp_path: Path):
    # ExecStart names where the guide installs larbinpy; here it is this checkout's interpreter
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace(setting("ExecStart").split()[0],
                                             f"{sys.executable} -m larbinpy"))
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_bad_configuration_is_not_restarted_forever(tmp_path: Path):
    assert setting("Restart") == "on-failure"
    assert "2" in setting("RestartPreventExitStatus").split()
    conf = tmp_path / "larbin.conf"
    conf.write_text("waitDuration soon\n")
    result = subprocess.run([sys.executable, "-m", "larbinpy", "-c", str(conf)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr  # the status the unit does not restart


def test_stop_and_reload_are_the_signals_the_guide_describes():
    assert setting("KillSignal") == "SIGTERM"
    assert setting("ExecReload").endswith("kill -HUP $MAINPID")
    guide = GUIDE.read_text()
    assert "`systemctl reload larbinpy`" in guide
    assert "does not read larbin.conf again" in guide


def test_what_the_guide_config_writes_is_writable_under_the_unit():
    path, text = guide_config()
    cfg = parse_config(text, path)
    assert setting("ExecStart").endswith(f" -c {path}")
    assert Path(path).parent == Path("/etc") / setting("ConfigurationDirectory")
    assert not cfg.exit_at_end and cfg.http_port and cfg.input_port  # a daemon, with its ports
    writable = [Path("/var/lib") / setting("StateDirectory"),
                Path("/var/log") / setting("LogsDirectory"),
                *(Path(p) for v in SETTINGS.get("ReadWritePaths", []) for p in v.split())]
    cwd = Path(setting("WorkingDirectory"))
    written = {"stateDir": cfg.state_dir, "saveDir": cfg.save_dir, "logFile": cfg.log_file,
               "crawlLog": crawl_log_path(cfg)}
    for name, where in written.items():
        assert where is not None, f"the guide's larbin.conf sets no {name}"
        full = cwd / where  # a relative path is taken from WorkingDirectory
        assert any(full.is_relative_to(root) for root in writable), (name, full, writable)


def sandboxed_web() -> list[Site]:
    """Two sites: pages, a 404, a robots.txt (b.test is reached by a submitted URL)."""
    return [
        Site("a.test", "127.0.0.2", {"/": html("/x.html", "/gone.html"),
                                     "/x.html": html("/"), "/gone.html": Page("", status=404)}),
        Site("b.test", "127.0.0.3", {"/": html("/y.html"), "/y.html": html(),
                                     "/robots.txt": Page("User-agent: *\nAllow: /\n",
                                                         content_type="text/plain")}),
    ]


def get(port: int, path: str) -> dict:
    """GET a JSON path of the daemon's port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def post(port: int, url: str) -> dict:
    """POST one URL to the daemon's input port."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/urls", data=url.encode(),
                                 headers={"Content-Type": "text/plain"}, method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


async def answers(port: int, path: str) -> dict | None:
    """The daemon's JSON answer, or None while it does not listen yet."""
    try:
        return await asyncio.to_thread(get, port, path)
    except OSError:
        return None


@needs_systemd_analyze
@pytest.mark.skipif(sys.platform != "linux", reason="seccomp is Linux's")
async def test_the_daemon_crawls_inside_the_units_system_call_sandbox(make_web):
    try:
        probe = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("unitsandbox.py")), str(UNIT),
             sys.executable, "-c", "import mmap; mmap.mmap(-1, 4096, prot=7)"],
            capture_output=True, text=True, timeout=60)
    except OSError as exc:
        pytest.skip(f"cannot run the sandbox: {exc}")
    if "PR_SET_MDWE" in probe.stderr or "libseccomp" in probe.stderr:
        pytest.skip(f"the sandbox cannot be built here: {probe.stderr.splitlines()[-1]}")
    # the sandbox is real: a writable and executable mapping (a JIT's) is refused in it
    assert probe.returncode == 1 and "PermissionError" in probe.stderr, probe.stderr
    tw = await make_web(sandboxed_web())
    port = free_port()
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(
        f"startUrl {tw.url('a.test')}\nlogFormat json\nlogFile {tw.tmp}/larbinpy.log\n"
        "output save\noutput links\noutput warc\n").replace("httpPort 0\ninputPort 0\n", "")
        + f"\nhttpPort {port}\ninputPort {port}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).with_name("unitsandbox.py")), str(UNIT),
        sys.executable, "-m", "larbinpy", "-c", str(conf), cwd=tw.tmp,
        stderr=asyncio.subprocess.PIPE)
    try:
        await until(lambda: answers(port, "/status.json"), "the status port answers")
        assert (await asyncio.to_thread(post, port, tw.url("b.test")))["accepted"] == 1

        async def done() -> bool:
            status = await answers(port, "/status.json")
            return bool(status and status["idle"] and status["pages"] == 5)
        await until(done, "the crawl of both sites and the submitted URL")
        (tw.tmp / "larbinpy.log").rename(tw.tmp / "larbinpy.log.1")  # what logrotate does
        proc.send_signal(signal.SIGHUP)
        await until(lambda: (tw.tmp / "larbinpy.log").exists(), "SIGHUP reopened logFile")
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    log = [json.loads(line) for name in ("larbinpy.log.1", "larbinpy.log")
           for line in (tw.tmp / name).read_text().splitlines()]
    assert not [r for r in log if r["level"] in ("ERROR", "CRITICAL")], log
    assert any(r["message"].startswith("stopped after ") for r in log)
    assert len(list((tw.tmp / "save").glob("*.warc.gz"))) == 1
    assert len((tw.tmp / "save" / "links.jsonl").read_text().splitlines()) == 4  # the 2xx
