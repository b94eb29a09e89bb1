"""Sitemaps (`sitemaps on`): the URLs a site lists, fed to the input stage like links.

Where they come from: the `Sitemap:` lines of robots.txt (the robots stage hands them to
input, which queues each as a job of kind SITEMAP, scoped and de-duplicated like any URL; a
site without such lines costs nothing, nothing is probed). The reader fetches a sitemap job
politely like a page and calls `parse` on its body instead of the link extractor:

- a `<urlset>` gives page URLs (input queues them at `sitemapPriority`, full `depthInSite`);
- a `<sitemapindex>` gives more sitemaps (queued as SITEMAP jobs one nesting level down, so a
  chain of indexes is bounded by MAX_NESTING);
- a gzip-compressed file (a `.gz` sitemap, whatever its headers say) is inflated here;
- limits: at most MAX_URLS URLs (the protocol's) and MAX_BYTES bytes (after inflating) are
  read from one file, the rest is ignored and counted. MAX_BYTES is the default `maxPageSize`,
  not the protocol's 50 MB: sitemaps are read concurrently like pages, and each must cost
  no more memory than a page may.

With `recrawl on`, a urlset's `<lastmod>` values are read too (`lastmods`): a page listed as
modified after its last fetch is due again (`stages/revisits.py` decides, per site, whether the
site's lastmod values have proved true).

`<loc>` values are found with a regular expression rather than an XML parser: a sitemap from
the web may be broken or hostile (entity expansion), and only the `<loc>` elements matter.
"""

from __future__ import annotations

import html
import itertools
import re
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

MAX_URLS = 50_000
MAX_BYTES = 10 * 1024 * 1024  # the default maxPageSize (see the module's docstring)
MAX_NESTING = 2  # robots.txt -> index -> sitemap; deeper indexes are dropped as tooDeep
_LOC = re.compile(rb"<loc>\s*(?:<!\[CDATA\[)?\s*([^<\]]*?)\s*(?:\]\]>)?\s*</loc>", re.I)
_INDEX = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?sitemapindex[\s>]")
GZIP_MAGIC = b"\x1f\x8b"


_ENTRY = re.compile(rb"<url[\s>](.*?)</url>", re.I | re.S)
_LASTMOD = re.compile(rb"<lastmod>\s*([^<]*?)\s*</lastmod>", re.I)


@dataclass(slots=True)
class Sitemap:
    """What one sitemap file listed."""

    is_index: bool
    urls: list[str]  # as written (XML-unescaped), at most MAX_URLS
    dropped: int  # URLs beyond MAX_URLS (or cut off by MAX_BYTES: at least 1)


def lastmods(data: bytes, limit_urls: int = MAX_URLS,
             limit_bytes: int = MAX_BYTES) -> list[tuple[str, float]]:
    """A urlset's `<url>` entries that give a `<lastmod>`: (URL as written, Unix time); the
    W3C datetime forms (a date alone is its midnight UTC), unreadable ones left out."""
    data, _ = inflate(data, limit_bytes)
    out: list[tuple[str, float]] = []
    for m in itertools.islice(_ENTRY.finditer(data, 0, limit_bytes), limit_urls):
        entry = m.group(1)
        loc, mod = _LOC.search(entry), _LASTMOD.search(entry)
        if loc is None or mod is None:
            continue
        when = w3c_time(mod.group(1).decode("ascii", "replace"))
        if when is not None:
            out.append((html.unescape(loc.group(1).decode("utf-8", "replace")), when))
    return out


def w3c_time(text: str) -> float | None:
    """A sitemap's W3C datetime as Unix time (no zone: UTC); None when unreadable."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class SitemapError(Exception):
    """A compressed sitemap that does not inflate."""


def inflate(data: bytes, limit: int = MAX_BYTES) -> tuple[bytes, bool]:
    """Gunzip a body that starts with the gzip magic, at most `limit` bytes: (data, cut)."""
    if not data.startswith(GZIP_MAGIC):
        return data, False
    d = zlib.decompressobj(zlib.MAX_WBITS | 16)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error:
        raise SitemapError("corrupt gzip sitemap") from None
    return out[:limit], len(out) > limit


def parse(data: bytes, limit_urls: int = MAX_URLS, limit_bytes: int = MAX_BYTES) -> Sitemap:
    """The URLs of a sitemap body (gzip-compressed or not); SitemapError if it cannot inflate."""
    data, cut = inflate(data, limit_bytes)
    if len(data) > limit_bytes:
        data, cut = data[:limit_bytes], True
    is_index = _INDEX.search(data, 0, 4096) is not None
    urls: list[str] = []
    dropped = 1 if cut else 0
    for m in _LOC.finditer(data):
        if len(urls) >= limit_urls:
            dropped += 1
            continue
        text = m.group(1).decode("utf-8", "replace")
        if text:
            urls.append(html.unescape(text))
    return Sitemap(is_index, urls, dropped)
