"""`output mirror`: the site tree on disk, and nothing ever written outside saveDir."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path
from urllib.parse import unquote

import pytest
from conftest import html

from larbinpy.config import parse_config
from larbinpy.demo import Page as WebPage
from larbinpy.demo import Site
from larbinpy.outputs import Outputs
from larbinpy.outputs.mirror import NAME_MAX, MirrorOutput, mirror_parts
from larbinpy.records import Job, Page
from larbinpy.stats import Stats


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("http://a.test/", ["a.test", "index.html"]),
        ("http://a.test", ["a.test", "index.html"]),
        ("http://a.test:8080/dir/", ["a.test:8080", "dir", "index.html"]),
        ("http://a.test:80/x.html", ["a.test", "x.html"]),
        ("https://a.test:443/x", ["a.test", "x"]),
        ("https://a.test:80/x", ["a.test:80", "x"]),
        ("http://a.test/p?x=1&y=/z", ["a.test", "p%3Fx=1&y=%2Fz"]),
        ("http://a.test/dir/?q", ["a.test", "dir", "index.html%3Fq"]),
        ("http://a.test/a%20b:c", ["a.test", "a%2520b%3Ac"]),
        ("http://a.test/x#frag", ["a.test", "x"]),
        ("http://A.Test/X", ["a.test", "X"]),
    ],
)
def test_urls_map_to_paths(url: str, parts: list[str]):
    assert mirror_parts(url) == parts


@pytest.mark.parametrize("text", ["a b", "50%", "%2e%2e", "q?x=/y\\z", "caf\u00e9", "x:y*z|\"<>"])
def test_names_are_reversible(text: str):
    name = mirror_parts(f"http://a.test/{text}")[-1]
    assert "/" not in name and "\\" not in name and name.isascii()
    assert unquote(name) == text.split("?")[0] + ("?" + text.split("?")[1] if "?" in text else "")


def test_long_names_are_cut_with_a_hash_that_keeps_them_apart():
    a = mirror_parts("http://a.test/" + "n" * 400 + "a")[-1]
    b = mirror_parts("http://a.test/" + "n" * 400 + "b")[-1]
    assert len(a) <= NAME_MAX and len(b) <= NAME_MAX and a != b


def page(url: str, body: bytes = b"data", status: int = 200) -> Page:
    """A fetched page, as the reader makes it."""
    return Page(job=Job(url, 1), url=url, status=status, headers={}, body=body,
                content_type="text/html", ip="127.0.0.2", fetched_at=time.time(), elapsed=0.0)


def mirror_outputs(save: Path) -> Outputs:
    """Outputs with only the mirror."""
    return Outputs(parse_config(f"saveDir {save}\noutput mirror\n"), Stats())


def snapshot(root: Path) -> set[str]:
    """Every path under `root`, symlinks not followed."""
    return {str(Path(d, n).relative_to(root)) for d, dirs, files in os.walk(root)
            for n in dirs + files}


HOSTILE = [
    "http://a.test/../../../escaped.txt",
    "http://a.test/%2e%2e/%2e%2e/escaped.txt",
    "http://a.test/%2E%2E%2F%2E%2E%2Fescaped.txt",
    "http://a.test/a%2F..%2F..%2F..%2Fescaped.txt",
    "http://a.test/..%5C..%5C..%5Cescaped.txt",
    "http://a.test/..\\..\\..\\escaped.txt",
    "http://a.test//tmp/escaped.txt",
    "http://a.test/./../escaped.txt",
    "http://a.test/nul%00byte",
    "http://a.test/nul\x00byte/x",
    "http://a.test/x?../../escaped.txt",
    "http://a.test/x?/../../escaped.txt",
    "http://../escaped.txt",
    "http://./escaped.txt",
    "http://%2e%2e/escaped.txt",
    "http://a.test:8080/..",
    "http://[::1]:8080/x",
    "http://a.test/" + "n" * 300,
    "http://a.test/" + "\u00e9" * 200 + "/" + "\u00e9" * 200,
    "http://a.test/" + "/".join(["d" * 200] * 40),
    "file:///etc/passwd",
]


def test_hostile_urls_never_write_outside_save_dir(tmp_path):
    save = tmp_path / "jail" / "save"
    save.mkdir(parents=True)
    (tmp_path / "jail" / "sibling").mkdir()
    before = snapshot(tmp_path)
    outs = mirror_outputs(save)
    for url in HOSTILE:
        outs.write(page(url))
    outs.close()
    created = snapshot(tmp_path) - before
    assert created and all(p.startswith("jail/save/") for p in created), created
    for p in created:
        full = tmp_path / p
        assert not full.is_symlink()
        assert len(full.name.encode()) <= 255
        assert full.resolve().is_relative_to(save.resolve())
    assert not any(p.endswith("%tmp") for p in created)  # no temporary file left
    assert outs.status()["backlog"] == 0  # refusals are errors, never a pause


def test_a_planted_symlink_is_never_followed(tmp_path):
    save, outside = tmp_path / "save", tmp_path / "outside"
    save.mkdir()
    outside.mkdir()
    (outside / "target").write_bytes(b"precious")
    os.symlink(outside, save / "a.test")  # a host folder that is a link
    (save / "b.test").mkdir()
    os.symlink(outside, save / "b.test" / "sub")  # a folder below a host
    (save / "c.test").mkdir()
    os.symlink(outside / "target", save / "c.test" / "x")  # a file that is a link
    os.symlink(outside / "target", save / "c.test" / "y%tmp")  # the temporary name too
    stats = Stats()
    outs = Outputs(parse_config(f"saveDir {save}\noutput mirror\n"), stats)
    for url in ("http://a.test/x", "http://a.test/", "http://b.test/sub/x", "http://c.test/x",
                "http://c.test/y"):
        outs.write(page(url, b"evil"))
    outs.close()
    assert sorted(p.name for p in outside.iterdir()) == ["target"]
    assert (outside / "target").read_bytes() == b"precious"
    # the link at c.test/x was replaced by a real file; the others were refused and counted
    assert not (save / "c.test" / "x").is_symlink()
    assert (save / "c.test" / "x").read_bytes() == b"evil"
    assert stats.output_errors == 4 and outs.errors == 4


def test_a_file_and_a_folder_of_the_same_name_both_fit(tmp_path):
    out = MirrorOutput(str(tmp_path))
    out.save("http://a.test/a", b"file a")
    out.save("http://a.test/a/b", b"file a/b")
    out.save("http://a.test/d/x", b"file d/x")
    out.save("http://a.test/d", b"file d")
    assert (tmp_path / "a.test/a/index.html").read_bytes() == b"file a"
    assert (tmp_path / "a.test/a/b").read_bytes() == b"file a/b"
    assert (tmp_path / "a.test/d/index.html").read_bytes() == b"file d"


async def test_a_crawl_is_mirrored_page_by_page(make_web):
    zipped = html("/", title="zipped").body.encode()
    tw = await make_web([Site("m.test", "127.0.0.2", {
        "/": html("/a.html", "/dir/", "/dir/b.html?x=1", "/z.html"),
        "/a.html": html("/"),
        "/dir/": html("/"),
        "/dir/b.html?x=1": html("/"),
        "/z.html": WebPage(gzip.compress(zipped), headers={"Content-Encoding": "gzip"}),
    })])
    await tw.crawl(f"startUrl {tw.url('m.test')}\noutput mirror\n")
    host = f"m.test:{tw.web.port}"
    root = tw.tmp / "save" / host
    site = tw.web.sites["m.test"]
    expected = {"index.html": "/", "a.html": "/a.html", "dir/index.html": "/dir/",
                "dir/b.html%3Fx=1": "/dir/b.html?x=1"}
    for rel, path in expected.items():
        assert (root / rel).read_bytes() == site.pages[path].body.encode(), rel
    assert (root / "z.html").read_bytes() == zipped  # decoded: a mirror is for reading
