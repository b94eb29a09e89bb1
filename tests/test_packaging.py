"""What `pip install larbinpy` brings: the crawler and every output, without the tooling around it.

redis (the `cluster` extra) and dnslib (the `demo` and `bench` extras) are not runtime
dependencies: nothing the crawler imports may need them, and the commands that do need them say
which extra to install instead of failing with a traceback.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port, html
from packaging.requirements import Requirement

from larbinpy.demo import Site

REPO = Path(__file__).resolve().parents[1]
TOOLING = {"redis", "dnslib"}
# Every module of the package but the tooling (bench, demo) and the cluster, which imports
# redis and is only loaded when the `cluster` key is set; __main__ would run a crawl.
# (Found from the files: pkgutil.walk_packages would import every package to walk it.)
RUNTIME_MODULES = """
import importlib, sys
from pathlib import Path
import larbinpy
root = Path(larbinpy.__file__).parent
skip = ("larbinpy.bench", "larbinpy.demo", "larbinpy.cluster", "larbinpy.__main__")
names = [".".join(("larbinpy", *f.relative_to(root).with_suffix("").parts)).removesuffix(
         ".__init__") for f in sorted(root.rglob("*.py"))]
names = [n for n in names if not n.startswith(skip)]
for name in names:
    importlib.import_module(name)
print(" ".join(names))
print(" ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


def requirements() -> list[Requirement]:
    """The installed distribution's requirements, as its metadata lists them."""
    return [Requirement(r) for r in importlib.metadata.requires("larbinpy") or []]


def extra_of(req: Requirement) -> str | None:
    """The extra a requirement belongs to (None: a runtime dependency)."""
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        return None
    return next(e for e in ("cluster", "demo", "bench", "report", "test")
                if req.marker.evaluate({"extra": e}))


def test_redis_and_dnslib_are_only_in_extras() -> None:
    by_extra: dict[str | None, set[str]] = {}
    for req in requirements():
        by_extra.setdefault(extra_of(req), set()).add(req.name + "".join(sorted(req.extras)))
    assert "aiohttp" in by_extra[None]
    assert not TOOLING & by_extra[None], by_extra[None]
    assert by_extra["cluster"] == {"redis"}
    assert by_extra["demo"] == {"dnslib"}
    assert by_extra["bench"] == {"larbinpyclusterdemo"}  # larbinpy[cluster,demo]
    assert by_extra["report"] == {"datasketches"}
    assert "larbinpybenchreport" in by_extra["test"]  # larbinpy[bench,report]


def test_the_runtime_modules_import_without_redis_and_dnslib() -> None:
    proc = subprocess.run([sys.executable, "-c", RUNTIME_MODULES], capture_output=True,
                          text=True, timeout=120, check=True)
    names, loaded = (line.split() for line in proc.stdout.splitlines())
    for needed in ("larbinpy.cli", "larbinpy.crawler", "larbinpy.stages.dns",
                   "larbinpy.outputs.warc", "larbinpy.net.fetcher", "larbinpy.links.sitemaps",
                   "larbinpy.frontier.diskqueue", "larbinpy.daemon.ports"):
        assert needed in names
    assert "aiohttp" in loaded and not TOOLING & set(loaded)


def without(modules: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter where `modules` cannot be imported."""
    block = "".join(f"sys.modules[{m!r}] = None; " for m in modules)
    return subprocess.run([sys.executable, "-c", f"import sys; {block}\n{code}"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("blocked", "args", "extra"), [
    (["dnslib"], ["bench"], "bench"),
    (["dnslib"], ["bench", "--frontier", "10"], "bench"),
    (["redis"], ["bench", "--nodes", "1", "--hosts", "1", "--pages", "1"], "bench"),
])
def test_bench_without_its_extra_says_which_to_install(
    blocked: list[str], args: list[str], extra: str
) -> None:
    proc = without(blocked, f"from larbinpy.cli import main; sys.exit(main({args!r}))")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{blocked[0]}" in proc.stderr and f"pip install 'larbinpy[{extra}]'" in proc.stderr


def test_the_demo_without_its_extra_says_which_to_install() -> None:
    proc = without(["dnslib"], "import runpy; sys.argv[1:] = ['--serve-only']; "
                               "runpy.run_module('larbinpy.demo.demoweb', run_name='__main__')")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "dnslib" in proc.stderr and "pip install 'larbinpy[demo]'" in proc.stderr


def copy_tree(dest: Path) -> Path:
    """What the distribution is built from, without the venv, caches or state of this tree."""
    dest.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "larbinpy", dest / "larbinpy",  # the C extension built afresh
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    return dest


async def run(*cmd: str | Path, timeout: float = 600) -> tuple[int, str]:
    """Run a command without blocking the loop (the test web keeps serving); (code, output)."""
    proc = await asyncio.create_subprocess_exec(
        *map(str, cmd), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


@pytest.mark.slow
async def test_a_plain_pip_install_crawls_with_every_output(make_web, tmp_path: Path) -> None:
    """A fresh venv, `pip install .` without extras: `larbinpy -c` crawls a loopback web to
    the end with every output; bench and the demo name their extra."""
    venv = tmp_path / "venv"
    code, out = await run(sys.executable, "-m", "venv", venv)
    assert code == 0, out
    py, src = venv / "bin" / "python", copy_tree(tmp_path / "src")
    code, out = await run(py, "-m", "pip", "install", "-q", src)
    assert code == 0, out[-3000:]
    code, out = await run(py, "-c", "import importlib.util as u; "
                                    "print([m for m in ('redis', 'dnslib') if u.find_spec(m)])")
    assert (code, out) == (0, "[]\n")
    code, out = await run(py, "-c", "from larbinpy.links import tagscan; "
                                    "print(tagscan.scan is tagscan.scan_c)")
    assert (code, out) == (0, "True\n")  # the C link scanner was built and is the one used
    code, out = await run(py, "-c", "from larbinpy.links import urls; "
                                    "print(urls._plainlinks is not None)")
    assert (code, out) == (0, "True\n")  # and the plain-link resolver
    code, out = await run(py, "-c", "from larbinpy.frontier import seen; "
                                    "print(seen._seenbits is not None)")
    assert (code, out) == (0, "True\n")  # and the seen-set's test of links

    tw = await make_web([
        Site("a.test", "127.0.0.2", {"/x.html": html("/")}),
        Site("b.test", "127.0.0.3", {"/": html("/y.html"), "/y.html": html()}),
    ])
    tw.web.sites["a.test"].pages["/"] = html("/x.html", tw.url("b.test"))  # the port is known
    conf = tmp_path / "larbin.conf"
    conf.write_text(tw.config_text(
        f"exitAtEnd\nstartUrl {tw.url('a.test')}\noutput save\noutput links\noutput warc\n"
        "output mirror\n"))
    code, out = await run(venv / "bin" / "larbinpy", "-c", conf, "--scratch")
    assert code == 0, out[-3000:]
    assert set(tw.pages_fetched()) == {tw.url("a.test"), tw.url("a.test", "/x.html"),
                                       tw.url("b.test"), tw.url("b.test", "/y.html")}
    assert list((tmp_path / "save").rglob("*.warc.gz"))

    code, out = await run(venv / "bin" / "larbinpy", "bench", timeout=60)
    assert code == 1 and "pip install 'larbinpy[bench]'" in out and "Traceback" not in out
    code, out = await run(py, "-m", "larbinpy.demo.demoweb", "--serve-only", timeout=60)
    assert code == 1 and "pip install 'larbinpy[demo]'" in out and "Traceback" not in out


@pytest.mark.slow
async def test_an_install_without_a_c_compiler_says_what_to_install(tmp_path: Path) -> None:
    """The C extensions cannot be built: pip stops with what is missing, not a traceback
    at run time."""
    venv = tmp_path / "venv"
    code, out = await run(sys.executable, "-m", "venv", venv)
    assert code == 0, out
    src = copy_tree(tmp_path / "src")
    env = {**os.environ, "CC": str(tmp_path / "no-such-compiler")}
    proc = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out_bytes, _ = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode != 0
    assert "could not build its C extensions" in out_bytes.decode(errors="replace")
    assert "apt-get install gcc python3-dev" in out_bytes.decode(errors="replace")


async def test_a_plain_http_crawl_without_ports_never_imports_aiohttp(make_web, tmp_path):
    """aiohttp is about half of the start-up's CPU: a crawl that needs neither HTTPS, a proxy
    nor a port does not load it (it still crawls); with a port open, it does."""
    tw = await make_web([Site("a.test", "127.0.0.2", {"/": html("/x.html"), "/x.html": html()})])
    conf = tmp_path / "larbin.conf"
    script = ("import sys; from larbinpy.cli import main; code = main(['-q', '-c', sys.argv[1], "
              "'--scratch']); print(code, 'aiohttp' in sys.modules)")
    for ports, loaded in (("", False), ("httpPort 0\ninputPort 1\n", True)):
        conf.write_text(tw.config_text(f"exitAtEnd\nstartUrl {tw.url('a.test')}\n") + ports)
        if ports:  # a free port for the input port
            conf.write_text(conf.read_text().replace("inputPort 1", f"inputPort {free_port()}"))
        code, out = await run(sys.executable, "-c", script, conf, timeout=120)
        assert code == 0, out
        assert out.split()[-2:] == ["0", str(loaded)], out
    assert set(tw.pages_fetched()) == {tw.url("a.test"), tw.url("a.test", "/x.html")}


async def test_a_crawl_loads_dns_and_robots_libraries_at_their_first_use(make_web, tmp_path):
    """A daemon started without seeds resolves no host and fetches no robots.txt: it does not
    load pycares nor yarl (~30 ms of start-up CPU). A crawl with a seed loads them when its
    first host is resolved and its first robots.txt fetched, and crawls."""
    tw = await make_web([Site("a.test", "127.0.0.2", {"/": html("/x.html"), "/x.html": html()})])
    conf = tmp_path / "larbin.conf"
    libraries = ("pycares", "yarl", "protego", "aiohttp")
    script = ("import sys; from larbinpy.cli import main; code = main(['-q', '-c', sys.argv[1], "
              f"'--scratch']); print(code, *(m in sys.modules for m in {libraries!r}))")
    for seed, loaded in (("", ["False"] * 4), (f"startUrl {tw.url('a.test')}\n",
                                               ["True", "True", "False", "False"])):
        conf.write_text(tw.config_text(f"exitAtEnd\n{seed}"))
        code, out = await run(sys.executable, "-c", script, conf, timeout=120)
        assert code == 0, out
        assert out.split()[-5:] == ["0", *loaded], out
    assert set(tw.pages_fetched()) == {tw.url("a.test"), tw.url("a.test", "/x.html")}
