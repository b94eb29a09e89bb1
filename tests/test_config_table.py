"""The key table in config.py is the one source: the parser, the range checks, check-config,
docs/configuration.md and the shipped larbin.conf all agree with it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from larbinpy.config import (
    KEYS,
    Config,
    ConfigError,
    Key,
    default_text,
    describe,
    parse_config,
    parse_int,
)

REPO = Path(__file__).parents[1]
SHIPPED = REPO / "larbin.conf"
# `key value ...` or `# key value ...`: a line of larbin.conf that shows a key
KEY_LINE = re.compile(r"^(?P<off>#\s*)?(?P<word>[A-Za-z]+)(?=\s|$)(?P<rest>.*)$")
SETTABLE = [k for k in KEYS.values() if k.read is None and k.kind != "flag"]


def shown(spec: Key) -> list[tuple[bool, str]]:
    """The lines of the shipped larbin.conf that show `spec`: (commented out, line uncommented)."""
    found = []
    for line in SHIPPED.read_text().splitlines():
        m = KEY_LINE.match(line)
        if m and m["word"] == spec.larbin:
            found.append((m["off"] is not None, m["word"] + m["rest"]))
    return found


def has_default(spec: Key) -> bool:
    """Whether the key's default is a value a line could show (not unset, empty or in words)."""
    return spec.default_doc is None and spec.default not in (None, "", [])


def test_the_committed_reference_is_what_the_table_generates():
    result = subprocess.run([sys.executable, "-m", "larbinpy.config", "--markdown"],
                            capture_output=True, text=True, timeout=60, check=True)
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert result.stdout == committed, "docs/configuration.md is stale: run `make docs`"


def test_the_reference_names_every_key_with_its_default():
    text = (REPO / "docs" / "configuration.md").read_text()
    for spec in KEYS.values():
        row = next(r for r in text.splitlines() if r.startswith(f"| `{spec.larbin}` |"))
        assert f"| {default_text(spec)} |" in row.replace("\\|", "|")


@pytest.mark.parametrize("spec", KEYS.values(), ids=lambda k: k.larbin)
def test_the_shipped_larbin_conf_shows_every_key_with_its_default(spec: Key):
    lines = shown(spec)
    assert lines, f"larbin.conf does not show {spec.larbin}"
    assert any(f"[{default_text(spec)}]" in text for _, text in lines), (
        f"no line of larbin.conf gives {spec.larbin}'s default as [{default_text(spec)}]"
    )
    if spec.kind == "flag" or not has_default(spec):
        return  # a flag shows no value; a key without a default value shows an example
    for commented, text in lines:
        if commented:
            cfg = parse_config(text, "larbin.conf")
            assert getattr(cfg, spec.attr) == spec.default, f"{text!r} is not the default"


def test_every_key_the_shipped_larbin_conf_shows_is_spelled_as_the_table_spells_it():
    for line in SHIPPED.read_text().splitlines():
        m = KEY_LINE.match(line)
        spec = KEYS.get(m["word"].lower()) if m else None
        assert m is None or spec is None or m["word"] == spec.larbin, line


def test_defaults_are_within_their_ranges_and_a_fresh_config_has_them():
    cfg = Config()
    for spec in KEYS.values():
        assert getattr(cfg, spec.attr) == spec.default
        if spec.bounds is not None:
            low, high = spec.bounds
            assert low <= spec.default and (high is None or spec.default <= high), spec.larbin


@pytest.mark.parametrize("spec", [k for k in SETTABLE if k.bounds], ids=lambda k: k.larbin)
def test_each_range_is_enforced_at_the_line_of_the_key(spec: Key):
    low, high = spec.bounds or (0, None)
    below = low - 1 if float(low).is_integer() else low / 2
    with pytest.raises(ConfigError) as info:
        parse_config(f"From me@x\n{spec.larbin} {below:g}\n", "t.conf")
    # an integer key's syntax has no minus sign: below 0 is a bad value before it is out of range
    words = ("is negative: it must be 0 or more" if below < 0 and spec.parse is parse_int
             else f"{spec.larbin} must be")
    assert info.value.line == 2 and spec.larbin in str(info.value) and words in str(info.value)
    assert getattr(parse_config(f"{spec.larbin} {low:g}\n"), spec.attr) == low
    if high is not None:
        with pytest.raises(ConfigError, match=f"t.conf:1: {spec.larbin} must be between"):
            parse_config(f"{spec.larbin} {high + 1:.0f}\n", "t.conf")


@pytest.mark.parametrize("spec", SETTABLE, ids=lambda k: k.larbin)
def test_a_key_without_its_value_is_an_error_naming_its_line(spec: Key):
    text = f"{spec.larbin}\n" if spec.kind != "list" else f"{spec.larbin} x\n"
    with pytest.raises(ConfigError) as info:
        parse_config("\n" + text, "t.conf")
    assert info.value.line == 2 and spec.larbin in str(info.value)


def test_check_config_lists_every_key_once_in_table_order():
    listed = [line.split()[0] for line in describe(Config()).splitlines()[1:]]
    assert listed == [spec.larbin for spec in KEYS.values()]
