"""URL normalization and link resolution: the crawler's hot path.

Every link the extractor finds passes through here before it reaches the frontier, so this module
decides what counts as "the same page": ada-url (the WHATWG URL parser Node.js ships) resolves
hrefs against the page URL the way a browser does, and this module puts the result into
larbinpy's canonical form, so that the seen-set and the per-site queues work on one spelling per
page.

Canonical form (beyond what a browser already does):

* the fragment and any userinfo (``user:pass@``) are dropped: a crawler never sends credentials;
* percent-escapes use upper-case hex, and escaped unreserved characters (``A-Za-z0-9-._~``) are
  decoded;
* query parameters (and ``;name=value`` path parameters) named in ``strip_params`` are removed;
* only http and https URLs no longer than ``max_length`` are accepted; anything else is ``None``;
* a host label in punycode (``xn--``) must decode to a valid label (ada-url does not check it).

Most hrefs are plain links, which a rule answers without a parser (`Normalizer._tail`,
`_plain`); ada-url's answers for the rest are cached per base folder (and absolute links
crawl-wide), so it runs once per new href it must parse. Plain links are not cached: the rule
answers one again in less time than a cache takes to remember it. The loop over a page's
cache misses that the rule answers has a C twin (`_plainlinks.c`, built by `pip install .`),
as do a page's cache lookups and the de-duplication of its links (`_resolve_page`), the
pure-Python code running where it was not built or with LARBINPY_PURE=1 in the environment.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable
from itertools import islice, repeat
from typing import Final

from ada_url import join_url, normalize_url

from larbinpy import PURE

try:
    from larbinpy.links import _plainlinks
except ImportError:  # not built (a source tree without `pip install .`)
    _plainlinks = None  # type: ignore[assignment]  # the module's stand-in: "not built"
if PURE:
    _plainlinks = None  # type: ignore[assignment]  # the pure twin, as asked

__all__ = ["DEFAULT_STRIP_PARAMS", "Normalizer", "host_of", "path_of", "site_key"]

DEFAULT_STRIP_PARAMS: frozenset[str] = frozenset(
    {
        "sid",
        "sessionid",
        "session_id",
        "jsessionid",
        "phpsessid",
        "aspsessionid",
        "cfid",
        "cftoken",
        "utm_*",
    }
)

# Entries in the resolution caches (each cache, cleared whole when full). An entry costs about
# 200 bytes across them (href, URL, dict slots); in a crawl's order a larger cache barely
# raises the hit rate (pages of one folder are parsed close together), so larger caches are
# no faster and cost memory that stays resident for the whole crawl.
_CACHE_MAX = 16_384
# URLs in the table of produced URLs (`Normalizer._one`), more than the caches' entries: an
# href that misses the caches but names a URL it holds costs a lookup instead of an ada-url
# call, and a URL costs the table about 140 bytes (its string, which the caches share, and a
# slot), not the caches' 200 an href.
_URLS_MAX = 65_536
_CACHE_HREF_MAX = 512  # longer hrefs (data: URIs, tracking blobs) are not worth the memory
_C0_SPACE = "".join(map(chr, range(0x21)))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HTTP_SCHEMES = frozenset({"http", "https"})
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_PCT = re.compile(r"%[0-9A-Fa-f]{2}")
# Plain links: characters a WHATWG parser copies as they are into a special URL's path (no
# percent-encoding, no ';' parameters, no '%' escapes, no ':' scheme, no '\\'), and into its
# query (where "'" is encoded). Such an href (no dot segment: `_tail` and `_plain` check)
# resolves to its base's folder or origin followed by it, in canonical form: ada-url is not
# asked.
_PLAIN_PATH = r"[A-Za-z0-9\-._~!$&'()*+,=/]*"
_PLAIN_QUERY = r"(?:\?[A-Za-z0-9\-._~!$&()*+,=/?:@]*)?"
_PLAIN_RELATIVE = re.compile(r"(?!//)[A-Za-z0-9\-_~!$&'()*+,=/]" + _PLAIN_PATH + _PLAIN_QUERY)
# A lower-case ASCII host whose last label starts with a letter (not an IPv4 number), and a
# port without leading zeros (`_plain` checks it is not the scheme's default).
_PLAIN_ABSOLUTE = re.compile(r"(https?)://(?:[a-z0-9\-]{1,63}\.)*[a-z][a-z0-9\-]{0,62}"
                             r"(?::([1-9][0-9]{0,4}))?(/" + _PLAIN_PATH + _PLAIN_QUERY + ")?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _pct_table() -> dict[str, str]:
    """Map every '%xx' spelling to its canonical form (decoded if unreserved, else upper-case)."""
    table = {}
    for code in range(256):
        canon = chr(code) if chr(code) in _UNRESERVED else f"%{code:02X}"
        for hi in {f"{code >> 4:X}", f"{code >> 4:x}"}:
            for lo in {f"{code & 15:X}", f"{code & 15:x}"}:
                table[f"%{hi}{lo}"] = canon
    return table


_PCT_CANON = _pct_table()


def _canon_escapes(text: str) -> str:
    """Upper-case percent-escapes and decode escaped unreserved characters."""
    return _PCT.sub(lambda m: _PCT_CANON[m.group()], text) if "%" in text else text


class Normalizer:
    """Turns absolute/relative URLs into larbinpy's canonical form."""

    def __init__(
        self,
        strip_params: frozenset[str] | set[str] = DEFAULT_STRIP_PARAMS,
        max_length: int = 2048,
    ) -> None:
        """Compile the parameter-stripping rules; entries ending in '*' are name prefixes."""
        self.max_length = max_length
        names = sorted(re.escape(p.lower()) for p in strip_params if not p.endswith("*"))
        prefixes = sorted(re.escape(p[:-1].lower()) for p in strip_params if p.endswith("*"))
        alts = names + [p + "[^=&]*" for p in prefixes]
        self._strip_exact = frozenset(p.lower() for p in strip_params if not p.endswith("*"))
        self._strip_prefixes = tuple(p[:-1].lower() for p in strip_params if p.endswith("*"))
        # One C-level regex search tells us cheaply whether a query needs any stripping at all.
        self._query_needs_strip = (
            re.compile(r"[?&](?:" + "|".join(alts) + r")(?:[=&]|\Z)", re.I).search
            if alts
            else None
        )
        self._path_strip = (
            re.compile(r";(?:" + "|".join(alts) + r")(?:=[^/;]*)?(?=[/;]|\Z)", re.I)
            if alts
            else None
        )
        self._cache: dict[str, dict[str, str | None]] = {}
        self._absolute: dict[str, str | None] = {}
        self._same: dict[str, str] = {}  # each cached URL's one string object (see _remember)
        self._cache_size = 0
        self._base_key: str | None = None
        self._base_info: _BaseInfo | None = None

    # ---- public API ----------------------------------------------------------------------

    def normalize(self, url: str) -> str | None:
        """Canonical form of an absolute URL, or None if it is not a valid http(s) URL."""
        if not isinstance(url, str):
            return None
        return self._parse(url, None)

    def resolve(self, base: str, href: str) -> str | None:
        """Resolve href against base (an already-canonical absolute URL) like a browser, then
        normalize; None if the result is not http(s) or invalid."""
        info = self._base(base)
        sub = self._subcache(info.directory) if info is not None else None
        return self._resolve_one(info, sub, href)

    def resolve_many(self, base: str, hrefs: Iterable[str]) -> list[str]:
        """Resolve a page's hrefs: de-duplicate raw hrefs first, drop None results, keep
        first-seen order, de-duplicate results.

        Fragment-only hrefs (``#top``) name the page itself, which the crawler already has, so
        they are skipped without resolving.
        """
        return self.resolve_upto(base, hrefs, None)[0]

    def resolve_upto(
        self, base: str, hrefs: Iterable[str], limit: int | None
    ) -> tuple[list[str], int]:
        """`resolve_many`, stopping once `limit` links are found: (links, distinct raw hrefs
        left unresolved). A page of 200,000 links must not hold the event loop for a second."""
        info = self._base(base)
        hrefs = hrefs if isinstance(hrefs, list) else list(hrefs)
        if info is None or (limit is not None and len(hrefs) > limit):
            distinct = list(dict.fromkeys(hrefs))  # raw hrefs, each once, in order
            cap = len(distinct) if limit is None else limit
            if cap <= 0:
                return [], len(distinct)
            return self._resolve_capped(info, distinct, cap)
        sub = self._subcache(info.directory)
        if _plainlinks is not None:
            return self._resolve_page_c(info, sub, hrefs), 0
        return self._resolve_page(info, sub, hrefs), 0

    def _resolve_page(self, info: _BaseInfo, sub: dict[str, str | None],
                      hrefs: list[str]) -> list[str]:
        """A page's links, each once in the order first found (what `resolve_upto` returns
        without a limit)."""
        # One C-level pass answers the hrefs an earlier page of the folder had ada-url parse;
        # only the misses run Python code. (Raw duplicates are looked up twice: cheaper than
        # removing them first.)
        urls = list(map(sub.get, hrefs, repeat(_MISS, len(hrefs))))
        if _MISS in urls:
            # absolute hrefs live in the crawl-wide cache; the folder's answers are its default
            urls = list(map(self._absolute.get, hrefs, urls))
        if _MISS in urls:
            self._resolve_misses(info, sub, hrefs, urls)
        out = dict.fromkeys(urls)
        out.pop(None, None)
        return list(out)  # type: ignore[arg-type]  # None popped, no _MISS left: all str

    def _resolve_page_c(self, info: _BaseInfo, sub: dict[str, str | None],
                        hrefs: list[str]) -> list[str]:
        """`_resolve_page` by the C twin (its two lookups and the de-duplication)."""
        assert _plainlinks is not None  # (the caller checks)
        urls, missed = _plainlinks.cached(hrefs, sub, self._absolute, _MISS)
        if missed:
            self._resolve_misses(info, sub, hrefs, urls)
        return _plainlinks.distinct(urls)

    def _resolve_misses(self, info: _BaseInfo, sub: dict[str, str | None], hrefs: list[str],
                        urls: list[str | None | _Miss]) -> None:
        """Resolve the hrefs the caches missed (`urls[i]` is _MISS), in place: plain links and
        URLs of the table by the C twin's loop when it is built (`_plainlinks.tails`), the
        rest by `_resolve_link` (which answers those too, in Python)."""
        if _plainlinks is not None:
            _plainlinks.tails(hrefs, urls, _MISS, info.origin, info.directory, self._same,
                              self.max_length, self._path_strip is not None,
                              self._query_needs_strip)
        # (The rest take the whole path again, caches and rule included: an href twice on the
        # page was parsed at its first, and a URL ada-url made for an earlier href of the page
        # is in the table now, which the C loop, run before any of them, could not know.)
        for i, url in enumerate(urls):
            if url is _MISS:
                urls[i] = self._resolve_link(info, sub, hrefs[i])

    def _resolve_link(
        self, info: _BaseInfo | None, sub: dict[str, str | None] | None, href: str
    ) -> str | None:
        """Resolve one href found on a page (a cache miss, or a page over the limit)."""
        if href[:1] == "#":
            return None  # "this page", which the crawler has (not cached: resolve() differs)
        return self._resolve_one(info, sub, href)  # caches the result where it may be shared

    def _resolve_capped(
        self, info: _BaseInfo | None, distinct: list[str], cap: int
    ) -> tuple[list[str], int]:
        """Resolve hrefs one by one until `cap` links are found (huge pages, odd bases)."""
        sub = self._subcache(info.directory) if info is not None else None
        out: dict[str, None] = {}
        for done, href in enumerate(distinct):
            url = self._resolve_link(info, sub, href)
            if url is not None:
                out[url] = None
                if len(out) >= cap:
                    return list(out), len(distinct) - done - 1
        return list(out), 0

    # ---- resolution ----------------------------------------------------------------------

    def _resolve_one(
        self, info: _BaseInfo | None, sub: dict[str, str | None] | None, href: str
    ) -> str | None:
        """Resolve one href, answering from the (base-directory, href) cache when possible."""
        if href[:7] == "http://" or href[:8] == "https://":
            # absolute links do not depend on the base: one cache for every page of the crawl
            hit = self._absolute.get(href, _MISS)
            if hit is not _MISS:
                return hit
            # A URL this normalizer produced is canonical (normalizing is idempotent), and a
            # plain link is its own answer: neither is cached, as each is answered again in
            # less time than a cache takes to remember it; ada-url's answers are.
            known = self._same.get(href)
            if known is not None:
                return known
            result = self._plain(href)
            if result is not _MISS:
                return result
            result = self._parse_ada(href, None)
            if len(self._absolute) >= _CACHE_MAX:
                self._absolute.clear()  # bounded memory, as for the per-directory cache
            if len(href) <= _CACHE_HREF_MAX:
                if result is not None:
                    result = self._one(result)  # see _remember
                    href = result if result == href else href  # one object, not two equal
                self._absolute[href] = result
            return result
        if sub is not None:
            hit = sub.get(href, _MISS)
            if hit is not _MISS:
                return hit
        if info is None:
            return self.normalize(href)
        tail = self._tail(info, href)
        if tail is not _MISS:
            return tail  # a plain link or a URL of the table: not cached (see above)
        result = self._parse(href, info)
        # Results that depend on the base's file name or query must not be shared per-directory.
        if sub is not None and len(href) <= _CACHE_HREF_MAX and not _uses_whole_base(href):
            self._remember(info, sub, href, result)
        return result

    def _remember(
        self, info: _BaseInfo, sub: dict[str, str | None], href: str, result: str | None
    ) -> None:
        """Cache href's resolution for every page in info's folder (bounded in entries)."""
        if self._cache_size >= _CACHE_MAX:
            # Bounded memory: forget everything rather than track recency per entry. The
            # folder's slice is emptied in place, not replaced: the caller holds it for the
            # rest of the page, and what it adds there must stay cached and counted.
            self._cache.clear()
            sub.clear()
            self._cache[info.directory] = sub
            self._cache_size = 1  # the slice itself, as _subcache counts it
        # One object per URL: the same URL reached by "p;1", "/p;1" and "http://h/p;1" is one
        # string in both caches and the seen-set's memo, not three. Resolution is
        # memory-bound (each link is a lookup in a large dict), and fewer objects mean fewer
        # cache lines read and less memory (docs/benchmarks.md). (Our own table, bounded like
        # the caches, not sys.intern: CPython 3.12.0-3.12.5 never frees interned strings.)
        sub[href] = result if result is None else self._one(result)
        self._cache_size += 1

    def _one(self, url: str) -> str:
        """The one string object of a canonical URL (see _remember).

        The table is also what `_tail` knows: it is not emptied with the caches, whose
        entries are per folder and href (a page's links in their many spellings fill them far
        faster than new URLs come), but on its own: when it holds _URLS_MAX URLs, it forgets
        the older half (`_keep_newest_half`)."""
        same = self._same
        one = same.get(url)
        if one is None:
            if len(same) >= _URLS_MAX:
                _keep_newest_half(same)
            one = same[url] = url
        return one

    def _tail(self, info: _BaseInfo, href: str) -> str | None | _Miss:
        """The URL a relative href names on info's page, written out as info's origin or
        folder followed by href, when it is one this normalizer produced already or href is
        a plain link; _MISS when it is neither (ada-url decides).

        A canonical URL has no space, control, backslash, '#' nor dot segment, so an href that
        is its tail, has no ':' (no scheme) and starts with neither '?' nor '//', resolves to
        exactly it: the same page linked as 'p.html', '/d/p.html' and 'http://h/d/p.html' is
        parsed once. Leading './' and '../' segments are the folder and its parents ('../' at
        the root stays there, as the URL standard says), so '../d/p.html' is answered alike.
        An href the table does not hold resolves the same way when it is plain
        (`_PLAIN_RELATIVE`: characters a WHATWG parser copies as they are, no dot segment
        left, no parameter to strip): a crawl larger than the table, whose links mostly miss
        it, parses few of them."""
        first = href[:1]
        if ":" in href or first in "?#":  # '' too
            return _MISS
        if first == "/":
            if href[1:2] == "/":
                return _MISS
            prefix = info.origin
        elif first == ".":
            prefix, href = _climbed(info, href)
            if not href:  # '../': the folder itself (unless a stripped parameter ends it)
                return _MISS if self._may_strip_in(prefix) else prefix
        else:
            prefix = info.directory
        if "./" in href:
            return _MISS
        url = prefix + href
        known = self._same.get(url)
        if known is not None:
            return known
        if "/." in href or not _PLAIN_RELATIVE.fullmatch(href) or (
                first == "." and href[0] == "/"):  # '..//x': an empty segment, not '/x'
            return _MISS
        if self._may_strip_in(prefix):
            return _MISS
        if "?" in url and self._query_needs_strip is not None and self._query_needs_strip(url):
            return _MISS
        return url if len(url) <= self.max_length else None

    def _may_strip_in(self, folder: str) -> bool:
        """May a stripped path parameter begin in `folder` (a parameter named with a '/' can
        end in the href after it, or end the folder's path)? Then no link under it is plain."""
        return ";" in folder and self._path_strip is not None

    def _parse(self, href: str, base: _BaseInfo | None) -> str | None:
        """The WHATWG answer for href (against base), in canonical form; None for failures
        and non-http(s) results: `_plain`'s for a plain absolute link, else ada-url's."""
        if href[:4] == "http":
            plain = self._plain(href)
            if plain is not _MISS:
                return plain
        return self._parse_ada(href, base)

    def _plain(self, href: str) -> str | None | _Miss:
        """An absolute href resolved without a parser when it is a plain link
        (`_PLAIN_ABSOLUTE`, no dot segment, no parameter to strip); _MISS when it is not
        (then ada-url decides)."""
        match = _PLAIN_ABSOLUTE.fullmatch(href)
        if match is None or "./" in href or "/." in href:
            return _MISS
        scheme, port, path = match.groups()
        if port is not None and (int(port) > 65535 or int(port) == _DEFAULT_PORTS[scheme]):
            return _MISS
        url = href if path else href + "/"
        if "xn--" in url[:url.find("/", 8)]:
            return _MISS  # its labels must be checked (`_punycode_ok`)
        if "?" in url and self._query_needs_strip is not None and self._query_needs_strip(url):
            return _MISS
        return url if len(url) <= self.max_length else None

    def _parse_ada(self, href: str, base: _BaseInfo | None) -> str | None:
        """ada-url's WHATWG answer for href (against base), in canonical form."""
        if ":" in href:
            scheme = _SCHEME.match(href)
            if scheme is not None and scheme.group(1).lower() not in _HTTP_SCHEMES:
                # mailto:, javascript:, data: ... refused before a possibly huge href is copied
                return None
        if not href.isascii() and _SURROGATE.search(href):
            href = _SURROGATE.sub("\ufffd", href)  # browsers see lone surrogates as U+FFFD
        try:
            url = normalize_url(href) if base is None else join_url(base.url, href)
        except ValueError:
            return None
        return self._canonical(url)

    def _canonical(self, url: str) -> str | None:
        """A URL as ada-url serializes it, in larbinpy's canonical form (None if not http(s),
        an invalid punycode label or too long)."""
        if url[:7] == "http://":
            start = 7
        elif url[:8] == "https://":
            start = 8
        else:
            return None
        # A serialized http(s) URL percent-encodes '#' before the fragment, '?' in the path,
        # and has a '/' right after its authority: these slices are exact.
        fragment = url.find("#")
        if fragment >= 0:
            url = url[:fragment]
        if not ("%" in url or "@" in url or ";" in url or "xn--" in url):
            # the common case: nothing to decode, drop, check or strip, but perhaps the query
            qmark_at = url.find("?")
            if qmark_at < 0 or self._query_needs_strip is None or not self._query_needs_strip(
                url, qmark_at
            ):
                return url if len(url) <= self.max_length else None
        slash = url.find("/", start)
        authority = url[start:slash]
        if "@" in authority:
            authority = authority[authority.rindex("@") + 1 :]
        if "xn--" in authority and not _punycode_ok(authority):
            return None
        path, qmark, query = url[slash:].partition("?")
        query = "?" + _canon_escapes(query) if qmark else ""
        return self._finish(url[:start] + authority, _canon_escapes(path), query)

    def _finish(self, origin: str, path: str, query: str) -> str | None:
        """Strip session parameters, re-assemble and apply the length limit."""
        if ";" in path and self._path_strip is not None:
            stripped = self._path_strip.sub("", path)
            if "/." in stripped and stripped != path:
                # '/..;sid=1/' only becomes a dot-segment once the param is gone
                stripped = normalize_url(origin + stripped)[len(origin) :]
            path = stripped
        if query and self._query_needs_strip is not None and self._query_needs_strip(query):
            query = self._strip_query(query[1:])
        url = origin + path + query
        return url if len(url) <= self.max_length else None

    def _strip_query(self, query: str) -> str:
        """Remove stripped parameters from a query (without '?'); return '?rest' or ''."""
        exact, prefixes = self._strip_exact, self._strip_prefixes
        kept = []
        for part in query.split("&"):
            name = part.partition("=")[0].lower()
            if name in exact or (prefixes and name.startswith(prefixes)):
                continue
            kept.append(part)
        return "?" + "&".join(kept) if kept else ""

    # ---- base handling and cache ---------------------------------------------------------

    def _base(self, base: str) -> _BaseInfo | None:
        """The canonical base URL and its folder (memoised for the last base)."""
        if base is self._base_key or base == self._base_key:
            return self._base_info
        canon: str | None
        if not isinstance(base, str):
            canon = None
        elif base in self._same:
            # A URL this normalizer produced (a page's URL is usually a link it resolved):
            # canonical already, and normalizing is idempotent, so that work is not redone.
            canon = base
        else:
            canon = self.normalize(base)
        info = None if canon is None else _BaseInfo(canon)
        self._base_key, self._base_info = base, info
        return info

    def _subcache(self, directory: str) -> dict[str, str | None]:
        """The cache slice for one base directory."""
        sub = self._cache.get(directory)
        if sub is None:
            if self._cache_size >= _CACHE_MAX:
                self._cache.clear()
                self._cache_size = 0
            sub = self._cache[directory] = {}
            self._cache_size += 1  # empty slices count too, so many directories stay bounded
        return sub


class _Miss(enum.Enum):
    """The type of _MISS (an enum member, so that `is not _MISS` narrows it away)."""

    MISS = 0


_MISS: Final = _Miss.MISS  # sentinel: not in the cache


class _BaseInfo:
    """A canonical base URL, its origin and its folder (the key of its cache slice), once per
    page."""

    __slots__ = ("url", "origin", "directory")

    def __init__(self, url: str) -> None:
        """The origin: the URL up to its path; the folder: up to the path's last '/'."""
        self.url = url
        self.origin = url[: url.find("/", 8)]
        path_end = url.find("?")
        self.directory = url[: url.rfind("/", 0, path_end if path_end >= 0 else len(url)) + 1]


def _keep_newest_half(table: dict[str, str]) -> None:
    """Forget the older half of a full table, in place (a dict keeps insertion order).

    Emptied whole, a table smaller than a crawl's working set of URLs (a web of 20,000 pages
    linking at random among a host's pages) would start from nothing each time it fills, and
    every link to a URL it forgot would be an ada-url call again; halved, the URLs linked
    since stay known. The copy costs one entry moved per entry added, amortised."""
    newest = list(islice(table.items(), len(table) // 2, None))
    table.clear()
    table.update(newest)


def _climbed(info: _BaseInfo, href: str) -> tuple[str, str]:
    """(folder, rest) of an href whose leading './' and '../' segments are taken against
    info's folder: './' stays in it, '../' goes to its parent, or stays at the root."""
    directory, root = info.directory, len(info.origin)
    while True:
        if href[:2] == "./":
            href = href[2:]
        elif href[:3] == "../":
            href = href[3:]
            cut = directory.rfind("/", root, len(directory) - 1)
            if cut >= 0:
                directory = directory[: cut + 1]
        else:
            return directory, href


def _uses_whole_base(href: str) -> bool:
    """Whether href's resolution depends on more of the base than its folder: an empty href,
    '?query', '#fragment', or one of these after a scheme ('http:?q') take the base's file name
    (and query). Conservative: a scheme other than the base's is counted too."""
    if ":" not in href and href[:1] > " " and href[:1] not in "?#":
        return False  # the common case: no scheme, and it starts with a path
    s = href.strip(_C0_SPACE)
    if "\t" in s or "\n" in s or "\r" in s:
        s = s.translate(_TAB_NEWLINE)
    m = _SCHEME.match(s)
    if m is not None:
        s = s[m.end() :]
    return s[:1] in ("", "?", "#")


def _punycode_ok(authority: str) -> bool:
    """Each `xn--` label of a host decodes to a valid, non-ASCII label (UTS #46 validity, as the
    URL Standard's domain-to-ASCII asks: ada-url accepts any `xn--` label)."""
    host = authority.rpartition(":")[0] if ":" in authority else authority
    for label in host.split("."):
        if label[:4] != "xn--":
            continue
        try:
            decoded = label[4:].encode("ascii").decode("punycode")
        except (UnicodeError, ValueError):
            return False
        if not decoded or decoded.isascii() or not _valid_label(decoded):
            return False
    return True


def _valid_label(label: str) -> bool:
    """UTS #46 label validity: stable under mapping, no leading mark, joiners and bidi OK."""
    import idna  # (here: only an international host name needs it)

    try:
        if idna.uts46_remap(label, std3_rules=False, transitional=False) != label:
            return False
        if unicodedata.category(label[0]).startswith("M"):
            return False
        for i, ch in enumerate(label):
            if ch in "\u200c\u200d" and not idna.valid_contextj(label, i):
                return False
        idna.check_bidi(label)
    except (idna.IDNAError, ValueError):
        return False
    return True


def site_key(url: str) -> str:
    """'scheme://host[:port]' of a canonical URL (port only when non-default)."""
    # A canonical URL always has a '/' right after the authority, and never before index 8.
    return url[: url.find("/", 8)]


def host_of(url: str) -> str:
    """Host (no port; IPv6 keeps its brackets) of a canonical URL."""
    start = url.index("//") + 2
    netloc = url[start : url.find("/", start)]
    if netloc[:1] == "[":
        return netloc[: netloc.index("]") + 1]
    return netloc.partition(":")[0]


def path_of(url: str) -> str:
    """Path and query of a canonical URL ('/' at least)."""
    return url[url.find("/", 8) :]
