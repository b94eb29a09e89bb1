"""Bodies: decoded by larbinpy under maxPageSize, whatever the server's compression."""

from __future__ import annotations

import gzip
import zlib

import brotli
from conftest import html

from larbinpy.demo import Page, Site


def compressed(body: bytes, encoding: str) -> Page:
    """An HTML page sent with a Content-Encoding."""
    data = {
        "gzip": gzip.compress,
        "deflate": zlib.compress,
        "rawdeflate": lambda b: zlib.compress(b)[2:-4],
        "br": brotli.compress,
    }[encoding](body)
    header = "deflate" if encoding == "rawdeflate" else encoding
    return Page(data, headers={"Content-Encoding": header})


async def test_gzip_deflate_and_brotli_pages_are_decoded_and_parsed(make_web, tmp_path):
    link = '<html><a href="/{0}-next.html">next</a></html>'
    pages = {"/": html(*(f"/{e}.html" for e in ("gzip", "deflate", "rawdeflate", "br")))}
    for enc in ("gzip", "deflate", "rawdeflate", "br"):
        pages[f"/{enc}.html"] = compressed(link.format(enc).encode(), enc)
        pages[f"/{enc}-next.html"] = html()
    tw = await make_web([Site("z.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(f"startUrl {tw.url('z.test')}")
    paths = {h.path for h in tw.web.hits}
    assert {f"/{e}-next.html" for e in ("gzip", "deflate", "rawdeflate", "br")} <= paths
    assert crawler.stats.outcomes["success"] == 9
    assert "gzip" in tw.web.hits[1].headers.get("Accept-Encoding", "")
    index = (tmp_path / "save" / "d00000" / "index").read_text()
    saved = {line.split()[1]: line.split()[0] for line in index.splitlines()}
    body = (tmp_path / "save" / "d00000" / saved[tw.url("z.test", "/br.html")]).read_bytes()
    assert body == link.format("br").encode()  # saved decoded


async def test_compression_bombs_stop_at_max_page_size(make_web):
    bomb = b"<html>" + b" " * (64 * 1024 * 1024)  # 64 MB of spaces, ~64 kB compressed
    pages = {
        "/": html("/bomb.gz", "/bomb.br", "/big.html", "/ok.html"),
        "/bomb.gz": compressed(bomb, "gzip"),
        "/bomb.br": compressed(bomb, "br"),
        "/big.html": Page(b"<html>" + b"x" * (3 * 1024 * 1024)),
        "/ok.html": html(),
    }
    tw = await make_web([Site("bomb.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(f"startUrl {tw.url('bomb.test')}\nmaxPageSize 1MiB")
    assert crawler.stats.outcomes["tooBig"] == 3
    assert crawler.stats.outcomes["success"] == 2


async def test_a_corrupt_compressed_body_is_counted_as_bad_encoding(make_web):
    pages = {
        "/": html("/bad.gz", "/ok.html"),
        "/bad.gz": Page(b"\x1f\x8bthis is not gzip at all", headers={"Content-Encoding": "gzip"}),
        "/ok.html": html(),
    }
    tw = await make_web([Site("bad.test", "127.0.0.2", pages)])
    crawler = await tw.crawl(f"startUrl {tw.url('bad.test')}")
    assert crawler.stats.outcomes["badEncoding"] == 1
    assert crawler.stats.outcomes["success"] == 2
