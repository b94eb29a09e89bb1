"""Feeds (RSS 2.0, RSS 1.0, Atom 1.0): the pages a site announces, with their dates.

A feed reaches the crawl as a link (`<link rel="alternate" type="application/rss+xml">` is a
navigation link, `links/extract.py`); the reader tells it by its content type or, for a
generic XML type, by its root element (`sniff`), and `stages/feeds.py` hands the entries
`parse` finds to input (and, with `recrawl on`, their dates to the recrawl: an entry newer
than its page's last fetch makes the page due, as a sitemap's `<lastmod>` does).

Read like a sitemap, for the same reasons (a feed from the web may be broken or hostile):

- with regular expressions and `bytes.find`, not an XML parser: no DTD is read, so no entity
  is expanded (a "billion laughs" feed is a few bytes of junk); the five XML entities and
  character references are unescaped in the values kept, nothing else;
- in one pass whose cost is linear in the body: an entry is the text from an `<item>` or
  `<entry>` to the next closing tag of either, so unclosed or nested tags cannot make the
  scan quadratic;
- bounded as sitemaps are (`links/sitemaps.py`): MAX_BYTES read after inflating a gzip body,
  MAX_URLS entries kept, the rest counted as dropped.

An entry's link: an Atom `<link href>` whose rel is absent or "alternate", else the text of an
RSS `<link>`, else an RSS `<guid>` that is a permalink (not `isPermaLink="false"`). Its date:
the latest of `<updated>`, `<published>`, `<pubDate>` (RFC 822) and `<dc:date>` or
`<dcterms:modified>` (RFC 3339); an unreadable date is no date. `xml:base` is not honoured:
links are resolved against the feed's URL by the caller.
"""

from __future__ import annotations

import html
import re
import zlib
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

from larbinpy.links.sitemaps import (
    GZIP_MAGIC,
    MAX_BYTES,
    MAX_URLS,
    SitemapError,
    inflate,
    w3c_time,
)

__all__ = ["MAX_BYTES", "MAX_ENTRIES", "Feed", "FeedError", "parse", "sniff"]

MAX_ENTRIES = MAX_URLS  # a sitemap's protocol limit: a feed is read no further
SNIFF_BYTES = 4096  # how much of a body `sniff` looks at (after inflating, if gzip)
MAX_VALUE = 8192  # a link or a date longer than this is junk, not kept

_PREFIX = rb"(?:[A-Za-z_][\w.-]*:)?"
_OPEN = re.compile(rb"<" + _PREFIX + rb"(?:item|entry)[\s>/]")
_CLOSE = re.compile(rb"</" + _PREFIX + rb"(?:item|entry)\s*>")
_ATOM_LINK = re.compile(rb"<" + _PREFIX + rb"link\s([^<>]*)>")
_ATTR = re.compile(rb"""([\w:.-]+)\s*=\s*(?:"([^"<]*)"|'([^'<]*)')""")
# an element's text: CDATA, or characters up to the next tag, at most MAX_VALUE of them and
# never past a "<": a failed match stops at the next tag, so however many opening tags a body
# repeats, each character is looked at a bounded number of times
_TEXT = rb"(<!\[CDATA\[[^<\]]{0,%d}\]\]>|[^<]{0,%d})" % (MAX_VALUE, MAX_VALUE)
_RSS_LINK = re.compile(rb"<link>" + _TEXT + rb"</link>", re.S)
_GUID = re.compile(rb"<guid(\s[^<>]*)?>" + _TEXT + rb"</guid>", re.S)
_DATE = re.compile(rb"<(" + _PREFIX + rb"(?:updated|published|pubDate|date|modified))>"
                   + _TEXT + rb"</\1>", re.S)
# the first element after the prolog (declaration, comments, doctype, instructions)
_ROOT = re.compile(rb"\s*<(?:([A-Za-z_][\w.-]*):)?([A-Za-z_][\w.-]*)[\s>/]")
_PROLOG = re.compile(rb"\s*(?:<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>)", re.S | re.I)
_FEED_ROOTS = {b"rss": "feed", b"feed": "feed", b"urlset": "sitemap",
               b"sitemapindex": "sitemap"}


class FeedError(Exception):
    """A compressed feed that does not inflate."""


@dataclass(slots=True)
class Feed:
    """What one feed listed."""

    entries: list[tuple[str, float | None]]  # (link as written, Unix time or None)
    dropped: int  # entries beyond MAX_ENTRIES, or without a link (cut off by MAX_BYTES: +1)


def sniff(body: bytes) -> str | None:
    """"feed", "sitemap" or None: what an XML body is, by its root element, from its first
    SNIFF_BYTES only (a gzip body's first bytes, inflated)."""
    head = body[:SNIFF_BYTES]
    if head.startswith(GZIP_MAGIC):
        try:  # only as much as the head needs: a bomb inflates no further
            head = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(body, SNIFF_BYTES)
        except zlib.error:
            return None
    head = head.removeprefix(b"\xef\xbb\xbf")
    pos = 0
    while (m := _PROLOG.match(head, pos)) is not None and m.end() > pos:
        pos = m.end()
    root = _ROOT.match(head, pos)
    if root is None:
        return None
    name = root.group(2)
    if name == b"RDF":  # RDF is used for more than RSS 1.0: its namespace says which
        return "feed" if b"purl.org/rss/1.0" in head else None
    return _FEED_ROOTS.get(name)


def parse(data: bytes, limit_entries: int = MAX_ENTRIES, limit_bytes: int = MAX_BYTES) -> Feed:
    """The entries of a feed body (gzip-compressed or not), in the feed's order; FeedError if
    it does not inflate. Junk gives no entries, never an exception."""
    try:
        data, cut = inflate(data, limit_bytes)
    except SitemapError:  # (its inflater's error: this module's callers know FeedError)
        raise FeedError("corrupt gzip feed") from None
    if len(data) > limit_bytes:
        data, cut = data[:limit_bytes], True
    entries: list[tuple[str, float | None]] = []
    dropped = 1 if cut else 0
    pos = 0
    while (start := _OPEN.search(data, pos)) is not None:
        end = _CLOSE.search(data, start.end())
        if end is None:  # unclosed: the rest is one cut entry (and no scan starts again)
            break
        pos = end.end()
        if len(entries) >= limit_entries:
            dropped += 1
            continue
        entry = data[start.end():end.start()]
        link = _link(entry)
        if link is None:
            dropped += 1
        else:
            entries.append((link, _date(entry)))
    return Feed(entries, dropped)


def _link(entry: bytes) -> str | None:
    """An entry's link as written (unescaped): Atom's alternate, RSS's link, a permalink guid."""
    for m in _ATOM_LINK.finditer(entry):
        attrs = {k.lower(): (a or b) for k, a, b in _ATTR.findall(m.group(1))}
        rel = attrs.get(b"rel", b"alternate").strip().lower()
        href = attrs.get(b"href")
        if href and rel == b"alternate":
            return _value(href)
    text = _RSS_LINK.search(entry)
    if text is not None and text.group(1):
        return _value(text.group(1))
    guid = _GUID.search(entry)
    if guid is None or b"false" in (guid.group(1) or b"").lower():
        return None
    value = _value(guid.group(2))
    # a guid is a permalink by default, but many feeds put an id there that is no URL
    return value if value is not None and value.startswith(("http://", "https://")) else None


def _date(entry: bytes) -> float | None:
    """The latest date an entry gives (Unix time), None if it gives none that reads."""
    dates = [t for m in _DATE.finditer(entry) if (t := _time(m.group(2))) is not None]
    return max(dates) if dates else None


def _time(raw: bytes) -> float | None:
    """A feed date as Unix time: RFC 3339 (Atom, dc:date) or RFC 822 (RSS); None if neither."""
    text = _value(raw)
    if not text:
        return None
    when = w3c_time(text)
    if when is not None:
        return when
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment.tzinfo is None:  # "-0000": UTC, the zone unknown (RFC 5322)
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _value(raw: bytes) -> str | None:
    """An element's text (CDATA or not) or an attribute's value as a string (entities
    unescaped, but not in CDATA), or None when it is too long to be a link or a date."""
    if len(raw) > MAX_VALUE + 12:
        return None
    if raw.startswith(b"<![CDATA["):
        return raw[9:-3].decode("utf-8", "replace").strip()
    return html.unescape(raw.decode("utf-8", "replace")).strip()
