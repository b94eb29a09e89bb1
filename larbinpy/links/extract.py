"""Link extraction: turns a fetched HTML body into the canonical URLs the frontier should see.

The fetcher hands over raw bytes; this module parses them with selectolax's lexbor backend (which
detects the encoding from a BOM or ``<meta charset>`` and never raises on invalid bytes), finds the
link-bearing elements in document order, and lets `Normalizer` resolve them
against the page's base URL the way a browser would.

Encoding: paths are always percent-encoded as UTF-8, as browsers do. Browsers encode the *query*
of a link on a non-UTF-8 page in the page's encoding; larbinpy uses UTF-8 there too (lexbor hands
us the document already transcoded), so such a link's query can differ from the browser's.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from collections.abc import Callable

from selectolax.lexbor import LexborDocumentOptions, LexborHTMLParser

from larbinpy.links.urls import Normalizer

__all__ = ["NAV_RELS", "extract_links"]

# Link-bearing elements and the attribute that holds the URL. `tree.tags(name)` walks, not
# one CSS selector query over the same elements: lexbor sets its selector engine up per query
# and matches slower than a tag-name walk (docs/benchmarks.md).
_LINK_TAGS = (("a", "href"), ("area", "href"), ("frame", "src"), ("iframe", "src"))
_IMAGE_TAGS = (("img", "src"),)
# `<link rel=... href>` relations that lead to other pages of a site (wget follows them too);
# stylesheets, icons, preloads and the like are not pages
NAV_RELS = frozenset({"next", "prev", "previous", "up", "top", "alternate"})
_ASCII_WHITESPACE = " \t\n\f\r"
# The tree as parsed, without lexbor's after-parse DOM updates, which cost parse time. The only
# update that touches links is <selectedcontent> mirroring the chosen <option>: without it, the
# option's links are found where the option is, and links written inside <selectedcontent>
# itself are kept (a browser would replace them) -- the source's links, not the rendered DOM's.
_NO_EVENTS = LexborDocumentOptions.WO_EVENTS
# Pages over LARGE_PAGE bytes are parsed SEGMENT characters at a time (`_extract_large`): the
# memory a parse takes then stays a few dozen times SEGMENT, whatever the page's size.
LARGE_PAGE = 512 * 1024
SEGMENT = 256 * 1024
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?([A-Za-z0-9._:-]+)", re.I)
# WHATWG Encoding: these labels mean windows-1252, whatever Python's codecs think
_AS_CP1252 = frozenset({"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "ascii",
                        "us-ascii", "iso_8859-1", "cp819", "ibm819", "windows-1252"})


def extract_links(
    body: bytes,
    page_url: str,
    normalizer: Normalizer,
    *,
    follow_images: bool = False,
    max_links: int = 10000,
    on_too_long: Callable[[int], None] | None = None,
) -> tuple[list[str], int]:
    """Absolute canonical http(s) links of an HTML page, de-duplicated (in document order per
    kind of element: <a> first, then areas, frames, navigation <link>s, images), and how many
    distinct hrefs were dropped, unresolved, once max_links were found. Hrefs longer than the
    normalizer accepts are spider traps: their number goes to `on_too_long` (when not 0).
    A page over LARGE_PAGE is read in pieces (`_extract_large`)."""
    if len(body) > LARGE_PAGE:
        return _extract_large(body, page_url, normalizer, follow_images, max_links, on_too_long)
    # Pure ASCII reads the same in every encoding a browser knows (WHATWG reads a declared
    # UTF-16 as UTF-8; UTF-7 and EBCDIC labels are unknown to it), so the parser need not look
    # for a declaration -- unless a 7-bit encoding may be shifting into two-byte text, whose
    # bytes can spell "<a": ISO-2022-JP does it with ESC, HZ with "~{". (One-byte searches
    # are memchr; searching for the two-byte "~{" would cost more than the detection it saves.)
    detect = not body.isascii() or b"\x1b" in body or b"~" in body
    try:
        tree = LexborHTMLParser(body, encoding=detect, options=_NO_EVENTS)
    except (UnicodeError, LookupError):
        # a <meta charset> naming a codec the bytes are not in (e.g. "utf-16" on ASCII)
        tree = LexborHTMLParser(body.decode("utf-8", "replace"), options=_NO_EVENTS)
    base = _base(tree, page_url, normalizer)
    hrefs = _hrefs(tree, follow_images, normalizer.max_length, on_too_long)
    # past max_links, the rest is counted (distinct raw hrefs), not resolved
    return normalizer.resolve_upto(base, hrefs, max_links)


def _extract_large(
    body: bytes, page_url: str, normalizer: Normalizer, follow_images: bool, max_links: int,
    on_too_long: Callable[[int], None] | None,
) -> tuple[list[str], int]:
    """`extract_links` for a page over LARGE_PAGE, parsed SEGMENT characters at a time.

    lexbor's tree of a whole page takes a few dozen times the page's size; pieces cut just
    before a `<` keep every tag whole and bound that memory by SEGMENT whatever the page's
    size. What a whole parse would see differently: a `<` inside a script, comment or
    attribute value at a cut may start a spurious tag; links come in document order piece by
    piece (not all <a> first); `<base>` counts only in the first piece (where <head> is); and
    the dropped hrefs are counted distinct within each piece.
    """
    text = _decode(body)
    links: dict[str, None] = {}
    dropped = 0
    base = page_url
    start = 0
    while start < len(text):
        end = text.find("<", start + SEGMENT) if len(text) - start > SEGMENT else -1
        end = len(text) if end < 0 else end
        tree = LexborHTMLParser(text[start:end], options=_NO_EVENTS)
        if start == 0:
            base = _base(tree, page_url, normalizer)
        hrefs = _hrefs(tree, follow_images, normalizer.max_length, on_too_long)
        del tree  # before the next piece is parsed
        found, left = normalizer.resolve_upto(base, hrefs, max(max_links - len(links), 0))
        links.update(dict.fromkeys(found))
        dropped += left
        start = end
    return list(links), dropped


def _decode(body: bytes) -> str:
    """The text of a page as `html_for_links` hands it over: UTF-8 (with or without a BOM),
    or in the charset its own BOM or early `<meta charset>` names; invalid bytes as U+FFFD."""
    codec = "utf-8"
    if body.startswith((b"\xff\xfe", b"\xfe\xff")):
        codec = "utf-16"
    elif not body.startswith(b"\xef\xbb\xbf"):
        m = _META_CHARSET.search(body, 0, 1024)
        if m is not None:
            label = m.group(1).decode("ascii", "replace").lower()
            with contextlib.suppress(LookupError):  # unknown: UTF-8, as lexbor would
                codec = "cp1252" if label in _AS_CP1252 else codecs.lookup(label).name
            if codec.startswith("utf-16"):  # WHATWG: a declared UTF-16 in ASCII bytes is UTF-8
                codec = "utf-8"
    return body.decode(codec, "replace").removeprefix("\ufeff")


def _base(tree: LexborHTMLParser, page_url: str, normalizer: Normalizer) -> str:
    """The URL the page's relative links resolve against: its first `<base href>`, if any."""
    for node in tree.tags("base"):
        value = node.attrs.get("href")
        if value is not None:  # only the first <base href> counts, wherever it is
            # A <base> that fails to resolve (or is not http/https) is ignored rather than
            # making every relative link on the page unreachable.
            href = value.strip(_ASCII_WHITESPACE)
            return (normalizer.resolve(page_url, href) or page_url) if href else page_url
    return page_url


def _hrefs(tree: LexborHTMLParser, follow_images: bool, max_length: int,
           on_too_long: Callable[[int], None] | None) -> list[str]:
    """The tree's hrefs by kind of element, those over `max_length` counted and left out."""
    hrefs: list[str] = []
    for tag, attr in _LINK_TAGS:
        _collect(tree, tag, attr, hrefs)
    _collect_nav(tree, hrefs)
    if follow_images:
        for tag, attr in _IMAGE_TAGS:
            _collect(tree, tag, attr, hrefs)
    # The normalizer refuses a URL over its max_length; an href already that long can only
    # resolve to such a URL (bar absurd dot-segments): counted here as the trap it is, rather
    # than vanishing without a count.
    too_long = sum(len(href) > max_length for href in hrefs)
    if too_long:
        hrefs = [href for href in hrefs if len(href) <= max_length]
        if on_too_long is not None:
            on_too_long(too_long)
    return hrefs


def _collect(tree: LexborHTMLParser, tag: str, attr: str, hrefs: list[str]) -> None:
    """The non-empty `attr` values of every `tag`, in document order, onto `hrefs`."""
    for node in tree.tags(tag):
        value = node.attrs.get(attr)
        if value:
            # Browsers strip ASCII whitespace around attribute URLs; empty means "this page".
            value = value.strip(_ASCII_WHITESPACE)
            if value:
                hrefs.append(value)


def _collect_nav(tree: LexborHTMLParser, hrefs: list[str]) -> None:
    """The hrefs of `<link>`s whose rel names a navigation relation (NAV_RELS)."""
    for node in tree.tags("link"):
        attrs = node.attrs
        rel = attrs.get("rel")
        if not rel or NAV_RELS.isdisjoint(rel.lower().split()):
            continue
        value = (attrs.get("href") or "").strip(_ASCII_WHITESPACE)
        if value:
            hrefs.append(value)
