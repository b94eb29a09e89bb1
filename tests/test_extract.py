"""larbinpy.links.extract: which elements yield links, base handling, encodings, limits."""

from __future__ import annotations

import random

import pytest

from larbinpy.links.extract import extract_links
from larbinpy.links.urls import Normalizer

PAGE = "http://example.com/dir/page.html"


@pytest.fixture
def norm() -> Normalizer:
    """A Normalizer with the default settings."""
    return Normalizer()


def links_of(html: str | bytes, norm: Normalizer, **kwargs: object) -> list[str]:
    """Just the links of a page (UTF-8 encoded when given as str)."""
    body = html.encode("utf-8") if isinstance(html, str) else html
    return extract_links(body, PAGE, norm, **kwargs)[0]


def test_anchors_are_resolved_in_document_order(norm: Normalizer) -> None:
    html = '<a href="b.html">b</a><p><a href="/root">r</a></p><a href="https://x.org/">x</a>'
    assert links_of(html, norm) == [
        "http://example.com/dir/b.html",
        "http://example.com/root",
        "https://x.org/",
    ]


def test_base_href_is_honoured(norm: Normalizer) -> None:
    html = '<head><base href="/other/"></head><a href="x.html">x</a><a href="/abs">a</a>'
    assert links_of(html, norm) == ["http://example.com/other/x.html", "http://example.com/abs"]


def test_only_the_first_base_href_counts_even_after_links(norm: Normalizer) -> None:
    html = '<a href="x">x</a><base target="_top"><base href="http://cdn.org/a/"><base href="/no/">'
    assert links_of(html, norm) == ["http://cdn.org/a/x"]


def test_unusable_base_href_falls_back_to_the_page(norm: Normalizer) -> None:
    html = '<base href="javascript:void(0)"><a href="x">x</a>'
    assert links_of(html, norm) == ["http://example.com/dir/x"]


def test_iframes_and_areas_are_found(norm: Normalizer) -> None:
    html = '<map><area href="/area" shape="rect"></map><p><iframe src="/iframe"></iframe></p>'
    assert links_of(html, norm) == ["http://example.com/area", "http://example.com/iframe"]


def test_frames_inside_a_frameset_document(norm: Normalizer) -> None:
    """Frames are found in a frameset page (a browser drops <frame> inside a <body> page)."""
    html = '<html><frameset><frame src="left.html"><frame src="right.html"></frameset></html>'
    assert links_of(html, norm) == [
        "http://example.com/dir/left.html",
        "http://example.com/dir/right.html",
    ]


def test_images_only_when_follow_images(norm: Normalizer) -> None:
    html = '<img src="/pic.png"><a href="/page">p</a>'
    assert links_of(html, norm) == ["http://example.com/page"]
    # links come per kind of element (<a> first, images last), not interleaved
    assert links_of(html, norm, follow_images=True) == [
        "http://example.com/page",
        "http://example.com/pic.png",
    ]


def test_other_attributes_and_elements_are_ignored(norm: Normalizer) -> None:
    html = (
        '<link href="/style.css"><script src="/app.js"></script><a name="x">x</a>'
        '<a src="/not-a-link">y</a><img href="/no"><div href="/div">z</div>'
    )
    assert links_of(html, norm, follow_images=True) == []


def test_whitespace_around_hrefs_is_stripped_and_empty_skipped(norm: Normalizer) -> None:
    html = '<a href="  \n/a\t ">a</a><a href="">e</a><a href="   ">s</a><a href="#top">t</a>'
    assert links_of(html, norm) == ["http://example.com/a"]


def test_non_http_links_are_dropped(norm: Normalizer) -> None:
    html = (
        '<a href="mailto:a@b.c">m</a><a href="javascript:go()">j</a><a href="ftp://f/">f</a>'
        '<a href="tel:1">t</a><a href="http://[bad/">b</a><a href="/ok">ok</a>'
    )
    assert links_of(html, norm) == ["http://example.com/ok"]


def test_duplicates_are_removed(norm: Normalizer) -> None:
    html = (
        '<a href="/a">1</a><a href="/a">2</a><a href="http://EXAMPLE.com:80/a#x">3</a>'
        '<a href="./b">4</a><a href="b">5</a><a href="/a?utm_source=n">6</a>'
    )
    assert links_of(html, norm) == ["http://example.com/a", "http://example.com/dir/b"]


def test_max_links_drops_and_counts(norm: Normalizer) -> None:
    html = "".join(f'<a href="/p{i}">{i}</a>' for i in range(25)) + '<a href="/p0">again</a>'
    links, dropped = extract_links(html.encode(), PAGE, norm, max_links=10)
    assert links == [f"http://example.com/p{i}" for i in range(10)]
    assert dropped == 15
    assert extract_links(html.encode(), PAGE, norm, max_links=25) == (
        [f"http://example.com/p{i}" for i in range(25)],
        0,
    )


def test_garbage_and_binary_input_never_raises(norm: Normalizer) -> None:
    rng = random.Random(99)
    bodies = [b"", b"\x00" * 100, b"\xff\xfe\x00<a href=/x>", b"<a href='\x00\x80\xff'>"]
    bodies += [rng.randbytes(rng.randint(0, 3000)) for _ in range(200)]
    pieces = [
        b"<a href=",
        b"<base href=",
        b"<iframe src=",
        b'"',
        b"'",
        b">",
        b"\x00",
        b"\xc3",
        b"\xff",
        b"/x",
        b"http://",
        b"<!--",
        b"<script>",
        b"</",
        b"<meta charset=utf-16>",
    ]
    bodies += [b"".join(rng.choice(pieces) for _ in range(40)) for _ in range(300)]
    for body in bodies:
        links, dropped = extract_links(body, PAGE, norm, follow_images=True)
        assert isinstance(links, list) and dropped == 0
        assert all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in links)


def test_nul_bytes_do_not_hide_later_links(norm: Normalizer) -> None:
    body = b'<p>\x00\x00</p><a href="/after-nul">x</a>'
    assert links_of(body, norm) == ["http://example.com/after-nul"]


def test_latin1_page_paths_are_utf8_percent_encoded(norm: Normalizer) -> None:
    """The meta charset is honoured; paths are encoded as UTF-8 as browsers do.

    The query is encoded as UTF-8 too, where a browser would use the page's encoding (%E9):
    see docs/url-differences.md.
    """
    body = (
        '<html><head><meta charset="iso-8859-1"></head>'
        '<body><a href="/café/naïve.html?q=é">x</a></body></html>'
    ).encode("latin-1")
    assert links_of(body, norm) == ["http://example.com/caf%C3%A9/na%C3%AFve.html?q=%C3%A9"]


def test_utf8_page_without_declaration(norm: Normalizer) -> None:
    body = '<a href="/東京">x</a>'.encode()
    assert links_of(body, norm) == ["http://example.com/%E6%9D%B1%E4%BA%AC"]


def test_invalid_utf8_bytes_become_replacement_characters(norm: Normalizer) -> None:
    body = b'<a href="/a\xffb">x</a>'
    assert links_of(body, norm) == ["http://example.com/a%EF%BF%BDb"]


def test_iso_2022_jp_text_that_spells_a_tag_does_not_hide_a_link(norm: Normalizer) -> None:
    """An ISO-2022-JP page is all ASCII bytes; its kanji 釈 is ESC $ B "<a" ESC ( B. Read as
    ASCII, that opens a bogus tag that swallows the real link after it."""
    body = ('<html><head><meta charset="iso-2022-jp"></head><body>釈'
            '<a href="/after">x</a></body></html>').encode("iso2022_jp")
    assert body.isascii() and b"<a\x1b" in body
    assert links_of(body, norm) == ["http://example.com/after"]


def test_hz_text_that_spells_a_tag_does_not_hide_a_link(norm: Normalizer) -> None:
    """HZ-GB-2312 is 7-bit too and shifts into two-byte text with "~{": its 坚 is ~{<a~}."""
    body = ('<html><head><meta charset="hz-gb-2312"></head><body>坚'
            '<a href="/after">x</a></body></html>').encode("hz")
    assert body.isascii() and b"~{<a~}" in body and b"\x1b" not in body
    assert links_of(body, norm) == ["http://example.com/after"]


def test_an_ascii_page_declaring_utf16_is_read_as_utf8(norm: Normalizer) -> None:
    """WHATWG: a <meta> declaring UTF-16 on bytes that are not UTF-16 means UTF-8."""
    body = b'<meta charset="utf-16"><a href="/x">x</a>'
    assert links_of(body, norm) == ["http://example.com/x"]


def test_navigation_link_relations_are_followed(norm: Normalizer) -> None:
    html = (
        '<link rel="next" href="/n"><link rel="PREV" href="/p"><link rel="up" href="/u">'
        '<link rel="top" href="/t"><link rel="alternate nofollow" href="/alt">'
        '<link rel="stylesheet" href="/s.css"><link rel="icon" href="/i.png">'
        '<link href="/norel"><link rel="next">'
    )
    assert links_of(html, norm) == [f"http://example.com/{p}" for p in ("n", "p", "u", "t", "alt")]


def test_an_href_over_the_hard_limit_is_counted_not_resolved() -> None:
    norm = Normalizer(max_length=1000)
    html = f'<a href="/{"x" * 2000}">long</a><a href="/ok">ok</a>'
    counted: list[int] = []
    assert extract_links(html.encode(), PAGE, norm, on_too_long=counted.append) == (
        ["http://example.com/ok"], 0)
    assert counted == [1]


PARSE_IN_A_PROCESS = """
import sys
sys.path.insert(0, sys.argv[1])
from test_hostile import peak_rss, peak_rss_reset
from larbinpy.links.extract import extract_links
from larbinpy.links.urls import Normalizer
body = ("<html><body>" + "".join(f'<a href="/{i}">x</a>' for i in range(750_000))).encode()
peak_rss_reset()
before = peak_rss()
links, dropped = extract_links(body, "http://a.test/", Normalizer(), max_links=int(sys.argv[2]))
print(peak_rss() - before, len(body), len(links), dropped)
"""


def test_a_page_of_750000_links_is_parsed_in_bounded_memory() -> None:
    import subprocess
    import sys
    from pathlib import Path

    from larbinpy.links.extract import SEGMENT

    max_links = 10_000
    done = subprocess.run(
        [sys.executable, "-c", PARSE_IN_A_PROCESS, str(Path(__file__).parent), str(max_links)],
        capture_output=True, text=True, timeout=120, check=True)
    growth, size, links, dropped = map(int, done.stdout.split())
    assert (links, dropped) == (max_links, 750_000 - max_links)
    # the page's text (one copy), lexbor's tree of one SEGMENT (a few dozen times its size),
    # the links kept: not a tree of the whole page
    bound = 2 * size + 40 * SEGMENT + max_links * 1024
    assert growth < bound, (growth // 2**20, bound // 2**20)


def test_a_large_page_in_pieces_finds_what_a_whole_parse_finds(norm: Normalizer) -> None:
    from larbinpy.links.extract import LARGE_PAGE

    cells = "".join(f'<td><a href="p{i}">é {i}</a></td>' for i in range(120_000))
    html = (f'<html><head><meta charset="windows-1252"><base href="/dir/sub/"></head><body>'
            f'<table>{cells}</table><a href="http://other.test/x">x</a></body></html>')
    body = html.encode("cp1252")
    assert len(body) > LARGE_PAGE
    links, dropped = extract_links(body, PAGE, norm, max_links=200_000)
    assert dropped == 0
    assert links == [f"http://example.com/dir/sub/p{i}" for i in range(120_000)] + [
        "http://other.test/x"]


def test_an_href_resolves_as_it_does_without_its_fragment() -> None:
    """extract.py cuts fragments before resolving (`_without_fragments`): the same URL, or
    the same refusal, for every href with a fragment in WPT's URL cases and the Python docs
    sample, against their bases and a page's."""
    import json
    import re
    from pathlib import Path

    from larbinpy.links.extract import _without_fragments

    data = Path(__file__).parent / "data"
    cases = [(c["base"] or PAGE, c["input"]) for c in
             json.loads((data / "urltestdata.json").read_text("utf-8"))
             if isinstance(c, dict) and "#" in c["input"]]
    for page in (data / "pydocs").rglob("*.html"):
        cases += [("http://docs.test/3/library/x.html", href) for href in
                  re.findall(r'href="([^"]*#[^"]*)"', page.read_text("utf-8"))]
    checked = 0
    for base, href in cases:
        href = href.strip(" \t\n\f\r")
        if not href or not Normalizer().normalize(base):
            continue
        base = Normalizer().normalize(base) or base
        cut = _without_fragments([href])
        whole = Normalizer().resolve(base, href)
        assert (cut == [] and whole in (None, base)) or (
            Normalizer().resolve(base, cut[0]) == whole), (base, href)
        checked += 1
    assert checked > 1000
