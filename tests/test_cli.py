"""The `larbinpy` command line as an operator uses it: real processes, real files."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port
from test_ports import daemon, small_web

from larbinpy import __version__

ROOT = Path(__file__).resolve().parent.parent


def larbinpy(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command, as the installed entry point would."""
    return subprocess.run([sys.executable, "-m", "larbinpy", *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_version_and_usage_name_the_subcommands() -> None:
    version = larbinpy("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"larbinpy {__version__}"
    usage = larbinpy("-h")
    assert usage.returncode == 0
    assert "{submit,check-config,bench,wacz}" in usage.stdout.splitlines()[1]


def test_every_option_has_help_text() -> None:
    for args, options in ((["-h"], ["-v, --verbose", "-q, --quiet"]),
                          (["check-config", "-h"], ["-c CONFIG, --config CONFIG"]),
                          (["submit", "-h"], ["--timeout TIMEOUT", "--token TOKEN"]),
                          (["wacz", "-h"], ["-o FILE, --output FILE", "--title TITLE"])):
        lines = larbinpy(*args).stdout.splitlines()
        for option in options:
            assert help_of(lines, option), f"{option} has no help in {args}"


def help_of(lines: list[str], option: str) -> str:
    """The help argparse printed for `option`: after it on its line and on the lines indented
    under it (options are indented by two spaces, their help deeper)."""
    i = next(i for i, x in enumerate(lines) if x.strip().startswith(option))
    text = [lines[i].strip()[len(option):]]
    for line in lines[i + 1:]:
        if not line.startswith("   "):
            break
        text.append(line)
    return " ".join(t.strip() for t in text).strip()


def test_global_options_go_before_the_subcommand(tmp_path: Path) -> None:
    conf = tmp_path / "mine.conf"
    conf.write_text("startUrl http://example.com/\n")
    quiet = larbinpy("-q", "check-config", "-c", str(conf))
    assert quiet.returncode == 0, quiet.stderr
    assert f"effective configuration of {conf}" in quiet.stdout
    named = larbinpy("-c", str(conf), "check-config", cwd=tmp_path)
    assert named.returncode == 0 and str(conf) in named.stdout


async def test_submit_reads_larbin_conf_and_the_token_from_the_environment_in_batches(
        make_web, tmp_path: Path) -> None:
    """2,500 URLs through a port taking 1,000 per request and a small body: sent in batches,
    port and limits from the crawler's larbin.conf, the token from LARBINPY_TOKEN."""
    tw = await make_web(small_web())
    extra = 'inputToken "t0ken"\ninputMaxUrls 1000\ninputMaxBody 40000\n'
    async with daemon(tw, extra) as (crawler, client, status_url, input_url):
        conf = tmp_path / "larbin.conf"
        conf.write_text(f"inputPort {input_url.rsplit(':', 1)[1]}\n{extra}".replace(
            'inputToken "t0ken"', 'inputToken "not-this-one"'))
        urls = "".join(tw.url("one.test", f"/n{i}") + "\n" for i in range(2500))
        without = await asyncio.to_thread(larbinpy, "submit", "-", cwd=tmp_path, stdin=urls)
        assert without.returncode == 2 and "401" in without.stderr  # larbin.conf's token
        sent = await asyncio.to_thread(larbinpy, "submit", "-", cwd=tmp_path, stdin=urls,
                                       env={"LARBINPY_TOKEN": "t0ken"})
        assert sent.returncode == 0, sent.stderr
        assert "accepted 2500, rejected 0" in sent.stdout
        assert crawler.stats.urls_seen >= 2500


async def test_submit_says_when_larbin_conf_turns_the_port_off(tmp_path: Path) -> None:
    (tmp_path / "larbin.conf").write_text("inputPort 0\n")
    result = larbinpy("submit", "http://example.com/", cwd=tmp_path)
    assert result.returncode == 2 and "inputPort 0" in result.stderr


OLD_PYTHON = '#!/bin/sh\n[ "$1" = -V ] && { echo "Python 3.9.2"; exit 0; }\nexit 1\n'


def _old_python(path: Path) -> Path:
    """An executable that answers like a Python 3.9 (too old for larbinpy) would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(OLD_PYTHON)
    path.chmod(0o755)
    return path


def test_make_says_plainly_that_python_is_too_old(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    result = subprocess.run(
        ["make", "run", f"VENV={venv}", f"PYTHON={_old_python(tmp_path / 'python3.9')}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "larbinpy needs Python 3.11 or later" in result.stderr
    assert "Python 3.9.2" in result.stderr
    assert not venv.exists()  # nothing half-made to trip the next run


def test_make_remakes_a_venv_left_by_an_older_python(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _old_python(venv / "bin" / "python")
    result = subprocess.run(["make", "-n", "run", f"VENV={venv}"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert "made by a Python older than 3.11 (Python 3.9.2): making it again" in result.stdout
    assert not venv.exists()


def test_a_place_it_cannot_write_is_a_configuration_error(tmp_path: Path) -> None:
    """stateDir, saveDir, logFile or the crawl log where nothing can be written: check-config
    and the crawl both exit 2 naming the file, the line and why; nothing is created."""
    (tmp_path / "afile").write_text("")
    ro = tmp_path / "ro"
    ro.mkdir()
    cases = [("stateDir", "afile/state", "afile is not a directory"),
             ("saveDir", "afile/save", "afile is not a directory"),
             ("logFile", "afile", None),  # an existing file is fine: it is appended to
             ("logFile", "ro", "is a directory"),
             ("crawlLog", str(tmp_path / "afile" / "c.jsonl"), "afile is not a directory")]
    for key, path, problem in cases:
        conf = tmp_path / "larbin.conf"
        conf.write_text(f"exitAtEnd\nhttpPort 0\ninputPort 0\nstateDir {tmp_path}/s\n"
                        f"saveDir {tmp_path}/save\n{key} {path}\n")
        for args in (("check-config", "-c", str(conf)), ("-c", str(conf))):
            proc = larbinpy(*args, cwd=tmp_path)
            if problem is None:
                assert proc.returncode == 0, proc.stderr
                continue
            assert proc.returncode == 2, (key, proc.stderr)
            assert f"larbin.conf:6: {key} {path}: " in proc.stderr, proc.stderr
            assert problem in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "afile").is_dir()


def test_a_state_dir_on_a_read_only_file_system_is_a_configuration_error(tmp_path: Path) -> None:
    """What ProtectSystem=strict does to a stateDir outside the unit's writable directories:
    a real read-only mount (a private mount namespace), exit 2 with the reason."""
    from test_exhaustion import can_mount_tmpfs

    if reason := can_mount_tmpfs():
        pytest.skip(reason)
    ro = tmp_path / "ro"
    ro.mkdir()
    conf = tmp_path / "larbin.conf"
    conf.write_text(f"exitAtEnd\nhttpPort 0\ninputPort 0\nstateDir {ro}/state\n"
                    f"saveDir {tmp_path}/save\n")
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro,size=64k tmpfs {ro} && "
         f"exec {sys.executable} -m larbinpy -c {conf}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"larbin.conf:4: stateDir {ro}/state: {ro} is on a read-only file system" \
        in proc.stderr, proc.stderr


async def test_scratch_moves_the_last_crawls_outputs_aside(make_web) -> None:
    """`--scratch` twice (as `make run` does): the second crawl's saveDir holds its own pages
    only, once each; the first crawl's files are kept beside it, not deleted."""
    tw = await make_web(small_web())
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(f"exitAtEnd\nstartUrl {tw.url('one.test')}\noutput save\n"))
    for _ in range(2):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "larbinpy", "-c", str(conf), "--scratch", cwd=tw.tmp,
            stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
    index = (tw.tmp / "save" / "d00000" / "index").read_text().splitlines()
    assert len(index) == 3 and not (tw.tmp / "save" / "d00001").exists(), index
    crawl_log = (tw.tmp / "save" / "crawl.jsonl").read_text().splitlines()
    assert len(crawl_log) == 3, crawl_log
    aside = [p for p in tw.tmp.iterdir() if p.name.startswith("save.")]
    assert len(aside) == 1 and len((aside[0] / "d00000" / "index").read_text().splitlines()) == 3
    assert f"were moved to {aside[0]}" in err.decode()


async def test_a_state_made_with_another_default_hash_size_resumes(make_web) -> None:
    """A stateDir made when hashSize's default was 2^30 resumes under a larbin.conf that sets
    none (the default is 2^27 now); one that sets a different size is still refused."""
    tw = await make_web(small_web())
    conf = tw.tmp / "larbin.conf"
    base = tw.config_text(f"exitAtEnd\nstartUrl {tw.url('one.test')}\n")
    for text, code in ((base + "hashSize 2^30\n", 0), (base, 0), (base + "hashSize 2^24\n", 2)):
        conf.write_text(text)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "larbinpy", "-c", str(conf), cwd=tw.tmp,
            stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == code, err.decode()
    assert "state was made with hashSize 1073741824" in err.decode()


async def _start_daemon_and_read_until(conf: Path, cwd: Path, wanted: str) -> str:
    """Start `larbinpy -c conf`, read its log until a line holds `wanted`, stop it with
    SIGTERM (it must exit 0); the log it wrote."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), cwd=cwd,
        stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        while not any(wanted in line for line in lines):
            line = await asyncio.wait_for(proc.stderr.readline(), 30)
            assert line, f"the daemon exited before logging {wanted!r}: {''.join(lines)}"
            lines.append(line.decode())
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(proc.stderr.read(), 60)
        lines.append(rest.decode())
        assert await proc.wait() == 0, "".join(lines)
    return "".join(lines)


async def test_a_daemon_with_nothing_it_can_ever_crawl_says_so(tmp_path: Path) -> None:
    """No startUrl, no seedFile, an empty stateDir and inputPort 0: nothing can ever reach it,
    and the log says so at start instead of waiting silently; the same daemon with an input
    port (URLs may come) does not."""
    base = f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\nhttpPort 0\n"
    conf = tmp_path / "larbin.conf"
    conf.write_text(base + "inputPort 0\n")
    log = await _start_daemon_and_read_until(conf, tmp_path, "nothing to crawl")
    assert "no startUrl, no seedFile" in log
    conf.write_text(base + f"inputPort {free_port()}\n")
    log = await _start_daemon_and_read_until(conf, tmp_path, "input port (inputPort) on")
    assert "nothing to crawl" not in log
