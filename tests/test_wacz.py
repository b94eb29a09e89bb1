"""`larbinpy wacz DIR -o FILE`: a real crawl packed as a WACZ that the `wacz` package's
validator accepts and pywb replays from its own index."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from conftest import CHECKOUT, until
from replay import Pywb, pywb_bin
from test_cdxj import LATIN1, archive_web, reference_index
from test_warc import warc_files

from larbinpy.outputs.cdxj import index_name

BIN = Path(sys.executable).parent


def wacz_bin() -> Path | None:
    """py-wacz's `wacz` command: its own venv (`make .venv-wacz/.installed`), or where
    LARBINPY_WACZ names (a directory holding `wacz`)."""
    where = os.environ.get("LARBINPY_WACZ")
    for d in ([Path(where)] if where else []) + [CHECKOUT / ".venv-wacz" / "bin"]:
        if (d / "wacz").exists():
            return d / "wacz"
    found = shutil.which("wacz")
    return Path(found) if found else None


def larbinpy_wacz(*args: str) -> subprocess.CompletedProcess[str]:
    """The `larbinpy wacz` command."""
    return subprocess.run([str(BIN / "larbinpy"), "wacz", *args], capture_output=True,
                          text=True, timeout=120)


def validate(wacz: Path) -> None:
    """`wacz validate` accepts the file."""
    tool = wacz_bin()
    if tool is None:
        pytest.skip("py-wacz is not installed: make .venv-wacz/.installed")
    result = subprocess.run([str(tool), "validate", "-f", str(wacz)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation succeeded" in result.stdout


def merged_index(zf: zipfile.ZipFile) -> str:
    """The CDXJ lines of the WACZ's compressed index (gzip blocks, one after another)."""
    return gzip.decompress(zf.read("indexes/index.cdx.gz")).decode()


async def crawled(make_web) -> tuple[object, list[Path]]:
    """The archive web crawled with `output warc`, in several WARC files."""
    tw = await make_web(archive_web())
    await tw.crawl(f"startUrl {tw.url('w.test')}\noutput warc\nnoDup\nwarcMaxSize 3000\n")
    files = warc_files(tw.tmp)
    assert len(files) >= 3
    return tw, files


async def test_a_crawl_packs_as_a_wacz_the_validator_accepts(make_web):
    tw, files = await crawled(make_web)
    target = tw.tmp / "crawl.wacz"
    result = larbinpy_wacz(str(tw.tmp / "save"), "-o", str(target), "--title", "Test crawl")
    assert result.returncode == 0, result.stderr
    assert f"{len(files)} WARC files" in result.stderr
    validate(target)
    with zipfile.ZipFile(target) as zf:
        names = set(zf.namelist())
        assert {f"archive/{f.name}" for f in files} <= names
        for f in files:  # stored as they are: a reader fetches records by offset
            info = zf.getinfo(f"archive/{f.name}")
            assert info.compress_type == zipfile.ZIP_STORED
            assert zf.read(info) == f.read_bytes()
        assert zf.getinfo("indexes/index.cdx.gz").compress_type == zipfile.ZIP_STORED
        # no ZIP64 headers on small entries: ReplayWeb.page (wabac.js) misreads them
        assert all(info.extract_version < 45 for info in zf.infolist())
        # one index of every capture, sorted: the per-file indexes merged
        assert merged_index(zf) == "".join(sorted(
            line for f in files for line in reference_index(f).splitlines(keepends=True)))
        package = json.loads(zf.read("datapackage.json"))
        assert package["title"] == "Test crawl" and package["software"].startswith("larbinpy")
        listed = {r["path"]: r for r in package["resources"]}
        assert set(listed) == names - {"datapackage.json", "datapackage-digest.json"}
        for path, resource in listed.items():
            data = zf.read(path)
            assert resource["hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
            assert resource["bytes"] == len(data)
        digest = json.loads(zf.read("datapackage-digest.json"))
        assert digest["hash"] == "sha256:" + hashlib.sha256(
            zf.read("datapackage.json")).hexdigest()
        pages = [json.loads(line) for line in zf.read("pages/pages.jsonl").splitlines()]
    assert sorted(p.name for p in tw.tmp.iterdir() if "wacz" in p.name) == ["crawl.wacz"]
    assert pages[0]["format"] == "json-pages-1.0"
    titles = {p["url"]: p.get("title") for p in pages[1:]}
    assert all(p["ts"].endswith("Z") for p in pages[1:])
    # every HTML page fetched in full, with its title (the Latin-1 one decoded as declared,
    # the gzip one decoded), and nothing else
    site = tw.web.sites["w.test"]
    html_200 = {u for u in tw.pages_fetched()
                if (page := site.pages.get("/" + u.split("/", 3)[3])) is not None
                and page.status == 200 and page.content_type.startswith("text/html")}
    copies = {tw.url("w.test", "/copy1.html"), tw.url("w.test", "/copy2.html")}
    assert set(titles) == html_200 - (copies - set(titles))  # one copy is a noDup revisit
    assert len(copies & set(titles)) == 1
    assert titles[tw.url("w.test", "/a.html")] == "Page A"
    assert titles[tw.url("w.test", "/latin.html")] == "Caf\xe9 cr\xe8me"
    assert titles[tw.url("w.test", "/zipped.html")] == "Zipped"
    assert titles[tw.url("w.test", "/spaced")] is None  # no <title>: none given


async def test_a_warc_file_without_its_index_is_indexed_when_packed(make_web):
    tw, files = await crawled(make_web)
    index_name(files[1]).unlink()
    (tw.tmp / "save" / "half.warc.gz.open").write_bytes(b"unfinished")  # a crawl still running
    target = tw.tmp / "crawl.wacz"
    result = larbinpy_wacz(str(tw.tmp / "save"), "-o", str(target))
    assert result.returncode == 0, result.stderr
    assert f"{files[1].name} has no index beside it" in result.stderr
    assert "half.warc.gz.open" in result.stderr  # left out, and said
    validate(target)
    with zipfile.ZipFile(target) as zf:
        assert "archive/half.warc.gz.open" not in zf.namelist()
        assert merged_index(zf) == "".join(sorted(
            line for f in files for line in reference_index(f).splitlines(keepends=True)))


def test_what_cannot_be_packed_is_refused_with_the_reason(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = larbinpy_wacz(str(empty), "-o", str(tmp_path / "x.wacz"))
    assert result.returncode == 2 and "has no WARC files" in result.stderr
    result = larbinpy_wacz(str(tmp_path / "nowhere"), "-o", str(tmp_path / "x.wacz"))
    assert result.returncode == 2 and "is not a directory" in result.stderr
    result = larbinpy_wacz(str(empty), "-o", str(tmp_path / "x.zip"))
    assert result.returncode == 2 and "ends in .wacz" in result.stderr
    result = larbinpy_wacz(str(empty))
    assert result.returncode == 2 and "-o" in result.stderr
    assert not list(tmp_path.glob("*.wacz*"))  # nothing half-written left


class WaczPywb(Pywb):
    """pywb with a collection made from a WACZ (`wb-manager add --unpack-wacz`: the WARC files
    and the WACZ's own index, which pywb then uses as it is)."""

    def _run(self, *args: str) -> None:
        if args[0] == "add":
            args = (*args, "--unpack-wacz")
        super()._run(*args)


@pytest.mark.skipif(pywb_bin() is None, reason="pywb is not installed: make .venv-pywb")
async def test_pywb_replays_the_pages_from_the_wacz(make_web):
    tw, _ = await crawled(make_web)
    target = tw.tmp / "crawl.wacz"
    assert larbinpy_wacz(str(tw.tmp / "save"), "-o", str(target)).returncode == 0
    work = tw.tmp / "pywb"
    work.mkdir()
    site = tw.web.sites["w.test"]
    with WaczPywb([target], work) as pywb:
        for path, want in (("/a.html", site.pages["/a.html"].body),
                           ("/latin.html", LATIN1.encode("latin-1"))):
            [(capture, status, body)] = pywb.replay_all(tw.url("w.test", path))
            want = want.encode() if isinstance(want, str) else want
            assert (status, body) == (200, want), path
        assert pywb.replay_all(tw.url("w.test", "/missing.html"))[0][0].status == "404"


def replaywebpage() -> Path | None:
    """npm's replaywebpage package (`make .replaywebpage/.installed`), or where LARBINPY_RWP
    names (a folder holding its ui.js and sw.js)."""
    where = os.environ.get("LARBINPY_RWP")
    for d in ([Path(where)] if where else []) + [CHECKOUT / ".replaywebpage" / "package"]:
        if (d / "ui.js").exists() and (d / "sw.js").exists():
            return d
    return None


EMBED = """<!doctype html><html><head><script src="/ui.js"></script></head><body>
<replay-web-page source="/crawl.wacz" url="{url}" replayBase="/replay/" embed="replayonly"
 style="display:block;width:900px;height:600px"></replay-web-page></body></html>"""


async def devtools(browser: str, profile: Path) -> tuple[asyncio.subprocess.Process, str]:
    """Headless Chromium with its DevTools port: (process, the page's websocket URL)."""
    proc = await asyncio.create_subprocess_exec(
        browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    active = profile / "DevToolsActivePort"
    await until(lambda: active.exists() and len(active.read_text().split()) == 2,
                "Chromium's DevTools port")
    port = active.read_text().split()[0]
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/json") as r:
        targets = await r.json()
    return proc, next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")


def frame_texts(node: dict, out: dict[str, str]) -> dict[str, str]:
    """Text of every document in a DOM tree (iframes and shadow roots pierced), by URL."""
    for doc in node.get("contentDocument"), *node.get("shadowRoots", []):
        if doc:
            frame_texts(doc, out)
    if node.get("nodeName") == "#document":
        out[node.get("documentURL", "")] = "".join(_texts(node))
    for child in node.get("children", []):
        frame_texts(child, out)
    return out


def _texts(node: dict) -> list[str]:
    """The text nodes of one document (not of its frames)."""
    found = [node.get("nodeValue", "")] if node.get("nodeType") == 3 else []
    for child in node.get("children", []):
        found += _texts(child)
    return found


@pytest.mark.browser
async def test_replaywebpage_opens_the_wacz_and_shows_each_page_as_archived(make_web):
    from test_daemon import chromium

    browser, package = chromium(), replaywebpage()
    if browser is None:
        pytest.skip("Chromium is not installed (.ci/run installs Debian's chromium)")
    if package is None:
        pytest.skip("replaywebpage is not installed: make .replaywebpage/.installed (npm)")
    tw, _ = await crawled(make_web)
    site_dir = tw.tmp / "rwp"
    (site_dir / "replay").mkdir(parents=True)
    shutil.copy(package / "ui.js", site_dir / "ui.js")
    shutil.copy(package / "sw.js", site_dir / "replay" / "sw.js")
    assert larbinpy_wacz(str(tw.tmp / "save"), "-o", str(site_dir / "crawl.wacz")).returncode == 0
    pages = {"a": (tw.url("w.test", "/a.html"), "Page A"),
             "latin": (tw.url("w.test", "/latin.html"), "Caf\xe9 cr\xe8me")}
    for name, (url, _) in pages.items():
        (site_dir / f"{name}.html").write_text(EMBED.format(url=url))
    app = web.Application()  # aiohttp's static files answer Range requests, as the WACZ needs
    app.router.add_static("/", site_dir)
    runner = web.AppRunner(app)
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    port = server._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    proc, ws_url = await devtools(browser, tw.tmp / "chrome")
    try:
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url, max_msg_size=0) as ws:
            calls = iter(range(1, 10**6))

            async def call(method: str, **params: object) -> dict:
                n = next(calls)
                await ws.send_json({"id": n, "method": method, "params": params})
                while True:
                    msg = await ws.receive_json(timeout=30)
                    if msg.get("id") == n:
                        return msg.get("result", {})

            for name, (url, title) in pages.items():
                await call("Page.navigate", url=f"http://127.0.0.1:{port}/{name}.html")

                async def replayed(url: str = url, title: str = title) -> bool:
                    tree = await call("DOM.getDocument", depth=-1, pierce=True)
                    return any(u.endswith("mp_/" + url) and title in text
                               for u, text in frame_texts(tree["root"], {}).items())

                await until(replayed, f"{url} replayed by ReplayWeb.page", timeout=60)
    finally:
        proc.terminate()  # Chromium takes its helper processes down with it
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        await runner.cleanup()
