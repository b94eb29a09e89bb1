"""The repository as its next reader gets it: type checks whose exceptions say why.

mypy itself runs in `make test` (settings in pyproject.toml); these are the rules around it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "larbinpy"
# `# type: ignore[code]  # why`: the error silenced, then the reason, on the same line
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[a-z, -]+\])?(?P<rest>.*)$")


def test_each_type_ignore_names_its_error_and_says_why_on_its_line() -> None:
    bare = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = IGNORE.search(line)
            if m and (not m["code"] or not re.match(r"\s*#\s*\S", m["rest"])):
                bare.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bare, "type: ignore without [code] and '# reason':\n" + "\n".join(bare)


def test_mypy_checks_the_package_strictly_from_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    mypy = config["tool"]["mypy"]
    assert mypy["files"] == ["larbinpy"]
    assert mypy["strict"] is True  # untyped defs, unused ignores, Any returns...
    assert "ignore-without-code" in mypy["enable_error_code"]
    assert any(r.startswith("mypy") for r in config["project"]["optional-dependencies"]["test"])
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert recipe is not None
    steps = recipe[1]
    assert steps.index("ruff check") < steps.index("bin/mypy") < steps.index("pytest")
