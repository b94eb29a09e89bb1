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
    normalizer accepts are spider traps: their number goes to `on_too_long` (when not 0)."""
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
    base_href = None
    for node in tree.tags("base"):
        value = node.attrs.get("href")
        if value is not None:  # only the first <base href> counts, wherever it is
            base_href = value.strip(_ASCII_WHITESPACE)
            break
    hrefs = []
    for tag, attr in _LINK_TAGS:
        _collect(tree, tag, attr, hrefs)
    _collect_nav(tree, hrefs)
    if follow_images:
        for tag, attr in _IMAGE_TAGS:
            _collect(tree, tag, attr, hrefs)
    # The normalizer refuses a URL over its max_length; an href already that long can only
    # resolve to such a URL (bar absurd dot-segments): counted here as the trap it is, rather
    # than vanishing without a count.
    too_long = sum(len(href) > normalizer.max_length for href in hrefs)
    if too_long:
        hrefs = [href for href in hrefs if len(href) <= normalizer.max_length]
        if on_too_long is not None:
            on_too_long(too_long)
    base = page_url
    if base_href:
        # A <base> that fails to resolve (or is not http/https) is ignored rather than making
        # every relative link on the page unreachable.
        base = normalizer.resolve(page_url, base_href) or page_url
    # past max_links, the rest is counted (distinct raw hrefs), not resolved
    return normalizer.resolve_upto(base, hrefs, max_links)


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
