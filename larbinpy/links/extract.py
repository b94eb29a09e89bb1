"""Link extraction: turns a fetched HTML body into the canonical URLs the frontier should see.

The fetcher hands over raw bytes; this module reads them as UTF-8 (transcoding a page whose BOM
or ``<meta charset>`` names another encoding, as lexbor does; invalid bytes become U+FFFD),
finds the link-bearing tags in one pass without building a tree (`tagscan.py`), and lets
`Normalizer` resolve them against the page's base URL the way a browser would. lexbor's tree
(selectolax) is built only for a page with a `<frameset>` (see `tagscan.py` for why), and on
request (`tree=True`) as the reference the scan is tested against.

Encoding: paths are always percent-encoded as UTF-8, as browsers do. Browsers encode the *query*
of a link on a non-UTF-8 page in the page's encoding; larbinpy uses UTF-8 there too (the page is
transcoded first), so such a link's query can differ from the browser's.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import re
from collections.abc import Callable, Iterable
from itertools import repeat
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

from larbinpy.links.requisites import page_requisites
from larbinpy.links.tagscan import Scan, scan
from larbinpy.links.urls import Normalizer

if TYPE_CHECKING:
    from selectolax.lexbor import LexborHTMLParser

__all__ = ["NAV_RELS", "Extracted", "extract", "extract_links"]

# Link-bearing elements and the attribute that holds the URL. `tree.tags(name)` walks, not
# one CSS selector query over the same elements: lexbor sets its selector engine up per query
# and matches slower than a tag-name walk (docs/benchmarks.md).
_LINK_TAGS = (("a", "href"), ("area", "href"), ("frame", "src"), ("iframe", "src"))
UTF8_BOM = b"\xef\xbb\xbf"
# `<link rel=... href>` relations that lead to other pages of a site (wget follows them too);
# stylesheets, icons, preloads and the like are not pages
NAV_RELS = frozenset({"next", "prev", "previous", "up", "top", "alternate"})
_ASCII_WHITESPACE = " \t\n\f\r"
# Pages over LARGE_PAGE bytes are read SEGMENT bytes at a time (`_extract_large`): the memory
# a piece takes (its hrefs; lexbor's tree, a few dozen times its size, where one is built)
# stays bounded whatever the page's size.
LARGE_PAGE = 512 * 1024
SEGMENT = 256 * 1024
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?([A-Za-z0-9._:-]+)", re.I)
# WHATWG Encoding: these labels mean windows-1252, whatever Python's codecs think
_AS_CP1252 = frozenset({"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "ascii",
                        "us-ascii", "iso_8859-1", "cp819", "ibm819", "windows-1252"})


class Extracted(NamedTuple):
    """What `extract` found in a page."""

    links: list[str]  # absolute canonical links, de-duplicated
    dropped: int  # distinct hrefs dropped, unresolved, past max_links
    requisites: list[str]  # with `requisites`: what the page needs to render, canonical
    requisites_cut: bool  # more requisites than max_links (the rest dropped), or a cut <style>


def extract_links(
    body: bytes,
    page_url: str,
    normalizer: Normalizer,
    *,
    follow_images: bool = False,
    max_links: int = 10000,
    on_too_long: Callable[[int], None] | None = None,
    tree: bool = False,
) -> tuple[list[str], int]:
    """Absolute canonical http(s) links of an HTML page, de-duplicated (in document order per
    kind of element: <a> first, then areas, frames, navigation <link>s, images), and how many
    distinct hrefs were dropped, unresolved, once max_links were found (`extract` without
    requisites, by the shortest path: most crawls' every page)."""
    if len(body) > LARGE_PAGE:
        found = _extract_large(body, page_url, normalizer, follow_images, max_links,
                               on_too_long, tree, False)
        return found.links, found.dropped
    doc = _document(body)
    base, hrefs, _ = _page_scan(doc, page_url, normalizer, follow_images, tree, False)
    hrefs = _without_fragments(_drop_too_long(hrefs, normalizer.max_length, on_too_long))
    # past max_links, the rest is counted (distinct raw hrefs), not resolved
    return normalizer.resolve_upto(base, hrefs, max_links)


def extract(
    body: bytes,
    page_url: str,
    normalizer: Normalizer,
    *,
    follow_images: bool = False,
    max_links: int = 10000,
    on_too_long: Callable[[int], None] | None = None,
    tree: bool = False,
    requisites: bool = False,
) -> Extracted:
    """An HTML page's links (`extract_links`) and, with `requisites`, its requisites
    (`requisites.py`; at most max_links, de-duplicated, in the scan's order), both from one
    scan. Hrefs longer than the normalizer accepts are spider traps: their number goes to
    `on_too_long` (when not 0). A page over LARGE_PAGE is read in pieces (`_extract_large`).
    `tree` builds lexbor's tree of every page instead of scanning it: the reference the scan
    is tested against."""
    if len(body) > LARGE_PAGE:
        return _extract_large(body, page_url, normalizer, follow_images, max_links, on_too_long,
                              tree, requisites)
    doc = _document(body)
    base, hrefs, req = _page_scan(doc, page_url, normalizer, follow_images, tree, requisites)
    hrefs = _without_fragments(_drop_too_long(hrefs, normalizer.max_length, on_too_long))
    # past max_links, the rest is counted (distinct raw hrefs), not resolved
    links, dropped = normalizer.resolve_upto(base, hrefs, max_links)
    if req is None:
        return Extracted(links, dropped, [], False)
    req_hrefs, cut = req
    req_hrefs = _without_fragments(_drop_too_long(req_hrefs, normalizer.max_length,
                                                  on_too_long))
    urls, left = normalizer.resolve_upto(base, req_hrefs, max_links)
    return Extracted(links, dropped, urls, cut or left > 0)


def _document(body: bytes) -> bytes:
    """The page as UTF-8 bytes, as lexbor reads it: as they are (without a BOM), or
    transcoded from the encoding its BOM or early `<meta>` names (`_codec`)."""
    # Pure ASCII reads the same in every encoding a browser knows (WHATWG reads a declared
    # UTF-16 as UTF-8; UTF-7 and EBCDIC labels are unknown to it), so there is no need to look
    # for a declaration -- unless a 7-bit encoding may be shifting into two-byte text, whose
    # bytes can spell "<a": ISO-2022-JP does it with ESC, HZ with "~{". (One-byte searches
    # are memchr; searching for the two-byte "~{" would cost more than the detection it saves.)
    if body.isascii() and b"\x1b" not in body and b"~" not in body:
        return body
    codec = _codec(body)
    if codec == "utf-8":
        return body.removeprefix(UTF8_BOM)
    try:
        text = body.decode(codec, "replace")
    except (UnicodeError, LookupError):  # a codec that refuses these bytes after all
        text = body.decode("utf-8", "replace")
    return text.removeprefix("\ufeff").encode("utf-8", "surrogatepass")


def _page_hrefs(
    doc: bytes, page_url: str, normalizer: Normalizer, follow_images: bool, tree: bool
) -> tuple[str, list[str]]:
    """The base URL of a page (or piece of one) and its hrefs by kind of element."""
    base, hrefs, _ = _page_scan(doc, page_url, normalizer, follow_images, tree, False)
    return base, hrefs


def _page_scan(
    doc: bytes, page_url: str, normalizer: Normalizer, follow_images: bool, tree: bool,
    requisites: bool, limit: int = 10000,
) -> tuple[str, list[str], tuple[list[str], bool] | None]:
    """The base URL of a page (or piece of one), its hrefs by kind of element and, with
    `requisites`, its requisites' hrefs (at most `limit`) and whether some were cut: scanned
    (`tagscan.scan`), or from lexbor's tree where the scan cannot tell (a <frameset>)."""
    if not tree:
        found = scan(doc, requisites) if requisites else scan(doc)
        if not found.needs_tree:
            # (most pages have no <area>, <iframe> nor navigation <link>: no call for those)
            hrefs = _stripped(found.a)
            if found.area:
                hrefs += _stripped(found.area)
            if found.iframe:
                hrefs += _stripped(found.iframe)
            if found.link:
                hrefs += _stripped(href for rel, href in found.link if _is_nav(rel))
            if follow_images and found.img:
                hrefs += _stripped(found.img)
            req = page_requisites(found, limit) if requisites else None
            return _resolved_base(found.base, page_url, normalizer), hrefs, req
    lexbor = _lexbor()
    # The tree as parsed, without lexbor's after-parse DOM updates, which cost parse time. The
    # only update that touches links is <selectedcontent> mirroring the chosen <option>:
    # without it, the option's links are found where the option is, and links written inside
    # <selectedcontent> itself are kept (a browser would replace them) -- the source's links,
    # not the rendered DOM's.
    parsed = lexbor.LexborHTMLParser(doc, options=lexbor.LexborDocumentOptions.WO_EVENTS)
    req = page_requisites(_tree_requisites(parsed), limit) if requisites else None
    return _base(parsed, page_url, normalizer), _hrefs(parsed, follow_images), req


def _stripped(values: Iterable[str | None]) -> list[str]:
    """The non-empty values, without the ASCII whitespace browsers strip around URLs (an
    empty href means "this page")."""
    # (C-level loops: filter out None and "", strip, filter out what was only whitespace)
    return list(filter(None, map(str.strip, filter(None, values), repeat(_ASCII_WHITESPACE))))


def _extract_large(
    body: bytes, page_url: str, normalizer: Normalizer, follow_images: bool, max_links: int,
    on_too_long: Callable[[int], None] | None, tree: bool, requisites: bool,
) -> Extracted:
    """`extract_links` for a page over LARGE_PAGE, read SEGMENT bytes at a time.

    A piece is cut just before a `<`, so every tag is whole; the memory a piece takes (its
    hrefs, or lexbor's tree of it, a few dozen times its size, where one is built) is bounded
    by SEGMENT whatever the page's size. What a whole read would see differently: a `<`
    inside a script, comment or attribute value at a cut may start a spurious tag; links
    come in document order piece by piece (not all <a> first); `<base>` counts only in the
    first piece (where <head> is); and the dropped hrefs are counted distinct within each
    piece.
    """
    doc = _document(body)
    links: dict[str, None] = {}
    req_urls: dict[str, None] = {}
    dropped = 0
    cut = False
    base = page_url
    start = 0
    while start < len(doc):
        end = doc.find(b"<", start + SEGMENT) if len(doc) - start > SEGMENT else -1
        end = len(doc) if end < 0 else end
        room = max(max_links - len(req_urls), 0)
        piece_base, hrefs, req = _page_scan(doc[start:end], page_url, normalizer,
                                            follow_images, tree, requisites, room)
        if start == 0:
            base = piece_base
        hrefs = _without_fragments(_drop_too_long(hrefs, normalizer.max_length, on_too_long))
        found, left = normalizer.resolve_upto(base, hrefs, max(max_links - len(links), 0))
        links.update(dict.fromkeys(found))
        dropped += left
        if req is not None:
            req_hrefs = _without_fragments(_drop_too_long(req[0], normalizer.max_length,
                                                          on_too_long))
            found, left = normalizer.resolve_upto(base, req_hrefs, room)
            req_urls.update(dict.fromkeys(found))
            cut |= req[1] or left > 0
        start = end
    return Extracted(list(links), dropped, list(req_urls), cut)


def _codec(body: bytes) -> str:
    """The Python codec lexbor reads a page with: its BOM's, else its `<meta>` declaration's
    in the first 1024 bytes (the HTML Standard's prescan), else UTF-8."""
    detect = _lexbor_codec()
    if detect is not None:
        return detect(body)
    # the same rules, for a selectolax without its detection function
    if body.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16-le" if body[0] == 0xFF else "utf-16-be"
    codec = "utf-8"
    if not body.startswith(UTF8_BOM):
        m = _META_CHARSET.search(body, 0, 1024)
        if m is not None:
            label = m.group(1).decode("ascii", "replace").lower()
            with contextlib.suppress(LookupError):  # unknown: UTF-8, as lexbor would
                codec = "cp1252" if label in _AS_CP1252 else codecs.lookup(label).name
            if codec.startswith("utf-16"):  # WHATWG: a declared UTF-16 in ASCII bytes is UTF-8
                codec = "utf-8"
    return codec


def _resolved_base(href: str | None, page_url: str, normalizer: Normalizer) -> str:
    """The URL the page's relative links resolve against, given its first `<base href>`'s
    value (None: no <base href>)."""
    if href is None:
        return page_url
    # A <base> that fails to resolve (or is not http/https) is ignored rather than making
    # every relative link on the page unreachable.
    href = href.strip(_ASCII_WHITESPACE)
    return (normalizer.resolve(page_url, href) or page_url) if href else page_url


def _drop_too_long(hrefs: list[str], max_length: int,
                   on_too_long: Callable[[int], None] | None) -> list[str]:
    """The hrefs, those over `max_length` counted and left out.

    The normalizer refuses a URL over its max_length; an href already that long can only
    resolve to such a URL (bar absurd dot-segments): counted here as the trap it is, rather
    than vanishing without a count."""
    if not hrefs or max(map(len, hrefs)) <= max_length:
        return hrefs  # (the common case, answered without a loop in Python)
    too_long = sum(len(href) > max_length for href in hrefs)
    if too_long:
        hrefs = [href for href in hrefs if len(href) <= max_length]
        if on_too_long is not None:
            on_too_long(too_long)
    return hrefs


def _without_fragments(hrefs: list[str]) -> list[str]:
    """The hrefs without their fragments, those that are only one (`#top`: this page, which
    the normalizer drops) left out.

    A canonical URL has no fragment, so `a.html#x` resolves to what `a.html` does; cut, the
    many `a.html#x`, `a.html#y` of a documentation page are one entry of the normalizer's
    cache, instead of a resolution each (`tests/test_extract.py` holds the two equal). Not
    cut: an href whose part before the "#" ends in a space or control character, which the
    URL parser would strip at the end of the input but keeps (escaped) before a fragment."""
    if "#" not in "".join(hrefs):
        return hrefs  # (most pages' lists: one look at them all says so)
    return [_cut(href) if "#" in href else href for href in hrefs if href[0] != "#"]


def _cut(href: str) -> str:
    """An href without its fragment (`_without_fragments`)."""
    head = href.partition("#")[0]
    return head if head[-1] > " " else href


@functools.cache
def _lexbor() -> ModuleType:
    """selectolax's lexbor module, imported at its first use: a crawl that meets no page
    needing it (no <frameset>, nothing but ASCII) never pays its import."""
    import selectolax.lexbor

    return selectolax.lexbor


def _lexbor_codec() -> Callable[[bytes], str] | None:
    """selectolax's encoding detection (lexbor's prescan of <meta>), what its
    `encoding=True` uses; None in a selectolax without it."""
    return getattr(_lexbor(), "_encoding_codec", None)


# --- lexbor's tree: for pages with a <frameset>, and as the scan's reference ---


def _base(tree: LexborHTMLParser, page_url: str, normalizer: Normalizer) -> str:
    """The base URL of a parsed page: its first `<base href>`, if any, wherever it is."""
    for node in tree.tags("base"):
        value = node.attrs.get("href")
        if value is not None:
            return _resolved_base(value, page_url, normalizer)
    return page_url


def _hrefs(tree: LexborHTMLParser, follow_images: bool) -> list[str]:
    """The tree's hrefs by kind of element."""
    hrefs: list[str] = []
    for tag, attr in _LINK_TAGS:
        hrefs += _stripped(node.attrs.get(attr) for node in tree.tags(tag))
    hrefs += _stripped(node.attrs.get("href") for node in tree.tags("link")
                       if _is_nav(node.attrs.get("rel")))
    if follow_images:
        hrefs += _stripped(node.attrs.get("src") for node in tree.tags("img"))
    return hrefs


def _tree_requisites(tree: LexborHTMLParser) -> Scan:
    """What the scan finds with requisites, read from lexbor's tree in document order (the
    scan's reference, and its stand-in for a <frameset> page): a Scan whose other lists are
    empty."""
    img: list[str] = []
    link: list[tuple[str | None, str | None]] = []
    res: list[str] = []
    srcset: list[str] = []
    style: list[str] = []
    sheets: list[str] = []
    for node in tree.root.traverse() if tree.root is not None else ():
        tag = node.tag
        if not tag or tag[0] == "-":  # a comment, doctype or text: "-comment", "-text"...
            continue
        attrs = node.attrs
        if tag == "img":
            img.append(attrs.get("src") or "")
        elif tag == "link":
            link.append((attrs.get("rel"), attrs.get("href")))
        elif tag == "style":
            sheets.append(node.text(deep=True))
        first, second = _TREE_REQ_ATTRS.get(tag or "", (None, None))
        if first and (tag != "input" or (attrs.get("type") or "").lower() == "image"):
            res.append(attrs.get(first) or "")
        if second:
            res.append(attrs.get(second) or "")
        res.append(attrs.get("background") or "")
        if tag in ("img", "source"):
            srcset.append(attrs.get("srcset") or "")
        style.append(attrs.get("style") or "")
    return Scan(None, [], [], [], link, _stripped(img), False, _stripped(res),
                list(filter(None, srcset)), list(filter(None, style)), list(filter(None, sheets)))


# The tree's twin of tagscan's _REQ_ATTRS (lexbor names <image> img)
_TREE_REQ_ATTRS = {"source": ("src", None), "script": ("src", None), "embed": ("src", None),
                   "input": ("src", None), "video": ("src", "poster"),
                   "audio": ("src", "poster"), "track": ("src", "poster"),
                   "object": ("data", None)}


def _is_nav(rel: str | None) -> bool:
    """Whether a `<link>`'s rel names a navigation relation (NAV_RELS)."""
    return rel is not None and not NAV_RELS.isdisjoint(rel.lower().split())
