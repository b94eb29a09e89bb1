"""The repository as its next reader gets it: it stands on its own, and its types are checked.

Nothing cites a file outside the checkout (a user has only the repository), the contract a user
needs is in the project's own docs, the licence is there in full. mypy itself runs in `make
test` (settings in pyproject.toml); these are the rules around it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from test_ports import METRIC_FAMILIES, STATUS_FIELDS

from larbinpy.stats import Outcome

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "larbinpy"
DOCS = REPO / "docs"
# What the checkout carries as text: docs, code, tests, the shipped configuration and unit
TEXT = ["README.md", "Makefile", "pyproject.toml", "larbin.conf", "docs", "larbinpy", "tests",
        "contrib"]
# A citation of something a user of the repository does not have: the contract it was built
# to, its neighbour folder, the machine it was built on (spelt apart so this file passes)
OUTSIDE = re.compile("|".join(map(re.escape, ["SPEC" + ".md", "shared" + "/", "/wo" + "rk/"])))
LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link's target
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


def text_files() -> list[Path]:
    """Every text file of the checkout (no caches, no binary data)."""
    files: list[Path] = []
    for name in TEXT:
        path = REPO / name
        found = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [f for f in found if f.is_file() and "__pycache__" not in f.parts
                  and f.suffix not in (".pyc", ".gz", ".warc")]
    return files


def test_no_file_cites_anything_outside_the_repository() -> None:
    cited = []
    for path in text_files():
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                cited.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not cited, "cites what a user does not have:\n" + "\n".join(cited)


def test_the_docs_links_lead_to_files_of_the_repository() -> None:
    broken = []
    for doc in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor of the same page
            where = (doc.parent / target.split("#")[0]).resolve()
            if not where.is_relative_to(REPO) or not where.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target}")
    assert not broken, broken


def test_the_licence_is_the_gpl_2_in_full_as_pyproject_says() -> None:
    text = (REPO / "LICENSE").read_text()
    assert text.split("\n", 2)[:2] == ["                    GNU GENERAL PUBLIC LICENSE",
                                        "                       Version 2, June 1991"]
    assert "TERMS AND CONDITIONS FOR COPYING, DISTRIBUTION AND MODIFICATION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 17000
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "GPL-2.0-or-later"
    assert project["license-files"] == ["LICENSE"]  # the wheel carries the text


def test_the_readme_stays_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 300


def test_the_docs_carry_the_contract_a_user_needs() -> None:
    outcomes = (DOCS / "outcomes.md").read_text()
    assert [k for k in Outcome if f"| `{k}` |" not in outcomes] == []
    operations = (DOCS / "operations.md").read_text()
    assert [f for f in STATUS_FIELDS if f"`{f}`" not in operations] == []
    metrics = [m for m in METRIC_FAMILIES if f"`{m.removeprefix('larbinpy_')}`" not in operations]
    assert metrics == []
    for doc in ("configuration.md", "operations.md", "outcomes.md"):
        assert f"(docs/{doc})" in (REPO / "README.md").read_text(), doc
