"""larbinpy.links.tagscan: the scan finds what lexbor's tree finds, both twins (C and Python).

The parity test is the scan's specification: on every page here, the base URL and the hrefs
by kind of element that `extract.py` gets from the scan are those it gets from lexbor's tree
(`tree=True`), for the C twin and the pure-Python one. Pages: the bench's synthetic web
(plain and dense), the demo web, a sample of the Python 3.11 documentation (real pages,
tests/data/pydocs), html5lib's tokenizer cases embedded where links are (tests/data), every
named character reference, and random markup. The differences the scan has by design
(tagscan.py's docstring) are listed in KNOWN_DIFFERENCES, and held to be exactly those.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable, Iterator
from html.entities import html5
from pathlib import Path

import pytest
from conftest import c_extension

from larbinpy.bench.synth import SynthFactory, host_name, page_path
from larbinpy.demo.demoweb import demo_sites
from larbinpy.links import extract, tagscan
from larbinpy.links.urls import Normalizer

DATA = Path(__file__).parent / "data"
PAGE = "http://example.com/dir/page.html"
TWINS = {"c": tagscan.scan_c, "python": tagscan.scan_py}


@pytest.fixture(params=sorted(TWINS))
def twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs once with each twin as the scan `extract.py` uses."""
    if request.param == "c":
        c_extension("links._tagscan")  # built by `pip install -e .`: missing, the test fails
    monkeypatch.setattr(extract, "scan", TWINS[request.param])
    return request.param


def hrefs(body: bytes, *, tree: bool, url: str = PAGE,
          requisites: bool = False) -> tuple[object, ...]:
    """(base URL, distinct hrefs by kind of element) of a page, with images, as extract.py
    gets them; with `requisites`, also the hrefs of what the page needs to render and whether
    they were cut (`links/requisites.py`). Distinct: the tree has copies of an <a> the tree
    builder re-opens (`<a href=x><p>1<p>2`), which the link list does not."""
    base, found, req = extract._page_scan(extract._document(body), url, Normalizer(), True,
                                          tree, requisites)
    return (base, list(dict.fromkeys(found))) + ((req,) if requisites else ())


@pytest.fixture(params=[False, True], ids=["links", "requisites"])
def requisites(request: pytest.FixtureRequest) -> bool:
    """A parity test runs for the scan without requisites, and with them."""
    return bool(request.param)


def differences(pages: Iterator[tuple[str, bytes]],
                requisites: bool = False) -> list[tuple[str, object, object]]:
    """The pages whose scan and tree disagree: (name, scan's, tree's)."""
    out = []
    for name, body in pages:
        scanned = hrefs(body, tree=False, requisites=requisites)
        built = hrefs(body, tree=True, requisites=requisites)
        if scanned != built:
            out.append((name, scanned, built))
    return out


# --- the bench webs and real pages ---


def synth_pages(shape: str) -> Iterator[tuple[str, bytes]]:
    """The synthetic web's pages of one shape (10 hosts x 30 pages)."""
    web = SynthFactory(10, 30, port=8080, page_bytes=20000 if shape == "dense" else 10000,
                       links=20, shape=shape)
    for h in range(10):
        for n in range(30):
            page = web(host_name(h), page_path(n))
            assert page is not None
            body = page.body
            yield f"{shape} {h}/{n}", body if isinstance(body, bytes) else body.encode()


def demo_pages() -> Iterator[tuple[str, bytes]]:
    """The demo web's HTML pages."""
    for site in demo_sites():
        for path, page in site.pages.items():
            if page.content_type.startswith("text/html"):
                body = page.body
                yield site.host + path, body if isinstance(body, bytes) else body.encode()


def pydocs_pages(root: Path) -> Iterator[tuple[str, bytes]]:
    """The HTML files under root (the Python documentation)."""
    for path in sorted(root.rglob("*.html")):
        yield str(path.relative_to(root)), path.read_bytes()


@pytest.mark.parametrize("pages", [
    lambda: synth_pages("plain"), lambda: synth_pages("dense"), demo_pages,
    lambda: pydocs_pages(DATA / "pydocs"),
], ids=["synth-plain", "synth-dense", "demo", "pydocs-sample"])
def test_the_bench_webs_and_real_pages(twin: str, pages: Callable[[], Iterator],
                                       requisites: bool) -> None:
    listed = list(pages())
    assert listed and all(hrefs(body, tree=True)[1] for _, body in listed[:3])  # links there
    assert differences(iter(listed), requisites) == []


PYDOCS = Path(os.environ.get("LARBINPY_PYDOCS", "/usr/share/doc/python3.11/html"))


@pytest.mark.slow
def test_every_page_of_the_python_documentation(twin: str) -> None:
    """Debian's python3.11-doc, all of it (LARBINPY_PYDOCS names another copy)."""
    if not (PYDOCS / "index.html").is_file():
        pytest.skip(f"no Python documentation in {PYDOCS} (apt-get install python3.11-doc, "
                    "or LARBINPY_PYDOCS=DIR)")
    listed = list(pydocs_pages(PYDOCS))
    assert len(listed) > 400
    assert differences(iter(listed)) == []


# --- html5lib's tokenizer cases, where links are ---


def html5lib_inputs() -> Iterator[tuple[str, str]]:
    """(name, markup) for every tokenizer case, each in the state it starts in."""
    wraps = {"Data state": "", "PLAINTEXT state": "<plaintext>", "RCDATA state": "<{}>",
             "RAWTEXT state": "<{}>", "Script data state": "<script>"}
    defaults = {"RCDATA state": "textarea", "RAWTEXT state": "style"}
    for path in sorted((DATA / "html5lib-tokenizer").glob("*.test")):
        data = json.loads(path.read_text())
        for i, case in enumerate(data.get("tests", [])):
            text = case["input"]
            if case.get("doubleEscaped"):
                text = re.sub(r"\\u([0-9A-Fa-f]{4})", lambda m: chr(int(m[1], 16)), text)
            for state in case.get("initialStates", ["Data state"]):
                if state not in wraps:
                    continue  # CDATA sections exist only in foreign content
                tag = case.get("lastStartTag") or defaults.get(state, "")
                yield f"{path.stem}#{i} {state}", wraps[state].format(tag) + text


def embeddings(text: str) -> Iterator[str]:
    """A case's markup where it decides links: before a link, inside one's href (quoted each
    way and not), and as a link's attributes."""
    yield f'<a href="/before">{text}<a href="/after">x</a><img src="/i">'
    yield f'<a href="{text}">'
    yield f"<a href='{text}'>"
    yield f"<a href={text}>"
    yield f"<link rel=next {text} href=/n><a {text} href=/x><base {text}><a href=y>"
    yield (f'<img src=/i srcset="{text}"><p style="{text}" background={text}>'
           f"<source src=/s {text}><style>{text}</style><video {text} poster=/p>")


def html5lib_pages() -> Iterator[tuple[str, bytes]]:
    """The tokenizer cases, embedded, as UTF-8 (lone surrogates as the bytes that spell
    them: invalid UTF-8, read as U+FFFD)."""
    for name, text in html5lib_inputs():
        for k, page in enumerate(embeddings(text)):
            yield f"{name} /{k}", page.encode("utf-8", "surrogatepass")


def test_html5lib_tokenizer_cases(twin: str, requisites: bool) -> None:
    listed = list(html5lib_pages())
    assert len(listed) > 5000
    assert differences(iter(listed), requisites) == []


def test_every_named_character_reference(twin: str) -> None:
    """html5lib's namedEntities cases come from the same table: each name, with and without
    what may follow it in an attribute."""
    pages = []
    for name in html5:
        for after in ("", "x", "=", ";", "1", " ", "&"):
            body = f'<a href="/&{name}{after}"><a href=/&{name}{after}>'.encode()
            pages.append((name + after, body))
    assert differences(iter(pages)) == []


PIECES = ["<a href=", "<A HREF=", "<base href=", "<iframe src=", "<area href=", "<img src=",
          "<link rel=next href=", "<image src=", "<template>", "</template>", "<script>",
          "</script>", "<!--", "-->", "--!>", "<style>", "</style", "<textarea>", "<title>",
          "</title>", "<xmp>", "</", "<!", "<?", "<", ">", '"', "'", "=", "/", " ", "\t", "\n",
          "\x00", "&amp;", "&#", "&#x41;", "&not", "x", "/p", "é", "\xff", "<p>", "<div a=",
          "<noscript>", "<noembed>", "</noembed>", "<!DOCTYPE html>", "<select>", "<option>",
          "<ScRiPt>", "</SCRIPT ", "</Title/", "<TEMPLATE>", "</Template >", "<IFRAME SRC=",
          # what requisites read
          "<img srcset=", "<source srcset=", "<source src=", "<script src=", "<video poster=",
          "<audio src=", "<track src=", "<embed src=", "<object data=", "<input type=image src=",
          "<INPUT TYPE=Image SRC=", "<input src=", "<div background=", "<p style=", " style=",
          " background=", "<link rel=stylesheet href=", "<link rel='icon preload' href=",
          "url(", ")", "@import ", "1x, ", ","]
# (no <table> or <svg>: what they change is in KNOWN_DIFFERENCES)


def test_random_markup(twin: str, requisites: bool) -> None:
    """Random sequences of the pieces markup is made of (tags, quotes, comments, raw text,
    references, NULs, invalid UTF-8) read the same."""
    rng = random.Random(30)
    pages = []
    for _ in range(3000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30)))
        # the piece "\xff" as that byte: invalid UTF-8
        pages.append((repr(text), text.encode("utf-8").replace("\xff".encode(), b"\xff")))
    pages += [(f"bytes {i}", rng.randbytes(rng.randint(0, 2000))) for i in range(200)]
    assert differences(iter(pages), requisites) == []


# --- the differences by design ---

KNOWN_DIFFERENCES = {
    # foster parenting: the tree moves the link written between rows before the table
    "<table><tr><td><a href=/1></td></tr><a href=/2></table>":
        (["/1", "/2"], ["/2", "/1"]),
    # foreign content: in <svg>, <title> and <script> are elements, not text
    "<svg><title><a href=/t></title></svg>": ([], ["/t"]),
    "<svg><script><a href=/s></script></svg>": ([], ["/s"]),
}


@pytest.mark.parametrize("markup", sorted(KNOWN_DIFFERENCES))
def test_the_known_differences_are_those(twin: str, markup: str) -> None:
    scanned, built = KNOWN_DIFFERENCES[markup]
    assert hrefs(markup.encode(), tree=False)[1] == scanned
    assert hrefs(markup.encode(), tree=True)[1] == built


def test_a_frameset_page_is_read_from_the_tree(twin: str) -> None:
    """Whether a frameset replaces the body (and drops its links) is the tree builder's."""
    for markup, expected in [
        ('<frameset><frame src="/f"></frameset><a href="/after">', ["/f"]),
        ('<a href="/a"><frameset><frame src="/f">', ["/f"]),
        ('<body><frameset><frame src="/f"><a href="/a">', ["/a"]),
    ]:
        assert extract.scan(markup.encode()).needs_tree
        assert hrefs(markup.encode(), tree=False)[1] == expected


@pytest.mark.parametrize("body", [
    b"\xef\xbb\xbf<a>", b"\xff\xfe<\x00", b"\xfe\xff\x00<", b'<meta charset="windows-1251">',
    b"<meta charset=latin1>", b"<META CHARSET='utf-16'>", b"<meta charset=nonesuch>", b"<p>",
])
def test_the_encoding_without_selectolaxs_detection(monkeypatch, body: bytes) -> None:
    """A selectolax without its detection function: extract.py's own reads what pages
    declare with a BOM or <meta charset> the same way (selectolax reads "latin1" as
    ISO-8859-1, extract.py as the windows-1252 WHATWG says: the same but at 0x80-0x9F)."""
    body += "é".encode(extract._codec(body), "replace")
    text = extract._document(body)
    monkeypatch.setattr(extract, "_lexbor_codec", lambda: None)
    assert extract._document(body) == text


def test_the_scan_in_use_is_the_c_twin_unless_told() -> None:
    """`scan` is the C twin where it was built, the Python one with LARBINPY_PURE=1."""
    pure = bool(os.environ.get("LARBINPY_PURE"))
    assert tagscan.scan is (tagscan.scan_py if pure else tagscan.scan_c)
