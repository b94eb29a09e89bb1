"""`logFormat json`: a real crawl's log is one JSON object a line, on stderr or in logFile."""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import html

from larbinpy.demo import Page, Site

FIELDS = {"time", "level", "logger", "message"}
# a userOutput hook that fails on one page: the crawler logs the exception and carries on
HOOK = """
def on_page(page):
    if page.url.endswith("/boom.html"):
        raise ValueError("boom on " + page.url)
"""


def web() -> list[Site]:
    """A few pages: one the hook fails on, one 404, one on a host DNS does not know."""
    return [Site("a.test", "127.0.0.2", {
        "/": html("/ok.html", "/boom.html", "/missing.html", "http://nowhere.test/"),
        "/ok.html": html("/"),
        "/boom.html": html(),
        "/missing.html": Page("gone", status=404),
    })]


async def crawl(tw, body: str, *options: str) -> tuple[int, str]:
    """Run `larbinpy` on the test web with `body` in its larbin.conf (exitAtEnd, the failing
    hook); return its exit code and stderr."""
    (tw.tmp / "jsonhook.py").write_text(HOOK)
    conf = tw.tmp / "larbin.conf"
    conf.write_text(tw.config_text(
        f"exitAtEnd\nuserOutput jsonhook:on_page\nstartUrl {tw.url('a.test')}\n{body}"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbinpy", "-c", str(conf), *options, cwd=tw.tmp,
        env={"PYTHONPATH": str(tw.tmp), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def records(text: str) -> list[dict[str, str]]:
    """Every line of `text` parsed as a JSON log record (a line that is not one fails)."""
    assert text.endswith("\n")
    found = []
    for line in text.splitlines():
        record = json.loads(line)
        assert FIELDS <= set(record) <= FIELDS | {"exception", "stack"}, line
        when = datetime.datetime.fromisoformat(record["time"])
        assert when.utcoffset() == datetime.timedelta(0), record["time"]
        found.append(record)
    return found


async def test_json_log_lines_on_stderr_tell_the_crawl_and_carry_the_traceback(make_web):
    tw = await make_web(web())
    code, err = await crawl(tw, "logFormat json\n")
    assert code == 0, err
    got = records(err)
    messages = [r["message"] for r in got]
    assert any(m.startswith("done after ") and "err40X 1" in m for m in messages), messages
    failed = [r for r in got if "exception" in r]
    assert len(failed) == 1, failed
    assert failed[0]["level"] == "ERROR" and failed[0]["logger"].startswith("larbinpy")
    assert "/boom.html" in failed[0]["message"]
    assert failed[0]["exception"].startswith("Traceback (most recent call last):")
    assert failed[0]["exception"].endswith("ValueError: boom on " + tw.url("a.test", "/boom.html"))
    assert {r["level"] for r in got} <= {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


async def test_json_log_lines_in_log_file(make_web):
    tw = await make_web(web())
    log = tw.tmp / "larbinpy.log"
    code, err = await crawl(tw, f"logFormat json\nlogFile {log}\n")
    assert code == 0, err
    assert err == ""  # everything went to logFile, as JSON
    got = records(log.read_text())
    assert any(r["level"] == "INFO" and r["logger"].startswith("larbinpy") for r in got)
    assert any("exception" in r for r in got)
    assert any(r["message"].startswith("done after ") for r in got)


async def test_text_log_lines_stay_the_default(make_web):
    tw = await make_web(web())
    code, err = await crawl(tw, "")
    assert code == 0, err
    lines = err.splitlines()
    assert lines[-1].startswith("larbinpy: done after "), lines
    assert not any(line.startswith("{") for line in lines)
    assert "Traceback (most recent call last):" in err


def test_an_unknown_log_format_is_a_config_error(tmp_path: Path):
    conf = tmp_path / "larbin.conf"
    conf.write_text("startUrl http://a.test/\nlogFormat xml\n")
    result = subprocess.run([sys.executable, "-m", "larbinpy", "check-config", "-c", str(conf)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "larbin.conf:2: bad value for logFormat: expected one of text, json" in result.stderr


def test_a_crash_is_a_json_line_too():
    code = ("from larbinpy.runtime import setup_logging\n"
            "setup_logging(0, None, 'json')\n"
            "raise RuntimeError('the crawler crashed')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    (record,) = records(result.stderr)
    assert record["level"] == "CRITICAL" and record["message"] == "uncaught exception"
    assert record["exception"].endswith("RuntimeError: the crawler crashed")


async def test_the_summary_of_one_page_of_one_site_says_each_in_the_singular(make_web):
    tw = await make_web([Site("a.test", "127.0.0.2", {"/": html()})])
    code, err = await crawl(tw, "")
    assert code == 0, err
    summary = err.splitlines()[-1]
    assert re.fullmatch(r"larbinpy: done after [\d.]+ s: 1 page \([\d.]+/s\), [\d.]+ k?B, "
                        r"1 URL seen, 1 site; outcomes: success 1", summary), summary
