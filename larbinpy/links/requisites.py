"""Page requisites: the URLs a page, or a stylesheet, needs to render, from what the scan found.

With `requisites` (on by default with `output warc`), `extract.py` asks the link scanner
(`tagscan.py`) for a page's embeds in the same pass as its links; this module turns what the
scan found into hrefs: `<img src>`, the `<link>`s whose rel is a stylesheet, an icon or a
preload (`REQUISITE_RELS`), the `src`/`data`/`poster`/`background` values, the candidates of
each `srcset` (`srcset_urls`, the HTML Standard's parse), and the `url()`s of `style`
attributes and `<style>` blocks (`css_urls`). The crawl fetches a page's requisites one hop
past the page (`stages/input.py`, `Input.add_requisites`), and a fetched stylesheet's own
`url()`s and `@import`s the same way (`stages/parser.py`).

CSS is read with tinycss2's tokenizer (the CSS Syntax spec's tokens: escapes, strings,
comments, nested blocks), not a regular expression. It reads about 1.5 MB/s: a stylesheet is
read up to `CSS_MAX_CHARS` (the rest is counted, not read: one sheet holds the event loop at
most a fraction of a second), and a text with none of the words a URL token needs is not
tokenized at all (most `style` attributes: `color:red`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import tinycss2
from tinycss2 import ast

from larbinpy.links.tagscan import Scan

__all__ = ["CSS_MAX_CHARS", "REQUISITE_RELS", "css_urls", "page_requisites", "srcset_urls"]

# `<link rel>` values naming something the page itself uses (the rest are links or metadata)
REQUISITE_RELS = frozenset({"stylesheet", "icon", "preload", "modulepreload",
                            "apple-touch-icon"})
CSS_MAX_CHARS = 512 * 1024
_ASCII_WHITESPACE = " \t\n\f\r"
# The words (lower case) without one of which a CSS text has no URL token nor @import: a
# `url(` token, `@import "..."`, `image-set("...")`; an escape can spell any of them.
_CSS_WORDS = ("url", "import", "image-set", "\\")


def page_requisites(found: Scan, limit: int) -> tuple[list[str], bool]:
    """The hrefs of a scanned page's requisites, as written (stripped, not resolved), at most
    `limit`, and whether there were more, or a `<style>` block over CSS_MAX_CHARS (a `srcset`
    of 10,000 candidates is split only up to the limit)."""
    hrefs: list[str] = [*found.img, *(href for rel, href in found.link
                                      if href is not None and is_requisite_rel(rel)),
                        *found.res]
    for srcset in found.srcset:
        hrefs += srcset_urls(srcset, limit + 1 - len(hrefs))
    cut = False
    for text in (*found.style, *found.sheets):
        if len(hrefs) > limit:
            break
        urls, too_long = css_urls(text, limit + 1 - len(hrefs))
        hrefs += urls
        cut |= too_long
    hrefs = [h for h in (h.strip(_ASCII_WHITESPACE) for h in hrefs) if h and h[0] != "#"]
    return (hrefs, cut) if len(hrefs) <= limit else (hrefs[:limit], True)


def is_requisite_rel(rel: str | None) -> bool:
    """Whether a `<link>`'s rel names something the page uses (REQUISITE_RELS)."""
    return rel is not None and not REQUISITE_RELS.isdisjoint(rel.lower().split())


def srcset_urls(srcset: str, limit: int) -> list[str]:
    """The URLs of a `srcset`'s image candidates, at most `limit`: the HTML Standard's "parse
    a srcset attribute" (a URL runs to whitespace, trailing commas end it; its descriptors
    run to a comma outside parentheses), descriptors themselves not checked."""
    urls: list[str] = []
    pos, n = 0, len(srcset)
    while len(urls) < limit:
        while pos < n and (srcset[pos] in _ASCII_WHITESPACE or srcset[pos] == ","):
            pos += 1
        if pos >= n:
            break
        start = pos
        while pos < n and srcset[pos] not in _ASCII_WHITESPACE:
            pos += 1
        url = srcset[start:pos]
        if url.endswith(","):
            url = url.rstrip(",")
        else:
            pos = _descriptors_end(srcset, pos)
        if url:
            urls.append(url)
    return urls


def _descriptors_end(srcset: str, pos: int) -> int:
    """Where a candidate's descriptors end: after the first comma outside parentheses."""
    depth = 0
    for i in range(pos, len(srcset)):
        c = srcset[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(depth - 1, 0)
        elif c == "," and not depth:
            return i + 1
    return len(srcset)


def css_urls(text: str, limit: int) -> tuple[list[str], bool]:
    """The URLs a CSS text (a stylesheet, a `<style>` block or a `style` attribute's
    declarations) names, in source order, at most `limit`: `url()` tokens and functions,
    `@import` strings, `image-set()` strings; and whether the text was cut at
    CSS_MAX_CHARS."""
    cut = len(text) > CSS_MAX_CHARS
    if cut:
        text = text[:CSS_MAX_CHARS]
    lowered = text.lower()
    if not any(word in lowered for word in _CSS_WORDS):
        return [], cut
    urls: list[str] = []
    for url in _urls(tinycss2.parse_component_value_list(text, skip_comments=True)):
        urls.append(url)
        if len(urls) >= limit:
            break
    return urls, cut


def _urls(tokens: list[ast.Node]) -> Iterator[str]:
    """The URLs of a token list, nested blocks and functions included (a stack, not
    recursion: a sheet may nest its blocks thousands deep)."""
    stack: list[Iterator[ast.Node]] = [iter(tokens)]
    importing = False  # after an @import, its first string is a URL
    while stack:
        token = next(stack[-1], None)
        if token is None:
            stack.pop()
            importing = False
            continue
        kind = token.type
        if kind in ("whitespace", "comment"):
            continue
        if kind == "url" or kind == "string" and importing:
            yield token.value
        elif kind == "function":
            name = token.lower_name
            if name == "url" or name.endswith("image-set"):
                yield from _strings(token.arguments)
            if name != "url":
                stack.append(iter(token.arguments))
        elif kind in ("() block", "[] block", "{} block"):
            stack.append(iter(token.content))
        importing = kind == "at-keyword" and token.lower_value == "import"


def _strings(tokens: Iterable[ast.Node]) -> Iterator[str]:
    """The string tokens among a function's arguments (`url("a.png")`, `image-set("a.png"
    1x, "b.png" 2x)`)."""
    return (t.value for t in tokens if t.type == "string")
