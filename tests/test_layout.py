"""The package's import graph: no circles, and every import points down the layers.

Every `import` of every module of `larbinpy/` counts, wherever it is: at the top, inside a
function (a lazy import is still a dependency) or under `if TYPE_CHECKING` (a type-only
circle is still a circle for the reader). Importing `a.b.c` also runs the package `a.b`, so
that counts as an import of `a/b/__init__.py` too (except from inside `a.b` itself).
Not seen: `importlib.import_module` with a computed name (outputs load their own modules so).

And the owners of a site's state: only the site table (`frontier/sites.py`) and the
politeness state machine (`frontier/politeness.py`) change a `Site` or an `IpSlot`
(`site_writes`).
"""

from __future__ import annotations

import ast
import dataclasses
import graphlib
from dataclasses import dataclass
from pathlib import Path

import larbinpy
from larbinpy.records import IpSlot, Site

ROOT = Path(larbinpy.__file__).parent

# Lowest first. A module may import its own component (the top-level module, or the
# sub-package it is in) and any component of a lower layer; never a peer in its own layer,
# never a higher layer. `larbinpy` is the package's __init__ (the version).
LAYERS: list[tuple[str, ...]] = [
    # leaves: import nothing of larbinpy
    ("larbinpy", "stats", "config", "runtime", "clock", "turn"),
    ("records",),  # Job, Site, Page (outcome kinds from stats)
    ("links",),  # URLs: normalisation, extraction, scope, sitemaps
    ("frontier", "net"),  # queues and seen-set; the HTTP clients and body reading
    # daemon: the ports, status and progress read the crawl through daemon.status's
    # StatusSource, so it sits below stages and crawler and may import neither
    ("outputs", "daemon", "report"),
    ("stages",),  # the pipeline stages
    ("node",),  # the seams as one object: the embedded node (a cluster's implements it too)
    ("cluster",),  # Redis scale-out, hooked into the stages by the crawler
    ("crawler",),  # builds and wires everything
    ("cli",),
    ("__main__",),
    ("demo",),  # dev tooling: the local web and DNS server
    ("bench",),  # `larbinpy bench`, on the demo web
]

# Upward imports allowed only inside a function: `larbinpy bench` is dispatched by the cli, and
# importing it lazily keeps the dev tooling out of every other command's start-up.
LAZY_UPWARD = {("cli", "bench")}


@dataclass(frozen=True)
class Import:
    """One edge of the graph: `importer` imports `imported`, at `where` (file:line)."""

    importer: str
    imported: str
    where: str
    lazy: bool  # inside a function body
    implied: bool = False  # a package that importing one of its modules runs


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package at `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def scan(root: Path) -> list[Import]:
    """Every import inside the package at `root`, with where it is."""
    mods = modules(root)
    edges = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = str(path.relative_to(root.parent))
        for node, lazy in _imports(tree):
            for target in _targets(node, name, path.name == "__init__.py", mods):
                for imported in _with_packages(target, name, mods):
                    edges.append(Import(name, imported, f"{where}:{node.lineno}", lazy,
                                        implied=imported != target))
    return edges


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Import statements anywhere in a module, each with 'inside a function'."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append((child, lazy))
            inner = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            visit(child, lazy or inner)

    visit(tree, False)
    return found


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool,
             mods: dict[str, Path]) -> list[str]:
    """The package's modules one statement imports (`from p import m` names module p.m)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the importer's package, `level - 1` packages up
            package = importer.split(".")
            package = package if is_package else package[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, *([base] if base else [])])
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    return [m for m in dict.fromkeys(_known(n, mods) for n in names) if m]


def _known(name: str, mods: dict[str, Path]) -> str:
    """`name`, or its nearest enclosing module of the package ('' when outside it)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name


def _with_packages(target: str, importer: str, mods: dict[str, Path]) -> list[str]:
    """The module and the packages importing it runs, bar the importer's own packages."""
    parts = target.split(".")
    packages = [".".join(parts[:i]) for i in range(1, len(parts))]
    own = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 2)}
    return [p for p in packages if p in mods and p not in own] + [target]


def component(module: str) -> str:
    """The layer-table name of a module: its sub-package, or itself at the top level."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(name: str) -> int:
    """The index of a component in LAYERS (-1 when the table does not place it)."""
    return next((i for i, layer in enumerate(LAYERS) if name in layer), -1)


def circles(edges: list[Import]) -> list[str]:
    """Every circle in the graph, each as its imports with file:line (graphlib finds them)."""
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for e in edges:
        if e.importer != e.imported:
            graph.setdefault(e.importer, set()).add(e.imported)
            where.setdefault((e.importer, e.imported), e.where)
    found = []
    while True:
        try:
            graphlib.TopologicalSorter(graph).prepare()
            return found
        except graphlib.CycleError as exc:
            cycle = list(reversed(exc.args[1][1:]))  # graphlib lists it against the arrows
        start = cycle.index(min(cycle))  # the same circle reads the same whatever the order
        cycle = cycle[start:] + cycle[:start] + [cycle[start]]
        steps = list(zip(cycle, cycle[1:], strict=False))
        found.append(" -> ".join(f"{a} ({where[a, b]})" for a, b in steps) + f" -> {cycle[0]}")
        graph[steps[0][0]].discard(steps[0][1])  # break it, look for the next one


def upward(edges: list[Import]) -> list[str]:
    """Every import that does not point down the layer table (the module named, not the
    packages it runs: those are in the same component)."""
    problems = []
    for e in edges:
        src, dst = component(e.importer), component(e.imported)
        low, high = layer_of(dst), layer_of(src)
        if src == dst or e.implied or ((src, dst) in LAZY_UPWARD and e.lazy):
            continue
        if low < 0 or high < 0:
            missing = dst if low < 0 else src
            problems.append(f"{e.where}: {e.importer} imports {e.imported}: "
                            f"{missing!r} is in no layer of tests/test_layout.py LAYERS")
        elif low >= high:
            what = "a peer in its layer" if low == high else "a higher layer"
            problems.append(f"{e.where}: {e.importer} imports {e.imported}: {src} "
                            f"(layer {high}) may not import {dst} ({what}, layer {low})")
    return problems


def test_the_package_has_no_import_circles() -> None:
    edges = scan(ROOT)
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(found)


def test_every_import_points_down_the_layers() -> None:
    edges = scan(ROOT)
    found = upward(edges)
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_the_daemon_and_net_do_not_reach_into_stages_or_the_crawler() -> None:
    """The narrow interfaces of issue 23: said directly, whatever the table becomes."""
    for e in scan(ROOT):
        if component(e.importer) in ("daemon", "net"):
            assert component(e.imported) not in ("stages", "crawler"), e


def broken_package(root: Path) -> Path:
    """A small `larbinpy` under `root` that breaks the rules: net's body imports a stage (for
    types only), the stage imports it back (lazily, relatively)."""
    files = {
        "__init__.py": "",
        "stats.py": "import collections\n",
        "net/__init__.py": "from larbinpy.net.body import read_body\n",
        "net/body.py": "from typing import TYPE_CHECKING\n\nfrom larbinpy import stats\n\n"
                       "if TYPE_CHECKING:\n"
                       "    from larbinpy.stages.bandwidth import BandwidthLimiter\n",
        "stages/__init__.py": "",
        "stages/bandwidth.py": "class BandwidthLimiter:\n"
                               "    def take(self):\n        from ..net import body\n",
    }
    for name, text in files.items():
        (root / "larbinpy" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "larbinpy" / name).write_text(text)
    return root / "larbinpy"


def test_the_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Top-level, TYPE_CHECKING-only, lazy and relative imports, and packages run, are edges."""
    edges = {(e.importer, e.imported): e for e in scan(broken_package(tmp_path))}
    assert set(edges) == {
        ("larbinpy.net", "larbinpy.net.body"),
        ("larbinpy.net.body", "larbinpy.stats"),  # `from larbinpy import stats`: a module
        ("larbinpy.net.body", "larbinpy.stages"),  # importing stages.bandwidth runs it
        ("larbinpy.net.body", "larbinpy.stages.bandwidth"),
        ("larbinpy.stages.bandwidth", "larbinpy.net"),
        ("larbinpy.stages.bandwidth", "larbinpy.net.body"),
    }
    assert not edges["larbinpy.net.body", "larbinpy.stages.bandwidth"].lazy
    assert edges["larbinpy.stages.bandwidth", "larbinpy.net.body"].lazy


def test_an_upward_import_and_a_circle_are_named_with_file_and_line(tmp_path: Path) -> None:
    """The checks fail on the broken package, naming each import and its file:line."""
    edges = scan(broken_package(tmp_path))
    assert upward(edges) == [
        "larbinpy/net/body.py:6: larbinpy.net.body imports larbinpy.stages.bandwidth: net "
        "(layer 3) may not import stages (a higher layer, layer 5)",
    ]
    assert circles(edges) == [
        "larbinpy.net (larbinpy/net/__init__.py:1) -> larbinpy.net.body "
        "(larbinpy/net/body.py:6) -> larbinpy.stages.bandwidth "
        "(larbinpy/stages/bandwidth.py:3) -> larbinpy.net",
        "larbinpy.net.body (larbinpy/net/body.py:6) -> larbinpy.stages.bandwidth "
        "(larbinpy/stages/bandwidth.py:3) -> larbinpy.net.body",
    ]


# --- the owners of a site's state ---

# The table (records, queues, robots.txt and DNS state, the clocks other stages push later)
# and the politeness state machine (ready queue, IP FIFOs, timers, fetch counts, the clocks a
# fetch restarts): two modules, each change one method stating its invariant, so that the
# politeness decisions are unit-tested alone on a fake clock without the table's disk rows.
SITE_OWNERS = frozenset({"larbinpy/frontier/sites.py", "larbinpy/frontier/politeness.py"})
# Not checked: what a record is made with and never changes (its key, host, address), and
# `pages`, a name `Stats` and the demo web's sites share (`Sites.count_page` counts it all the
# same). Every other field is a politeness clock, the queue, robots.txt state or back-off.
UNCHECKED_FIELDS = frozenset({"key", "host", "addr", "pages"})
SITE_FIELDS = frozenset(
    f.name for record in (Site, IpSlot) for f in dataclasses.fields(record)
) - UNCHECKED_FIELDS
# calls that change a field's value in place: a queue, the IP's FIFO, a timer
MUTATORS = frozenset({"append", "appendleft", "extend", "extendleft", "insert", "pop",
                      "popleft", "remove", "clear", "rotate", "cancel"})


def _site_field(node: ast.expr) -> str | None:
    """The field named if `node` is `<something>.<a Site or IpSlot field>`, else None.
    `self.<name>` is a class's own attribute: `Site` and `IpSlot` have no methods."""
    if (isinstance(node, ast.Attribute) and node.attr in SITE_FIELDS
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
        return node.attr
    return None


def _written(node: ast.AST) -> list[tuple[ast.expr, str]]:
    """The attribute expressions a statement or call writes, with how."""
    if isinstance(node, ast.Assign | ast.Delete):
        how = "assigns" if isinstance(node, ast.Assign) else "deletes"
        flat = [t for target in node.targets for t in
                (ast.walk(target) if isinstance(target, ast.Tuple | ast.List) else [target])]
        return [(t, how) for t in flat if isinstance(t, ast.expr)]
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [(node.target, "assigns")]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS):
        return [(node.func.value, f"calls {node.func.attr}() on")]
    return []


def site_writes(root: Path) -> list[str]:
    """Every place outside the site table and the politeness state machine that changes a
    field of a Site or an IpSlot, as "file:line: assigns .field" (found by attribute name: any
    object but `self`)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        where = str(path.relative_to(root.parent))
        if where in SITE_OWNERS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        writes = [(node.lineno, how, name) for node in ast.walk(tree)
                  for target, how in _written(node)
                  if (name := _site_field(target)) is not None]
        found += [f"{where}:{line}: {how} .{name}" for line, how, name in sorted(writes)]
    return found


def test_only_the_site_table_changes_a_sites_state() -> None:
    found = site_writes(ROOT)
    assert not found, ("a site's state changed outside the site table (use a `Sites` or "
                       "`Politeness` method):\n" + "\n".join(found))


def test_a_write_to_a_sites_state_elsewhere_is_named_with_file_and_line(tmp_path: Path) -> None:
    """Assignments, augmented ones, in-place changes of a queue or timer are found; a class's
    own attributes of the same names and the owners themselves are not."""
    (tmp_path / "larbinpy" / "stages").mkdir(parents=True)
    (tmp_path / "larbinpy" / "frontier").mkdir()
    (tmp_path / "larbinpy" / "frontier" / "sites.py").write_text("site.ready_at = 1.0\n")
    (tmp_path / "larbinpy" / "frontier" / "politeness.py").write_text("site.timer = None\n")
    (tmp_path / "larbinpy" / "stages" / "opener.py").write_text(
        "def turn(self, site, ip):\n"
        "    self.in_flight += 1\n"
        "    site.ready_at = max(site.ready_at, 1.0)\n"
        "    site.ip.in_flight -= 1\n"
        "    site.state, x = None, 1\n"
        "    ip.waiting.appendleft(site)\n"
        "    site.timer.cancel()\n"
        "    site.queue.popleft()\n"
        "    self.stats.pages += 1\n")
    assert site_writes(tmp_path / "larbinpy") == [
        "larbinpy/stages/opener.py:3: assigns .ready_at",
        "larbinpy/stages/opener.py:4: assigns .in_flight",
        "larbinpy/stages/opener.py:5: assigns .state",
        "larbinpy/stages/opener.py:6: calls appendleft() on .waiting",
        "larbinpy/stages/opener.py:7: calls cancel() on .timer",
        "larbinpy/stages/opener.py:8: calls popleft() on .queue",
    ]
