"""The link-bearing tags of an HTML page, found in one pass over its bytes, without a tree.

`extract.py` hands over a page as UTF-8 bytes (transcoded first if it is in another
encoding); `scan` returns the page's first `<base href>` and the URLs of its `<a>`,
`<area>`, `<iframe>`, `<link>` and `<img>` tags; with `requisites` (`output warc`: what a
page needs to render, see `requisites.py`) also the `src` of `<script>`, `<source>`,
`<embed>`, `<video>`, `<audio>`, `<track>` and `<input type=image>`, `<video poster>`,
`<object data>`, every `background` attribute, the `srcset` of `<img>` and `<source>`, every
`style` attribute and the text of every `<style>` element. It reads them the way the HTML
Standard's tokenizer
reads them: comments, bogus comments and doctypes skipped; `<script>` (with its escaped and
double-escaped states), `<style>`, `<xmp>`, `<iframe>`, `<noembed>`, `<noframes>` read as
raw text, `<textarea>` and `<title>` as RCDATA, everything after `<plaintext>` as text;
attribute names folded to lower case, the first of a duplicated attribute kept, character
references decoded the attribute way (`&copy=` stays as written), NUL as U+FFFD; a tag cut
off by the end of the page dropped.

Of tree construction it models what changes the link list on pages people write: the
content of `<template>` is not part of the document, and `<image>` is `<img>`. A page with a
`<frameset>` is handed back to the caller (`needs_tree`): whether a frameset replaces the
body, and so drops the links found before it, depends on the whole tree builder's state.
Not modelled (links kept in source order, where lexbor's tree would differ): foster
parenting (a link written between table rows comes before the table in the tree), and
foreign content (inside `<svg>`/`<math>` a `<style>` or `<title>` is an element, not text,
and `<![CDATA[` opens a section).

Two twins do the work, held to the same results by tests/test_tagscan.py: `_tagscan`, a C
extension built by `pip install .` (`setup.py`), and `scan_py`, pure Python, one compiled
regex whose match skips everything up to the next tag that matters. Python's regex engine
reads tags at a few ns a byte, slower than lexbor builds its tree, which is why the C twin
exists (docs/benchmarks.md); `scan_py` is what runs where it was not built, or with
LARBINPY_PURE=1 in the environment, and is the readable statement of what both do.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from html.entities import html5 as _ENTITIES
from typing import Any, NamedTuple

from larbinpy import PURE

try:
    from larbinpy.links import _tagscan
except ImportError:  # not built (a source tree without `pip install .`)
    _tagscan = None  # type: ignore[assignment]  # the module's stand-in: "not built"

__all__ = ["Scan", "scan", "scan_py", "scan_c"]

# Tags whose start the scanner stops at. `image` is the tree builder's alias of `img`.
_LINK_TAGS = ("a", "area", "base", "iframe", "link", "img", "image")
# With requisites: the elements whose attributes name something the page needs besides
# those (every other tag is read too: any may have `style` or `background`), and which
# attributes: (the URL attribute, the second one or None).
_REQ_ATTRS = {"source": (b"src", None), "script": (b"src", None), "embed": (b"src", None),
              "input": (b"src", None), "video": (b"src", b"poster"),
              "audio": (b"src", b"poster"), "track": (b"src", b"poster"),
              "object": (b"data", None), "img": (None, None), "image": (None, None)}
_RAW_TEXT = ("script", "style", "xmp", "iframe", "noembed", "noframes", "textarea", "title")
_STOP = sorted({*_LINK_TAGS, *_RAW_TEXT, "template", "frameset", "plaintext"},
               key=len, reverse=True)  # longest first: "area" before "a"
_NAMES = "|".join(_STOP)

# One tag from its name on, as the tokenizer reads it: attributes are separated by
# whitespace or "/", a name runs to whitespace, "/", ">" or "=" (its first character may be
# "="), a value is quoted (a ">" inside does not end the tag) or runs to whitespace or ">".
# A tag (or quoted value) cut off by the end of the page runs to the end ("\Z").
_WS = r"\t\n\f\r "
_ATTRS = (rf"(?:[{_WS}/]|[^{_WS}/>][^{_WS}/>=]*+"
          rf"(?:[{_WS}]*+=[{_WS}]*+(?:\"[^\"]*+\"?|'[^']*+'?|[^{_WS}>]*+))?)*+")
_TAG_END = rf"[^{_WS}/>]*+{_ATTRS}(?:>|\Z)"
_DELIM = rf"(?=[{_WS}/>]|\Z)"
# What is skipped before a tag that matters: text, comments (`<!-->` and `<!--->` are whole
# comments; one cut off runs to the end), doctypes and bogus comments (`<!x`, `<?x`, `</0`,
# which end at the first ">"), `</>`, end tags other than </template>, other start tags, and
# a "<" that opens nothing.
_SKIP = (
    r"(?:[^<]++"
    r"|<!--(?:-?>|.*?--!?>|.*+)"
    r"|<[!?][^>]*+(?:>|\Z)"
    rf"|</(?!template{_DELIM})[A-Za-z]{_TAG_END}"
    r"|</(?:[^A-Za-z>][^>]*+(?:>|\Z)|>|\Z)"
    rf"|<(?!(?:{_NAMES}){_DELIM})[A-Za-z]{_TAG_END}"
    r"|<(?![A-Za-z!?/]))*+"
)
# After the skip: a start tag that matters, a </template>, or the end of the page.
_NEXT_SRC = (rf"{_SKIP}(?:<(?P<start>{_NAMES}){_DELIM}(?P<attrs>{_ATTRS})(?P<end>>|\Z)"
             rf"|</(?P<close>template){_DELIM}{_TAG_END}|\Z)")
# With requisites, every start tag matters: the same skip without its "other start tags".
_SKIP_REQ = _SKIP.replace(rf"|<(?!(?:{_NAMES}){_DELIM})[A-Za-z]{_TAG_END}", "")
_NEXT_REQ_SRC = (rf"{_SKIP_REQ}(?:<(?P<start>[A-Za-z][^{_WS}/>]*+)(?P<attrs>{_ATTRS})"
                 rf"(?P<end>>|\Z)|</(?P<close>template){_DELIM}{_TAG_END}|\Z)")
_FLAGS = re.I | re.S
# (name, "=" and the spaces around it, double-quoted value, single-quoted, unquoted)
_ATTR_SRC = (rf"([^{_WS}/>][^{_WS}/>=]*)"
             rf"(?:([{_WS}]*=[{_WS}]*)(?:\"([^\"]*)\"?|'([^']*)'?|([^{_WS}>]*)))?")
_CHARREF = re.compile(r"&(?:#[xX]([0-9A-Fa-f]+);?|#([0-9]+);?|([A-Za-z0-9]+;?))")
_LONGEST_ENTITY = max(map(len, _ENTITIES))


def _compile(src: str, flags: int = 0) -> re.Pattern[bytes]:
    """One of the scanner's patterns, over bytes (ASCII matters, other bytes are text)."""
    return re.compile(src.encode("ascii"), flags)


class _Pure:
    """The pure twin's compiled patterns, made at its first page (the C twin needs none, and
    compiling them is most of this module's import time)."""

    def __init__(self) -> None:
        self.next = _compile(_NEXT_SRC, _FLAGS).match
        self.next_req = _compile(_NEXT_REQ_SRC, _FLAGS).match
        self.attrs_of = _compile(_ATTR_SRC).findall
        self.end_of = {name: _compile(rf"</{name}{_DELIM}", re.I).search
                       for name in _RAW_TEXT if name != "script"}
        self.script = _compile(rf"</script{_DELIM}|<!--", re.I).search
        self.escaped = _compile(rf"-->|</script{_DELIM}|<script{_DELIM}", re.I).search
        self.double = _compile(rf"-->|</script{_DELIM}", re.I).search


@functools.cache
def _pure() -> _Pure:
    """The pure twin's patterns, compiled once."""
    return _Pure()


class Scan(NamedTuple):
    """What a page links to, by kind of element, in source order, character references
    decoded."""

    base: str | None  # the first <base href>'s value (None: no <base> has an href)
    a: list[str]
    area: list[str]
    iframe: list[str]
    link: list[tuple[str | None, str | None]]  # (rel, href) of every <link>
    img: list[str]  # <img> and <image> src
    needs_tree: bool  # a <frameset>: the caller must build the tree (see the module doc)
    # with requisites only (empty without): by element, its URL attribute (src, data), then
    # poster, then background
    res: Sequence[str] = ()
    srcset: Sequence[str] = ()  # <img> and <source> srcset, as written (candidates not split)
    style: Sequence[str] = ()  # style attributes (CSS declarations)
    sheets: Sequence[str] = ()  # <style> elements' text (raw text: no reference decoded)


# what the twins return: the link lists, then with requisites the four lists of theirs
_Links = tuple[str | None, list[str], list[str], list[str],
               list[tuple[str | None, str | None]], list[str], bool]
_Raw = _Links | tuple[str | None, list[str], list[str], list[str],
                      list[tuple[str | None, str | None]], list[str], bool,
                      list[str], list[str], list[str], list[str]]


def scan_c(doc: bytes, requisites: bool = False) -> Scan:
    """`scan` by the C twin (AttributeError where it was not built)."""
    return _finished(_tagscan.scan(doc, requisites) if requisites else _tagscan.scan(doc))


def scan_py(doc: bytes, requisites: bool = False) -> Scan:
    """`scan` in pure Python."""
    return _finished(_scan_py(doc, requisites))


def _finished(raw: _Raw) -> Scan:
    """The twins' values with their character references and NULs decoded."""
    base, a, area, iframe, link, img, needs_tree = raw[:7]
    if base is not None:
        base = _value(base)
    link = [(rel if rel is None else _value(rel), href if href is None else _value(href))
            for rel, href in link]
    if len(raw) == 7:  # without requisites
        return Scan(base, _values(a), _values(area), _values(iframe), link, _values(img),
                    needs_tree)
    res, srcset, style, sheets = raw[7:]
    # raw text: only the input stream's newlines and NULs, no references
    sheets = [_text(sheet) for sheet in sheets]
    return Scan(base, _values(a), _values(area), _values(iframe), link, _values(img),
                needs_tree, _values(res), _values(srcset), _values(style), sheets)


def _text(text: str) -> str:
    """Raw text as the tokenizer hands it over: CR LF and CR as LF, NUL as U+FFFD."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.replace("\x00", "\ufffd")


def _values(values: list[str]) -> list[str]:
    """The values decoded (most need nothing: one look at them all says so)."""
    joined = "".join(values)
    if "&" not in joined and "\x00" not in joined and "\r" not in joined:
        return values
    return [_value(v) if "&" in v or "\x00" in v or "\r" in v else v for v in values]


def _value(text: str) -> str:
    """An attribute value as the tokenizer hands it over: CR LF and CR as LF (the input
    stream's newlines), references decoded, NUL as U+FFFD."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "&" in text:
        text = _CHARREF.sub(_charref, text)
    return text.replace("\x00", "\ufffd")


def _scan_py(doc: bytes, req: bool = False) -> _Raw:
    """The raw twin of `_tagscan.scan`: values decoded from UTF-8, references not yet."""
    p = _pure()
    found: dict[str, list[Any]] = {k: [] for k in (
        "a", "area", "iframe", "link", "img", "res", "srcset", "style", "sheets")}
    base: str | None = None
    template = 0  # depth of <template>s: their content is not in the document
    pos = 0
    next_tag = p.next_req if req else p.next
    while True:
        m = next_tag(doc, pos)
        assert m is not None  # the pattern matches everywhere: its last alternative is \Z
        pos = m.end()
        start = m["start"]
        if start is None:
            if m["close"] is None:
                break  # the end of the page
            template -= template > 0
            continue
        if not m["end"]:
            break  # a tag cut off by the end of the page is no tag
        name = start.lower().decode("utf-8", "replace")
        if name == "frameset":
            return (None, [], [], [], [], [], True, [], [], [], []) if req else (
                None, [], [], [], [], [], True)
        if req and not template:
            _requisites(name, p.attrs_of(m["attrs"]), found)
        if name in p.end_of or name == "script":
            if name == "iframe" and not template:
                src = _attr(p.attrs_of(m["attrs"]), b"src")
                if src:
                    found["iframe"].append(src)
            if name == "script":
                pos = _script_end(p, doc, pos)
            else:
                end = _raw_end(p, name, doc, pos)
                if req and not template and name == "style" and end > pos:
                    found["sheets"].append(doc[pos:end].decode("utf-8", "replace"))
                pos = end
        elif name == "template":
            template += 1
        elif name == "plaintext":
            break  # the rest of the page is text
        elif template or name not in _LINK_TAGS:
            continue
        elif name == "link":
            attrs = p.attrs_of(m["attrs"])
            found["link"].append((_attr(attrs, b"rel"), _attr(attrs, b"href")))
        elif name == "base":
            if base is None:  # only the first <base> with an href counts, wherever it is
                base = _attr(p.attrs_of(m["attrs"]), b"href")
        else:
            value = _attr(p.attrs_of(m["attrs"]), b"src" if name[0] == "i" else b"href")
            if value:
                found["img" if name[0] == "i" else name].append(value)
    links = (base, found["a"], found["area"], found["iframe"], found["link"], found["img"], False)
    if not req:
        return links
    return (*links, found["res"], found["srcset"], found["style"], found["sheets"])


def _requisites(name: str, attrs: list[tuple[bytes, ...]], found: dict[str, list[Any]]) -> None:
    """What one start tag's attributes name that the page needs to render, onto `found`'s
    lists (in the C twin's order: the URL attribute, poster, background; srcset; style)."""
    first, second = _REQ_ATTRS.get(name, (None, None))
    if first is not None:
        value = _attr(attrs, first)
        if value and (name != "input" or _is_image(_attr(attrs, b"type"))):
            found["res"].append(value)
    if second is not None and (value := _attr(attrs, second)):
        found["res"].append(value)
    if value := _attr(attrs, b"background"):
        found["res"].append(value)
    if name in _SRCSET and (value := _attr(attrs, b"srcset")):
        found["srcset"].append(value)
    if value := _attr(attrs, b"style"):
        found["style"].append(value)


_SRCSET = frozenset({"img", "image", "source"})


def _is_image(kind: str | None) -> bool:
    """Whether an `<input>`'s type is `image`, in any ASCII case (as the C twin compares)."""
    return kind is not None and kind.isascii() and kind.lower() == "image"


scan = scan_c if _tagscan is not None and not PURE else scan_py


def _attr(attrs: list[tuple[bytes, ...]], name: bytes) -> str | None:
    """The value of the first attribute called `name`, decoded (None when it is absent or
    written without "=")."""
    for raw_name, equals, double, single, bare in attrs:
        if raw_name.lower() == name:
            if not equals:
                return None  # `href` without "=": no value (`href=""` is an empty one)
            return (double or single or bare).decode("utf-8", "replace")
    return None


def _raw_end(p: _Pure, name: str, doc: bytes, pos: int) -> int:
    """Where the raw text (or RCDATA) of a `name` element opened before `pos` ends: at its
    end tag, which the main scan then reads as a tag."""
    m = p.end_of[name](doc, pos)
    return len(doc) if m is None else m.start()


def _script_end(p: _Pure, doc: bytes, pos: int) -> int:
    """Where a script's text ends, after the tokenizer's script data states: a `<!--` escapes
    it, a `<script` inside the escape double-escapes it (so a `</script>` there does not end
    it), `-->` ends the escape."""
    search = p.script
    while True:
        m = search(doc, pos)
        if m is None:
            return len(doc)
        token = m.group()
        if token[:2] == b"</":
            if search is p.double:  # leaves the double escape only
                search, pos = p.escaped, m.end() + 1
                continue
            return m.start()
        if token[:1] == b"-":  # "-->"
            search, pos = p.script, m.end()
        elif token[:2] == b"<!":  # "<!--": at its "--", which may end it at once ("<!-->")
            search, pos = p.escaped, m.start() + 2
        else:  # "<script"
            search, pos = p.double, m.end() + 1


def _charref(m: re.Match[str]) -> str:
    """One character reference in an attribute value, decoded as the tokenizer does."""
    hex_digits: str | None
    digits: str
    name: str | None
    hex_digits, digits, name = m.groups()
    written: str = m.group()
    if name is None:
        return _numeric(int(hex_digits, 16) if hex_digits is not None else int(digits))
    for k in range(min(len(name), _LONGEST_ENTITY), 0, -1):
        value = _ENTITIES.get(name[:k])
        if value is not None:
            break
    else:
        return written  # no such name: the text as written
    if name[k - 1] != ";":
        after = name[k:k + 1] or m.string[m.end():m.end() + 1]
        if after and (after.isascii() and (after.isalnum() or after == "=")):
            return written  # `&copy=3`, `&notit`: in an attribute, not a reference
    return value + name[k:]


# Numeric references to C1 controls mean the windows-1252 characters at those bytes
# (the five bytes windows-1252 leaves undefined keep their code points)
_C1 = {n: bytes([n]).decode("cp1252", "ignore") or chr(n) for n in range(0x80, 0xA0)}


def _numeric(n: int) -> str:
    """The character a numeric reference names: U+FFFD for 0, a surrogate or past U+10FFFF."""
    if n == 0 or n > 0x10FFFF or 0xD800 <= n <= 0xDFFF:
        return "\ufffd"
    return _C1.get(n) or chr(n)
