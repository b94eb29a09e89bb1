"""URL normalization and link resolution: the crawler's hot path.

Every link the extractor finds passes through here before it reaches the frontier, so this module
decides what counts as "the same page": it resolves hrefs against the page URL the way a browser
does (the WHATWG URL Standard, http/https only) and then puts the result into larbinpy's canonical
form, so that the seen-set and the per-site queues work on one spelling per page.

Canonical form (beyond what a browser already does):

* the fragment and any userinfo (``user:pass@``) are dropped: a crawler never sends credentials;
* percent-escapes use upper-case hex, and escaped unreserved characters (``A-Za-z0-9-._~``) are
  decoded;
* query parameters (and ``;name=value`` path parameters) named in ``strip_params`` are removed;
* only http and https URLs no longer than ``max_length`` are accepted; anything else is ``None``.

Most links are simple (``/path``, ``page.html``, ``https://host/path``), so they take plain string
fast paths; only unusual ones go through the full WHATWG-style parser further down.
"""

from __future__ import annotations

import enum
import re
import unicodedata
from collections.abc import Iterable
from itertools import repeat
from typing import Final
from urllib.parse import quote, unquote_to_bytes

try:
    import idna as _idna
except ImportError:  # pragma: no cover - idna ships with yarl, the fallback is for bare installs
    _idna = None  # type: ignore[assignment]  # no idna: _domain_to_ascii falls back

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
_CACHE_HREF_MAX = 512  # longer hrefs (data: URIs, tracking blobs) are not worth the memory
_DEFAULT_PORT = {"http": "80", "https": "443"}
_C0_SPACE = "".join(map(chr, range(0x21)))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
_HEX = frozenset("0123456789abcdefABCDEF")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SINGLE_DOT = frozenset({".", "%2e", "%2E"})
_DOUBLE_DOT = frozenset(
    {"..", ".%2e", ".%2E", "%2e.", "%2E.", "%2e%2e", "%2e%2E", "%2E%2e", "%2E%2E"}
)
# Browsers percent-encode these (plus controls, space and non-ASCII) in path and special query.
_PATH_SAFE = "".join(chr(i) for i in range(0x21, 0x7F) if chr(i) not in '"#<>?`{}')
_QUERY_SAFE = "".join(chr(i) for i in range(0x21, 0x7F) if chr(i) not in "\"#<>'")
_FORBIDDEN_DOMAIN = frozenset(
    [chr(i) for i in range(0x21)] + list("#%/:<>?@[\\]^|\x7f")
)


def _ascii_class(chars: str, negate: bool = False) -> str:
    """A regex class of these ASCII characters (or of every other character). Written out,
    not as the complement of a range up to U+10FFFF: `re` compiles that slowly (a map of every
    code point), at every start of the crawler."""
    escaped = "".join(re.escape(c) if c in "\\]^-[" else c for c in chars)
    return f"[{'^' if negate else ''}{escaped}]"


# Characters that pass through the browser parser and our canonicalization unchanged.
_P = _ascii_class(_PATH_SAFE.replace("%", "").replace("\\", ""))
_Q = _ascii_class(_QUERY_SAFE.replace("%", "").replace("\\", ""))
_TAIL = r"((?:\?" + _Q + r"*)?)(?:#.*)?\Z"
_FAST_ABS = re.compile(
    r"(https?://[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?)(?::(0*[1-9][0-9]{0,4}))?((?:/" + _P + r"*)?)"
    + _TAIL,
    re.S,
)
_FAST_ROOT = re.compile(r"(/(?!/)" + _P + r"*)" + _TAIL, re.S)
_REL_FIRST = _ascii_class("".join(c for c in _PATH_SAFE if c not in "%\\/."))
_FAST_REL = re.compile("(" + _REL_FIRST + _P + "*)" + _TAIL, re.S)
_FAST_QUERY = re.compile(r"(\?" + _Q + r"*)(?:#.*)?\Z", re.S)
_PATH_UNSAFE = re.compile(_ascii_class(_PATH_SAFE, negate=True))
_QUERY_UNSAFE = re.compile(_ascii_class(_QUERY_SAFE, negate=True))
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_PCT = re.compile(r"%[0-9A-Fa-f]{2}")


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
        self._used_full_base = False

    # ---- public API ----------------------------------------------------------------------

    def normalize(self, url: str) -> str | None:
        """Canonical form of an absolute URL, or None if it is not a valid http(s) URL."""
        if not isinstance(url, str):
            return None
        m = _FAST_ABS.match(url)
        if m is not None:
            result = self._fast_abs(m)
            if result is not _SLOW:
                return result
        return self._slow(url, None)

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
        # Most of a page's hrefs were seen on an earlier page of the same folder (navigation):
        # one C-level pass answers them from the cache; only the misses run Python code. (Raw
        # duplicates are looked up twice: cheaper than removing them first.)
        urls = list(map(sub.get, hrefs, repeat(_SLOW, len(hrefs))))
        if _SLOW in urls:
            # absolute hrefs live in the crawl-wide cache; the folder's answers are its default
            urls = list(map(self._absolute.get, hrefs, urls))
        if _SLOW in urls:
            for i, url in enumerate(urls):
                if url is _SLOW:
                    urls[i] = self._resolve_link(info, sub, hrefs[i])
        out = dict.fromkeys(urls)
        out.pop(None, None)
        return list(out), 0  # type: ignore[arg-type]  # None popped, no _SLOW left: all str

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
            hit = self._absolute.get(href, _SLOW)
            if hit is not _SLOW:
                return hit
            result = self.normalize(href)
            if len(self._absolute) >= _CACHE_MAX:
                self._absolute.clear()  # bounded memory, as for the per-directory cache
                self._same.clear()
            if len(href) <= _CACHE_HREF_MAX:
                if result is not None:
                    result = self._same.setdefault(result, result)  # see _remember
                    href = result if result == href else href  # one object, not two equal
                self._absolute[href] = result
            return result
        if sub is not None:
            hit = sub.get(href, _SLOW)
            if hit is not _SLOW:
                return hit
        if info is None:
            return self.normalize(href)
        resolved = self._fast_relative(info, href)
        cacheable = True
        if resolved is _SLOW:
            self._used_full_base = False
            resolved = self._slow(href, info)
            # Results that depend on the base's file name or query must not be shared per-directory.
            cacheable = not self._used_full_base
        elif href[:1] == "?":
            cacheable = False
        if cacheable and sub is not None and len(href) <= _CACHE_HREF_MAX:
            self._remember(info, sub, href, resolved)
        return resolved

    def _remember(
        self, info: _BaseInfo, sub: dict[str, str | None], href: str, result: str | None
    ) -> None:
        """Cache href's resolution for every page in info's folder (bounded in entries)."""
        if self._cache_size >= _CACHE_MAX:
            # Bounded memory: forget everything rather than track recency per entry. The
            # folder's slice is emptied in place, not replaced: the caller holds it for the
            # rest of the page, and what it adds there must stay cached and counted.
            self._cache.clear()
            self._same.clear()
            sub.clear()
            self._cache[info.directory] = sub
            self._cache_size = 1  # the slice itself, as _subcache counts it
        # One object per URL: the same URL reached by "p1.html", "/p1.html" and "http://h/p1.html"
        # is one string in both caches and the seen-set's memo, not three. Resolution is
        # memory-bound (each link is a lookup in a large dict), and fewer objects mean fewer
        # cache lines read and less memory (docs/benchmarks.md). (Our own table, cleared with
        # the caches, not sys.intern: CPython 3.12.0-3.12.5 never frees interned strings.)
        sub[href] = result if result is None else self._same.setdefault(result, result)
        self._cache_size += 1

    def _fast_relative(self, info: _BaseInfo, href: str) -> str | None | _Slow:
        """Resolve the common simple href shapes with string operations, else return _SLOW."""
        first = href[:1]
        if first == "/":
            if href[1:2] == "/":
                m = _FAST_ABS.match(info.scheme + ":" + href)
                return _SLOW if m is None else self._fast_abs(m)
            m = _FAST_ROOT.match(href)
            if m is None:
                return _SLOW
            path, query = m.groups()
            if "/." in path:
                return _SLOW
            return self._finish(info.origin, path, query)
        if first == "h" and href.startswith(("http://", "https://")):
            m = _FAST_ABS.match(href)
            return _SLOW if m is None else self._fast_abs(m)
        if first == "?":
            m = _FAST_QUERY.match(href)
            return _SLOW if m is None else self._finish(info.origin, info.path, m.group(1))
        m = _FAST_REL.match(href)
        if m is not None:
            path, query = m.groups()
            colon = path.find(":")
            if (colon < 0 or path.find("/", 0, colon) >= 0) and "/." not in path:
                return self._finish(info.origin, info.directory_path + path, query)
        # Refuse mailto:, javascript:, data: ... before copying a possibly huge href around.
        scheme = _SCHEME.match(href)
        if scheme is not None and scheme.group(1).lower() not in _DEFAULT_PORT:
            return None
        return _SLOW

    def _fast_abs(self, m: re.Match[str]) -> str | None | _Slow:
        """Finish a clean absolute URL matched by _FAST_ABS, or return _SLOW for odd hosts."""
        origin, port, path, query = m.groups()
        last = origin[origin.index("//") + 2 :].rstrip(".").rpartition(".")[2]
        if last[:1] in "0123456789" or "xn--" in origin:
            return _SLOW  # possible IPv4 number or punycode label: let the full parser check it
        if port is not None:
            port = port.lstrip("0")
            if int(port) > 65535:
                return None
            if port != _DEFAULT_PORT[origin[: origin.index(":")]]:
                origin = origin + ":" + port
        if not path:
            path = "/"
        elif "/." in path:
            return _SLOW
        return self._finish(origin, path, query)

    def _finish(self, origin: str, path: str, query: str) -> str | None:
        """Strip session parameters, re-assemble and apply the length limit."""
        if ";" in path and self._path_strip is not None:
            path = self._path_strip.sub("", path)
            if "/." in path:  # '/..;sid=1/' only becomes a dot-segment once the param is gone
                path = _remove_dot_segments(path)
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
        """Split a base URL into the pieces resolution needs (memoised for the last base)."""
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
                self._same.clear()
                self._cache_size = 0
            sub = self._cache[directory] = {}
            self._cache_size += 1  # empty slices count too, so many directories stay bounded
        return sub

    # ---- full parser (WHATWG basic URL parser, special schemes only) ---------------------

    def _slow(self, href: str, base: _BaseInfo | None) -> str | None:
        """Parse any href like a browser; None for failures and non-http(s) results."""
        if not isinstance(href, str):
            return None
        s = href.strip(_C0_SPACE)
        if "\t" in s or "\n" in s or "\r" in s:
            s = s.translate(_TAB_NEWLINE)
        if not s.isascii() and _SURROGATE.search(s):
            s = _SURROGATE.sub("\ufffd", s)  # browsers see lone surrogates as U+FFFD
        m = _SCHEME.match(s)
        if m is None:
            if base is None:
                return None
            return self._relative(base.scheme, s, base)
        scheme = m.group(1).lower()
        if scheme not in _DEFAULT_PORT:
            return None
        rest = s[m.end() :]
        if base is not None and base.scheme == scheme:
            return self._relative(scheme, rest, base)
        return self._authority(scheme, rest.lstrip("/\\"))

    def _relative(self, scheme: str, s: str, base: _BaseInfo) -> str | None:
        """WHATWG 'relative state' against an http(s) base."""
        first = s[:1]
        if first in ("/", "\\") and first:
            if s[1:2] in ("/", "\\") and len(s) > 1:
                return self._authority(scheme, s.lstrip("/\\"))
            return self._path_query(base.origin, [], s[1:])
        if not s or first in "?#":
            self._used_full_base = True
            if not s or first == "#":
                return self._finish(base.origin, base.path, base.query)
            return self._path_query(base.origin, list(base.segments), s)
        return self._path_query(base.origin, base.segments[:-1], s)

    def _authority(self, scheme: str, s: str) -> str | None:
        """Parse 'userinfo@host:port' then the path; userinfo is dropped."""
        end = len(s)
        for sep in "/\\?#":
            i = s.find(sep, 0, end)
            if i >= 0:
                end = i
        auth, rest = s[:end], s[end:]
        if "@" in auth:
            auth = auth[auth.rindex("@") + 1 :]
        hostport = _split_port(auth)
        if hostport is None:
            return None
        raw_host, port = hostport
        host = _parse_host(raw_host)
        if host is None:
            return None
        origin = scheme + "://" + host
        if port and port != _DEFAULT_PORT[scheme]:
            origin += ":" + port
        if rest[:1] in ("/", "\\") and rest:
            rest = rest[1:]
        return self._path_query(origin, [], rest)

    def _path_query(self, origin: str, segments: list[str], s: str) -> str | None:
        """WHATWG 'path state' and 'query state': dot-segments, percent-encoding."""
        s = s.partition("#")[0]
        path_text, qmark, query = s.partition("?")
        if path_text or not segments:
            _push_segments(segments, path_text.replace("\\", "/").split("/"))
        path = "/" + "/".join(segments)
        if _PATH_UNSAFE.search(path):
            path = quote(path, safe=_PATH_SAFE)
        if qmark and _QUERY_UNSAFE.search(query):
            query = quote(query, safe=_QUERY_SAFE)
        path = _canon_escapes(path)
        query = "?" + _canon_escapes(query) if qmark else ""
        return self._finish(origin, path, query)


class _Slow(enum.Enum):
    """The type of _SLOW (an enum member, so that `is not _SLOW` narrows it away)."""

    SLOW = 0


_SLOW: Final = _Slow.SLOW  # sentinel: "the fast path cannot decide, use the full parser" / miss


class _BaseInfo:
    """The parts of a canonical base URL that resolution needs, computed once per page."""

    __slots__ = ("scheme", "origin", "path", "query", "segments", "directory_path", "directory")

    def __init__(self, url: str) -> None:
        """Slice a canonical URL into scheme, origin, path, query and directory."""
        slash = url.find("/", 8)
        self.scheme = url[: url.index(":")]
        self.origin = url[:slash]
        path, qmark, query = url[slash:].partition("?")
        self.path = path
        self.query = qmark + query
        self.segments = path[1:].split("/")
        self.directory_path = path[: path.rfind("/") + 1]
        self.directory = self.origin + self.directory_path


def _push_segments(segments: list[str], parts: list[str]) -> None:
    """Append path parts to segments, applying '.' and '..' the WHATWG way."""
    for part in parts[:-1]:
        if part in _DOUBLE_DOT:
            if segments:
                segments.pop()
        elif part not in _SINGLE_DOT:
            segments.append(part)
    last = parts[-1]
    if last in _DOUBLE_DOT:
        if segments:
            segments.pop()
        segments.append("")
    elif last in _SINGLE_DOT:
        segments.append("")
    else:
        segments.append(last)


def _remove_dot_segments(path: str) -> str:
    """Resolve dot-segments in an absolute path ('/a/../b' -> '/b')."""
    segments: list[str] = []
    _push_segments(segments, path[1:].split("/"))
    return "/" + "/".join(segments)


def _split_port(auth: str) -> tuple[str, str] | None:
    """Split 'host:port' (colon outside brackets); port without leading zeros, None if bad."""
    if "[" in auth:
        close = auth.find("]")
        colon = auth.find(":", close) if close >= 0 else -1
    else:
        colon = auth.find(":")
    if colon < 0:
        host, port = auth, ""
    else:
        host, port = auth[:colon], auth[colon + 1 :]
        if port and not (port.isascii() and port.isdigit()):
            return None
        port = port.lstrip("0") or ("0" if port else "")
        if port and int(port) > 65535:
            return None
    if not host:
        return None
    return host, port


def _parse_host(text: str) -> str | None:
    """WHATWG host parser for special schemes: IPv6, IDNA domain, or IPv4 in any browser form."""
    if text[0] == "[":
        if text[-1] != "]":
            return None
        pieces = _parse_ipv6(text[1:-1])
        return None if pieces is None else "[" + _ipv6_text(pieces) + "]"
    domain = unquote_to_bytes(text).decode("utf-8", "replace") if "%" in text else text
    ascii_domain = _domain_to_ascii(domain)
    if ascii_domain is None or not _FORBIDDEN_DOMAIN.isdisjoint(ascii_domain):
        return None
    if _ends_in_number(ascii_domain):
        return _parse_ipv4(ascii_domain)
    return ascii_domain


def _domain_to_ascii(domain: str) -> str | None:
    """UTS #46 ToASCII as WHATWG calls it (non-transitional, no STD3 rules); None on failure."""
    lowered = domain.lower() if domain.isascii() else None
    if lowered is not None and not any(lab.startswith("xn--") for lab in lowered.split(".")):
        return lowered
    if _idna is None:  # pragma: no cover - IDNA2003 fallback when the idna package is absent
        try:
            return domain.encode("idna").decode("ascii").lower() or None
        except UnicodeError:
            return None
    try:
        mapped = _idna.uts46_remap(domain, std3_rules=False, transitional=False)
    except (_idna.IDNAError, ValueError):
        return None
    labels = []
    for label in mapped.split("."):
        if label.startswith("xn--"):
            try:
                decoded = label[4:].encode("ascii").decode("punycode")
            except (UnicodeError, ValueError):
                return None
            if not decoded or decoded.isascii() or not _valid_label(decoded):
                return None
            labels.append(label)
        elif label.isascii():
            labels.append(label)
        else:
            if not _valid_label(label):
                return None
            labels.append("xn--" + label.encode("punycode").decode("ascii"))
    result = ".".join(labels)
    return result or None


def _valid_label(label: str) -> bool:
    """UTS #46 label validity: stable under mapping, no leading mark, joiners and bidi OK."""
    try:
        if _idna.uts46_remap(label, std3_rules=False, transitional=False) != label:
            return False
        if unicodedata.category(label[0]).startswith("M"):
            return False
        for i, ch in enumerate(label):
            if ch in "\u200c\u200d" and not _idna.valid_contextj(label, i):
                return False
        _idna.check_bidi(label)
    except (_idna.IDNAError, ValueError):
        return False
    return True


def _ipv4_number(text: str) -> int | None:
    """One IPv4 part in decimal, octal (leading 0) or hex (0x); None if not a number."""
    if not text:
        return None
    radix = 10
    if text[:2] in ("0x", "0X"):
        text, radix = text[2:], 16
    elif len(text) > 1 and text[0] == "0":
        text, radix = text[1:], 8
    if not text:
        return 0
    allowed = "0123456789abcdefABCDEF"[: 22 if radix == 16 else radix]
    if not all(ch in allowed for ch in text):
        return None
    return int(text, radix)


def _ends_in_number(host: str) -> bool:
    """Whether WHATWG treats the host as IPv4 (its last label is a number)."""
    parts = host.split(".")
    if parts[-1] == "":
        if len(parts) == 1:
            return False
        parts.pop()
    last = parts[-1]
    if last.isascii() and last.isdigit():
        return True
    return _ipv4_number(last) is not None


def _parse_ipv4(host: str) -> str | None:
    """Dotted-decimal form of an IPv4 host in any browser-accepted spelling, None if invalid."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        return None
    parsed = [_ipv4_number(p) for p in parts]
    numbers = [n for n in parsed if n is not None]
    if len(numbers) < len(parsed) or any(n > 255 for n in numbers[:-1]):
        return None
    if numbers[-1] >= 256 ** (5 - len(numbers)):
        return None
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n * 256 ** (3 - i)
    return ".".join(str((value >> shift) & 255) for shift in (24, 16, 8, 0))


def _parse_ipv6(text: str) -> list[int] | None:
    """WHATWG IPv6 parser: eight 16-bit pieces, or None on failure."""
    address = [0] * 8
    piece, compress, i, n = 0, None, 0, len(text)
    if text[:1] == ":":
        if text[:2] != "::":
            return None
        i, piece = 2, 1
        compress = piece
    while i < n:
        if piece == 8:
            return None
        if text[i] == ":":
            if compress is not None:
                return None
            i += 1
            piece += 1
            compress = piece
            continue
        value = length = 0
        while length < 4 and i < n and text[i] in _HEX:
            value = value * 16 + int(text[i], 16)
            i += 1
            length += 1
        if i < n and text[i] == ".":
            if length == 0 or piece > 6:
                return None
            return _parse_ipv6_tail_v4(text, i - length, address, piece, compress)
        if i < n and text[i] == ":":
            i += 1
            if i >= n:
                return None
        elif i < n:
            return None
        address[piece] = value
        piece += 1
    return _ipv6_compress(address, piece, compress)


def _parse_ipv6_tail_v4(
    text: str, i: int, address: list[int], piece: int, compress: int | None
) -> list[int] | None:
    """The embedded dotted IPv4 part of an IPv6 address ('::ffff:1.2.3.4')."""
    n, seen = len(text), 0
    while i < n:
        if seen:
            if text[i] != "." or seen >= 4:
                return None
            i += 1
        if i >= n or not ("0" <= text[i] <= "9"):
            return None
        number = None
        while i < n and "0" <= text[i] <= "9":
            if number == 0:
                return None  # no leading zeros in embedded IPv4
            number = int(text[i]) if number is None else number * 10 + int(text[i])
            if number > 255:
                return None
            i += 1
        assert number is not None  # the first character was a digit (checked above)
        address[piece] = address[piece] * 0x100 + number
        seen += 1
        if seen in (2, 4):
            piece += 1
    if seen != 4:
        return None
    return _ipv6_compress(address, piece, compress)


def _ipv6_compress(address: list[int], piece: int, compress: int | None) -> list[int] | None:
    """Move the pieces after '::' to the end of the address."""
    if compress is None:
        return address if piece == 8 else None
    swaps, piece = piece - compress, 7
    while piece != 0 and swaps > 0:
        j = compress + swaps - 1
        address[piece], address[j] = address[j], address[piece]
        piece -= 1
        swaps -= 1
    return address


def _ipv6_text(address: list[int]) -> str:
    """Serialize IPv6 pieces: lower-case hex, longest run of 2+ zero pieces as '::'."""
    best, best_len, i = -1, 1, 0
    while i < 8:
        if address[i] == 0:
            j = i
            while j < 8 and address[j] == 0:
                j += 1
            if j - i > best_len:
                best, best_len = i, j - i
            i = j
        else:
            i += 1
    if best < 0:
        return ":".join(f"{p:x}" for p in address)
    left = ":".join(f"{p:x}" for p in address[:best])
    right = ":".join(f"{p:x}" for p in address[best + best_len :])
    return left + "::" + right


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
