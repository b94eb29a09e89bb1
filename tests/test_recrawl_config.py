"""The recrawl keys: their defaults, and every bad value or combination a file:line error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from larbinpy.config import ConfigError, parse_config


def test_recrawl_is_off_by_default_with_the_documented_bounds():
    cfg = parse_config("")
    assert (cfg.recrawl, cfg.recrawl_min, cfg.recrawl_max, cfg.recrawl_share) == (
        False, 3600, 2592000, 1.0)
    cfg = parse_config("recrawl on\nrecrawlMin 0.5\nrecrawlMax 30\nrecrawlShare 0.25\n")
    assert (cfg.recrawl, cfg.recrawl_min, cfg.recrawl_max, cfg.recrawl_share) == (
        True, 0.5, 30, 0.25)


@pytest.mark.parametrize(("text", "line", "words"), [
    ("From a@b\nrecrawl on\n\nexitAtEnd\n", 2, "cannot be combined with exitAtEnd (line 4)"),
    ("recrawl on\nrecrawlMin 60\nrecrawlMax 10\n", 2, "recrawlMin (60 s) must not exceed"),
    ("recrawl on\nrecrawlMax 10\n", 2, "recrawlMin (3600 s) must not exceed recrawlMax (10 s)"),
    ("\nrecrawlShare 0\n", 2, "must be above 0 and at most 1"),
    ("\nrecrawlShare 1.5\n", 2, "must be above 0 and at most 1"),
    ("\n\nrecrawlShare half\n", 3, "not a number"),
    ("recrawlMin -1\n", 1, "recrawlMin must be at least"),
    ("recrawl maybe\n", 1, "expected on or off"),
])
def test_a_bad_recrawl_value_is_an_error_at_its_line(text: str, line: int, words: str):
    with pytest.raises(ConfigError) as info:
        parse_config(text, "r.conf")
    assert info.value.line == line and words in str(info.value)
    assert str(info.value).startswith(f"r.conf:{line}: ")


def test_recrawl_with_exit_at_end_stops_larbinpy_with_exit_2(tmp_path: Path):
    conf = tmp_path / "larbin.conf"
    conf.write_text(f"stateDir {tmp_path}/state\nrecrawl on\nexitAtEnd\nhttpPort 0\n"
                    "inputPort 0\nstartUrl http://127.0.0.1:1/\n")
    run = subprocess.run([sys.executable, "-m", "larbinpy", "-c", str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert f"{conf}:2: recrawl on never ends by itself" in run.stderr
    assert not (tmp_path / "state").exists()  # a configuration error touches nothing
