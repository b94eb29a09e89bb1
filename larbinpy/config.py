"""The larbin.conf reader: turns the configuration file into one validated `Config`.

Not a pipeline stage: every stage reads its settings from the `Config` this module builds.
The syntax is larbin's: whitespace-separated tokens, `#` starts a comment to the end of the
line, `"..."` is one token with spaces, keys are case-insensitive, list keys end with `end`.
Every error names the file and line (`ConfigError`), and nothing unknown is silently ignored.

Each key is declared once, as a field of `Config` (its type, default, larbin spelling, value
parser, unit, range and one-line doc); the parser, the range checks, `check-config`'s listing and
docs/configuration.md (`python -m larbinpy.config --markdown`, `make docs`) all read that table.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
import sys
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

GiB = 1 << 30
# hashSize's default where the bitmap alone decides (seenSet bitmap): larger, since
# its fill is the share of new URLs lost (0.9% at 10^7 URLs); with seenSet exact it is only a
# filter in front of the fingerprints (frontier/seen.py), and the key's default is smaller.
LOSSY_HASH_SIZE = 1 << 30
MiB = 1 << 20
KiB = 1 << 10

OUTPUTS = ("none", "save", "mirror", "warc", "links")
# depthInSite is set again before each group of startUrl lines it applies to
MAY_REPEAT = frozenset({"depthinsite"})
FLAG_WORDS = {"on": True, "yes": True, "true": True, "off": False, "no": False, "false": False}

T = TypeVar("T")


class ConfigError(Exception):
    """A bad configuration: the message names the file and line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.message = path, line, message


@dataclass(frozen=True)
class StartUrl:
    """One `startUrl` line, with the `depthInSite` in force where it was written."""

    url: str
    depth: int
    line: int


# --- tokens ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    """One word of the file and the line it came from."""

    text: str
    line: int


def tokenize(text: str, path: str) -> list[Token]:
    """Split larbin.conf text into tokens: `#` comments dropped, `"..."` kept as one token."""
    tokens: list[Token] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        tokens.extend(_tokenize_line(raw, lineno, path))
    return tokens


def _tokenize_line(raw: str, lineno: int, path: str) -> Iterator[Token]:
    """Tokens of one line."""
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c.isspace():
            i += 1
        elif c == "#":
            return
        elif c == '"':
            end = raw.find('"', i + 1)
            if end < 0:
                raise ConfigError(path, lineno, 'unterminated "quoted" value')
            yield Token(raw[i + 1 : end], lineno)
            i = end + 1
        else:
            j = i
            while j < n and not raw[j].isspace() and raw[j] != "#":
                j += 1
            yield Token(raw[i:j], lineno)
            i = j


# --- value parsers ----------------------------------------------------------------------------

Parser = Callable[[str], Any]  # one value token -> the field's value; ValueError means a bad value

P = TypeVar("P", bound=Parser)

# How each parser's values are written, for docs/configuration.md's Value column.
SYNTAX: dict[Parser, str] = {str: "text", str.lower: "text"}


def shows(syntax: str) -> Callable[[P], P]:
    """Record how the decorated parser's values are written (for the docs)."""

    def register(parse: P) -> P:
        SYNTAX[parse] = syntax
        return parse

    return register

_SIZE_SUFFIX = {
    "": 1, "k": 1000, "m": 1000**2, "g": 1000**3,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "kib": KiB, "mib": MiB, "gib": GiB, "b": 1,
}


@shows("integer")
def parse_int(text: str) -> int:
    """An integer; accepts `2^30` and size suffixes (10M, 1GiB, 500KiB)."""
    t = text.strip().lower().replace("_", "")
    m = re.fullmatch(r"(\d+)\^(\d+)", t)
    if m:
        power: int = int(m.group(1)) ** int(m.group(2))  # (int ** int is typed Any)
        return power
    m = re.fullmatch(r"(\d+)([a-z]*)", t)
    if not m and re.fullmatch(r"-\d+[a-z]*", t):
        raise ValueError(f"{text!r} is negative: it must be 0 or more")
    if not m or m.group(2) not in _SIZE_SUFFIX:
        raise ValueError(f"not an integer: {text!r}")
    return int(m.group(1)) * _SIZE_SUFFIX[m.group(2)]


@shows("number")
def parse_float(text: str) -> float:
    """A non-negative number of seconds (or bytes/s)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"not a finite number: {text!r}")
    return value


@shows("on | off")
def parse_onoff(text: str) -> bool:
    """`on`/`off` (also yes/no, true/false, 1/0)."""
    t = text.lower()
    if t in ("on", "yes", "true", "1"):
        return True
    if t in ("off", "no", "false", "0"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


@shows("fraction")
def parse_fraction(text: str) -> float:
    """A share: a number above 0 and at most 1."""
    value = parse_float(text)
    if not 0 < value <= 1:
        raise ValueError(f"{text!r} is not a share: it must be above 0 and at most 1")
    return value


@shows("ip[:port]")
def parse_dns_server(text: str) -> str:
    """`ip[:port]` or `[ipv6]:port`, checked, returned as c-ares wants it."""
    host, port = text, None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    elif text.count(":") == 1:
        host, port = text.split(":")
    ipaddress.ip_address(host)
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"bad port in {text!r}")
    return text


@shows("CIDR")
def parse_network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A CIDR range such as 127.0.0.0/8 or ::1/128."""
    return ipaddress.ip_network(text, strict=False)


@shows("regex")
def parse_regex(text: str) -> re.Pattern[str]:
    """A Python regular expression."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"bad regular expression {text!r}: {exc}") from None


@shows(".ext")
def parse_extension(text: str) -> str:
    """A file extension, stored lower-case with its dot."""
    t = text.lower()
    return t if t.startswith(".") else "." + t


@shows("domain suffix")
def parse_domain(text: str) -> str:
    """A domain suffix for limitToDomain, stored lower-case."""
    return text.lower()


@shows("name")
def parse_file_prefix(text: str) -> str:
    """A file name prefix: letters, digits, `.`, `_`, `-` (it names files in saveDir)."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}", text):
        raise ValueError(f"expected letters, digits, '.', '_' or '-', got {text!r}")
    return text


@shows("module:callable")
def parse_user_output(text: str) -> str:
    """`module:callable`."""
    if not re.fullmatch(r"[\w.]+:[\w.]+", text):
        raise ValueError(f"expected module:callable, got {text!r}")
    return text


def choice(*allowed: str) -> Parser:
    """A parser accepting one of `allowed` (case-insensitive)."""

    def parse(text: str) -> str:
        t = text.lower()
        if t not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return t

    SYNTAX[parse] = " | ".join(allowed)
    return parse


_CGI_LEVEL = choice("0", "1")


@shows("0 | 1")
def parse_cgi_level(text: str) -> int:
    """larbin's CGILEVEL: 0 or 1."""
    return int(_CGI_LEVEL(text))


# --- the key table ------------------------------------------------------------------------

# value: one token; flag: no token, writing the key turns it on; list: tokens up to `end`, over
# several lines if need be; repeat: one token, and the key may be given again to add another.
Kind = Literal["value", "flag", "list", "repeat"]
# reads the key at tokens[i] into the Config and returns the index of the next key
Reader = Callable[["Config", list[Token], int], int]


@dataclass(frozen=True)
class Key:
    """One larbin.conf key: how it is written, read, checked and documented."""

    larbin: str  # the spelling larbin.conf and the docs use (matching is case-insensitive)
    doc: str  # one line: what the key does
    parse: Parser = str  # a value token -> the field's value
    kind: Kind = "value"
    unit: str = ""  # what the number counts: seconds, bytes, bytes/s, bits, ...
    bounds: tuple[float, float | None] | None = None  # (lowest, highest or None), when set
    default_doc: str | None = None  # the default in words, when its value alone would mislead
    syntax: str | None = None  # how a value is written, when the parser's SYNTAX does not say
    read: Reader | None = None  # the key's own reader, for a form no kind expresses
    # filled in by `_table` from the Config field that declares the key
    attr: str = ""
    default: Any = None


def key(
    default: T, larbin: str, doc: str, *, parse: Parser = str, kind: Kind = "value",
    unit: str = "", bounds: tuple[float, float | None] | None = None,
    default_doc: str | None = None, syntax: str | None = None, read: Reader | None = None,
) -> T:
    """A Config field for one larbin.conf key: its default, and its `Key` as metadata."""
    meta = {"key": Key(larbin, doc, parse, kind, unit, bounds, default_doc, syntax, read)}
    if isinstance(default, list):  # each Config gets its own list
        return cast(T, field(default_factory=default.copy, metadata=meta))
    return field(default=default, metadata=meta)


def _next_value(cfg: Config, tokens: list[Token], i: int) -> Token:
    """The token after a key on the same line, or an error naming the key's line."""
    tok = tokens[i]
    if i + 1 >= len(tokens) or tokens[i + 1].line != tok.line:
        raise ConfigError(cfg.path, tok.line, f"{tok.text} needs a value")
    return tokens[i + 1]


def _convert(cfg: Config, value: Token, parser: Parser, name: str) -> Any:
    """Run a value parser, turning its ValueError into a ConfigError at the value's line."""
    try:
        return parser(value.text)
    except ValueError as exc:
        raise ConfigError(cfg.path, value.line, f"bad value for {name}: {exc}") from None


def _read_start_url(cfg: Config, tokens: list[Token], i: int) -> int:
    """`startUrl URL`, which takes the `depthInSite` in force at its line."""
    value = _next_value(cfg, tokens, i)
    if problem := _url_problem(value.text):
        raise ConfigError(cfg.path, value.line, f"bad startUrl {value.text!r}: {problem}")
    cfg.start_urls.append(StartUrl(value.text, cfg.depth_in_site, value.line))
    return i + 2


def _url_problem(url: str) -> str | None:
    """Why `url` cannot start a crawl (not http(s), malformed, no host), or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError as exc:
        return f"malformed ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "not an http:// or https:// URL"
    if not parts.hostname:
        return "no host"
    return None


def _read_proxy(cfg: Config, tokens: list[Token], i: int) -> int:
    """`proxy host port` — two values."""
    tok = tokens[i]
    if i + 2 >= len(tokens) or tokens[i + 2].line != tok.line:
        raise ConfigError(cfg.path, tok.line, "proxy needs a host and a port")
    port = _convert(cfg, tokens[i + 2], parse_int, "proxy")
    if not 0 < port < 65536:
        raise ConfigError(cfg.path, tok.line, f"bad proxy port {port}")
    cfg.proxy = (tokens[i + 1].text, port)
    return i + 3


# init, repr and eq are written below, not generated: the dataclass's own methods for ~80
# fields were compiled at every start (~10 ms of CPU, docs/benchmarks.md); these behave the same
@dataclass(init=False, repr=False, eq=False)
class Config:
    """Every larbin.conf key, declared once: type, default, spelling, parser, unit, range, doc.

    Field names are the keys in snake case. `KEYS` indexes these declarations for the parser,
    `validate`, `describe` (check-config) and `markdown` (docs/configuration.md).
    """

    path: str = "<defaults>"  # the file read, named in errors
    # larbin's own keys
    from_: str = key(
        "", "From", "the operator's e-mail, sent in the `From` header so webmasters can reach you",
    )
    user_agent: str = key(
        "larbinpy/0.1", "UserAgent",
        "the `User-Agent` header, also the name robots.txt groups are matched against",
    )
    http_port: int = key(
        8081, "httpPort", "port of the read-only status page (`/`, `/status.json`, `/metrics`)"
        "; 0 turns it off", parse=parse_int, bounds=(0, 65535),
    )
    input_port: int = key(
        1976, "inputPort", "port that takes URLs (`POST /urls`, `larbinpy submit`); may equal "
        "httpPort; 0 turns it off", parse=parse_int, bounds=(0, 65535),
    )
    pages_connexions: int = key(
        100, "pagesConnexions", "fetches in flight in total", parse=parse_int, bounds=(1, 100000),
    )
    dns_connexions: int = key(
        5, "dnsConnexions", "DNS queries in flight", parse=parse_int, bounds=(1, 10000),
    )
    depth_in_site: int = key(
        5, "depthInSite", "links followed inside a site; applies to the `startUrl` lines after it",
        parse=parse_int, bounds=(0, None),
    )
    no_external_links: bool = key(
        False, "noExternalLinks", "never follow a link to another site", kind="flag",
    )
    wait_duration: float = key(
        60.0, "waitDuration", "least time between two fetches on one site, and on one IP address",
        parse=parse_float, unit="seconds", bounds=(0, None),
    )
    proxy: tuple[str, int] | None = key(
        None, "proxy", "a proxy for every fetch: HTTP through it in absolute form, HTTPS by "
        "CONNECT", syntax="host port", read=_read_proxy,
    )
    start_urls: list[StartUrl] = key(
        [], "startUrl", "a URL to crawl from, at the `depthInSite` in force where it is written",
        kind="repeat", syntax="URL", read=_read_start_url,
    )
    limit_to_domain: list[str] = key(
        [], "limitToDomain", "only hosts ending with one of these suffixes are crawled",
        parse=parse_domain, kind="list", default_doc="all hosts",
    )
    forbidden_extensions: list[str] = key(
        [], "forbiddenExtensions", "links whose path ends with one of these extensions are not "
        "fetched (compared case-insensitively)", parse=parse_extension, kind="list",
    )
    # new keys
    dns_servers: list[str] = key(
        [], "dnsServers", "a DNS server to query instead of the system's resolver",
        parse=parse_dns_server, kind="repeat", default_doc="the system's resolver",
    )
    exclude_patterns: list[re.Pattern[str]] = key(
        [], "excludePatterns", "URLs matching one of these Python regular expressions are not "
        "crawled", parse=parse_regex, kind="list",
    )
    include_patterns: list[re.Pattern[str]] = key(
        [], "includePatterns", "when given, only URLs matching one of these Python regular "
        "expressions are crawled", parse=parse_regex, kind="list", default_doc="all URLs",
    )
    connections_per_host: int = key(
        1, "connectionsPerHost", "fetches in flight on one site, and on one IP address",
        parse=parse_int, bounds=(1, 1000),
    )
    state_dir: str = key(
        "./larbin-state", "stateDir", "where the hash set, pending URLs and site state are kept; "
        "what a resume reads", syntax="directory",
    )
    hash_size: int = key(
        1 << 27, "hashSize", "size of the URL hash set that tells seen URLs from new ones (with "
        "`seenSet exact` only a filter in front of the fingerprints: memory, not loss; alone, "
        "with `seenSet bitmap`, its size sets the loss: see check-config)",
        parse=parse_int, unit="bits", bounds=(1024, 1 << 40),
        default_doc="2^27; 2^30 with seenSet bitmap",
    )
    hash_functions: int = key(
        1, "hashFunctions", "hashes per URL: 1 is larbin's bitmap, K > 1 makes a Bloom filter",
        parse=parse_int, bounds=(1, 32),
    )
    seen_set: str = key(
        "exact", "seenSet", "`exact` confirms each set bit of the hash set against 64-bit URL "
        "fingerprints on disk, so no new URL is dropped by a collision; `bitmap` is larbin's "
        "hash set alone (collisions drop new URLs); a cluster's is always exact",
        parse=choice("exact", "bitmap"),
    )
    seen_cache: int = key(
        128 * MiB, "seenCache", "`seenSet exact`: while the table of URL fingerprints is at most "
        "this size it is read through memory (it then counts in the RSS), beyond it with a "
        "system call a lookup; the table takes ~11 bytes a URL, in powers of two",
        parse=parse_int, unit="bytes", bounds=(0, None),
    )
    outputs: list[str] = key(
        [], "output", "where fetched pages go: `save` (larbin SIMPLE_SAVE), `mirror` "
        "(MIRROR_SAVE), `warc`, `links` (JSON lines), or `none`",
        parse=choice(*OUTPUTS), kind="repeat", default_doc="save",
    )
    save_dir: str = key("./save", "saveDir", "where the outputs write", syntax="directory")
    warc_max_size: int = key(
        GiB, "warcMaxSize", "output warc: a new file is started once one reaches this size",
        parse=parse_int, unit="bytes", bounds=(1, None),
    )
    warc_prefix: str = key(
        "larbinpy", "warcPrefix", "output warc: files are named "
        "`PREFIX-YYYYMMDDhhmmss-NNNNN.warc.gz`", parse=parse_file_prefix,
    )
    requisites: bool | None = key(
        None, "requisites", "fetch what each HTML page needs to render (images, srcset, "
        "stylesheets and their `url()`s and `@import`s, scripts, icons, media, embeds) once a "
        "crawl, one hop past the page even on another site (scope rules not applied; robots.txt "
        "and `allowNetworks` are), not counted as pages nor parsed for links",
        parse=parse_onoff, default_doc="on with `output warc`, off otherwise",
    )
    user_output: str | None = key(
        None, "userOutput", "a Python callable called with every fetched page (larbin's "
        "useroutput)", parse=parse_user_output,
    )
    specific_search: list[str] = key(
        [], "specificSearch", "output only pages with these extensions (or a `contentTypes` "
        "type); HTML is still crawled for links (larbin SPECIFICSEARCH)",
        parse=parse_extension, kind="list", default_doc="all pages",
    )
    content_types: list[str] = key(
        [], "contentTypes", "fetch pages of these content types too, and output only them (or "
        "pages with a `specificSearch` extension)", parse=str.lower, kind="list",
        syntax="type/subtype", default_doc="all pages",
    )
    max_page_size: int = key(
        10 * MiB, "maxPageSize", "most bytes read of one page, counted after decompression",
        parse=parse_int, unit="bytes", bounds=(1, None),
    )
    document_memory: int = key(
        32 * MiB, "documentMemory", "bytes all the documents being read or parsed (pages, "
        "sitemaps, robots.txt) may hold at once; one that does not fit waits for room (one "
        "larger than it all goes alone). The default keeps the crawler's peak RSS under 300 MB "
        "with 16 pages of 750,000 links (9.3 MiB each) read at once (README, Known limits)",
        parse=parse_int, unit="bytes", bounds=(1, None),
    )
    max_url_length: int = key(
        2048, "maxUrlLength", "longer URLs are refused as crawler traps", parse=parse_int,
        unit="characters", bounds=(16, None),
    )
    max_redirects: int = key(
        5, "maxRedirects", "redirect hops followed from one URL", parse=parse_int,
        bounds=(0, 100),
    )
    max_pages_per_site: int = key(
        0, "maxPagesPerSite", "pages fetched from one site; 0 = unlimited", parse=parse_int,
        bounds=(0, None),
    )
    timeout_connect: float = key(
        10.0, "timeoutConnect", "time allowed to connect", parse=parse_float, unit="seconds",
        bounds=(0.001, None),
    )
    timeout_read: float = key(
        30.0, "timeoutRead", "time allowed between two reads", parse=parse_float,
        unit="seconds", bounds=(0.001, None),
    )
    timeout_total: float = key(
        120.0, "timeoutTotal", "time allowed for a whole fetch", parse=parse_float,
        unit="seconds", bounds=(0.001, None),
    )
    min_rate: float = key(
        0.0, "minRate", "a body arriving slower than this (after a 3 s grace) is a timeout; "
        "0 = no floor", parse=parse_float, unit="bytes/s", bounds=(0, None),
    )
    max_bandwidth: int = key(
        0, "maxBandwidth", "body bytes read per second by the whole crawl; 0 = unlimited",
        parse=parse_int, unit="bytes/s", bounds=(0, None),
    )
    per_call: int = key(
        100, "perCall", "URLs the sequencer moves from the priority queues per turn",
        parse=parse_int, bounds=(1, None),
    )
    max_sites_in_memory: int = key(
        20_000, "maxSitesInMemory", "sites with work held in memory at once: while this many "
        "have work, the jobs of other sites wait on the priority queues on disk, so a broad "
        "crawl's memory is bounded by it: about 3 kB a site, so 90,000 sites take about "
        "270 MB. With waitDuration W and connectionsPerHost 1 it caps the crawl at "
        "maxSitesInMemory / W pages a second; the default lets a polite crawl fetch 1,500 "
        "pages a second, about what one core parses",
        parse=parse_int, bounds=(1, None),
        default_doc="1,500 x waitDuration, at least 20,000 and at most 90,000",
    )
    exit_at_end: bool = key(
        False, "exitAtEnd", "exit once nothing is queued or in flight (larbin EXIT_AT_END); "
        "without it larbinpy is a daemon waiting for more URLs", kind="flag",
    )
    http_host: str = key(
        "127.0.0.1", "httpHost", "address both ports listen on", syntax="address",
    )
    input_token: str | None = key(
        None, "inputToken", "a bearer token the input port requires (401 without it)",
    )
    seed_file: str | None = key(
        None, "seedFile", "a file of URLs to crawl from, one a line", syntax="path",
    )
    robots: bool = key(True, "robots", "obey robots.txt", parse=parse_onoff)
    robots_ttl: float = key(
        86400.0, "robotsTtl", "how long a fetched robots.txt is trusted", parse=parse_float,
        unit="seconds", bounds=(0, None),
    )
    no_dup: bool = key(
        False, "noDup", "do not output a page whose body was already seen (larbin NO_DUP)",
        kind="flag",
    )
    allow_networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = key(
        [], "allowNetworks", "loopback, private, link-local or multicast ranges larbinpy may "
        "connect to all the same (it never does by default)", parse=parse_network, kind="list",
    )
    strip_params: list[str] | None = key(
        None, "stripParams", "query parameters removed from URLs (`utm_*`: a trailing `*` "
        "matches a prefix); replaces the built-in list", parse=str.lower, kind="list",
        syntax="name", default_doc="session-id names and utm_*",
    )
    max_links_per_page: int = key(
        10000, "maxLinksPerPage", "links taken from one page; the rest are dropped",
        parse=parse_int, bounds=(0, None),
    )
    checkpoint_interval: float = key(
        10.0, "checkpointInterval", "time between two saves of the pending URLs to stateDir",
        parse=parse_float, unit="seconds", bounds=(0.1, None),
    )
    input_max_body: int = key(
        MiB, "inputMaxBody", "largest request body the input port takes (413 above)",
        parse=parse_int, unit="bytes", bounds=(1, None),
    )
    input_max_urls: int = key(
        10000, "inputMaxUrls", "most URLs one input-port request may carry (413 above)",
        parse=parse_int, bounds=(1, None),
    )
    log_file: str | None = key(
        None, "logFile", "log to this file instead of stderr (reopened when rotated, and on "
        "SIGHUP)", syntax="path", default_doc="stderr",
    )
    log_format: str = key(
        "text", "logFormat", "log lines as text (`time LEVEL logger: message`) or as one JSON "
        "object a line: `time` (UTC, ISO 8601), `level`, `logger`, `message`, and `exception` "
        "(the traceback) when there is one", parse=choice("text", "json"),
    )
    crawl_log: str | None = key(
        "crawl.jsonl", "crawlLog", "one JSON line for every URL admitted to the crawl, at its "
        "final outcome, fetched or not (refused and duplicate links are only counted); a "
        "relative path is taken inside saveDir; reopened on SIGHUP; `none` turns it off",
        parse=lambda v: None if v == "none" else v, syntax="path|none",
    )
    tls_verify: bool = key(
        True, "tlsVerify", "check HTTPS certificates; off is for lab crawls, and the status page "
        "says so", parse=parse_onoff,
    )
    ca_file: str | None = key(
        None, "caFile", "a certificate authority (PEM) trusted besides the system's",
        syntax="path",
    )
    ip_version: str = key(
        "any", "ipVersion", "4 asks DNS for A only, 6 for AAAA only, any for A then AAAA",
        parse=choice("4", "6", "any"),
    )
    proxy_dns: str = key(
        "proxy", "proxyDns", "with a proxy: `proxy` lets it resolve host names (larbin), "
        "`local` resolves them here too", parse=choice("local", "proxy"),
    )
    max_retries: int = key(
        2, "maxRetries", "retries of a 429/503 page, and of a robots.txt that failed (5xx, 429, "
        "unreachable)", parse=parse_int, bounds=(0, 100),
    )
    max_retry_after: float = key(
        3600.0, "maxRetryAfter", "longest pause a Retry-After (or the exponential back-off) may "
        "impose on a site", parse=parse_float, unit="seconds", bounds=(0, None),
    )
    max_crawl_delay: float = key(
        60.0, "maxCrawlDelay", "largest robots.txt Crawl-delay obeyed", parse=parse_float,
        unit="seconds", bounds=(0, None),
    )
    sitemaps: bool = key(
        True, "sitemaps", "follow robots.txt `Sitemap:` lines (indexes and .gz too)",
        parse=parse_onoff,
    )
    sitemap_priority: int = key(
        0, "sitemapPriority", "priority of the URLs sitemaps list (higher is fetched first)",
        parse=parse_int, bounds=(0, 9),
    )
    recrawl: bool = key(
        False, "recrawl", "keep the copy fresh: every fetched page is fetched again on a "
        "schedule learned from how often it changed (the crawl then never ends by itself)",
        parse=parse_onoff,
    )
    recrawl_min: float = key(
        3600.0, "recrawlMin", "recrawl: shortest time between two fetches of one page",
        parse=parse_float, unit="seconds", bounds=(0.001, None),
    )
    recrawl_max: float = key(
        2592000.0, "recrawlMax", "recrawl: longest time between two fetches of one page (a page "
        "that never changes drifts to it)", parse=parse_float, unit="seconds",
        bounds=(0.001, None),
    )
    recrawl_share: float = key(
        1.0, "recrawlShare", "recrawl: the share of each site's politeness capacity "
        "(connectionsPerHost, waitDuration) revisits may use; URLs never fetched go first",
        parse=parse_fraction,
    )
    follow_images: bool = key(
        False, "followImages", "follow `<img src>` and keep image/* pages (larbin IMAGES)",
        kind="flag",
    )
    any_type: bool = key(
        False, "anyType", "keep pages of every content type, not only HTML (larbin ANYTYPE)",
        kind="flag",
    )
    cookies: bool = key(
        False, "cookies", "keep each site's Set-Cookie and send it back, bounded (larbin "
        "COOKIES)", kind="flag",
    )
    cgi_level: int = key(
        0, "cgiLevel", "1 refuses URLs containing `?`, `=` or `*` (larbin CGILEVEL)",
        parse=parse_cgi_level,
    )
    depth_by_site: bool = key(
        True, "depthBySite", "on: a link to another site starts there with the full "
        "`depthInSite` again (larbin DEPTHBYSITE)", parse=parse_onoff,
    )
    cluster: str | None = key(
        None, "cluster", "the Redis that the nodes of one crawl share (scale-out); unset: one "
        "process", syntax="redis://host:port/db",
    )
    cluster_name: str = key(
        "larbinpy", "clusterName", "key prefix in Redis, one per crawl sharing it",
    )
    node_id: str | None = key(
        None, "nodeId", "this node's id in the cluster; reuse an id to take its URLs back",
        default_doc="host:pid",
    )
    # where each key was set, for errors found after parsing (lower-case key -> line)
    lines: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    # what the file does that is allowed but likely a mistake, as `path:line: message`
    warnings: list[str] = field(default_factory=list, repr=False, compare=False)

    def __init__(self, **values: Any) -> None:
        """Each field from `values` by name, else its default (a fresh list or dict)."""
        unknown = values.keys() - _DEFAULTS.keys()
        if unknown:
            raise TypeError(f"Config() got unexpected keyword arguments {sorted(unknown)}")
        own = self.__dict__
        for name, (default, factory) in _DEFAULTS.items():
            own[name] = factory() if factory is not None else default
        own.update(values)

    def __repr__(self) -> str:
        """`Config(path=..., ...)`, the fields with repr=True, as a dataclass writes it."""
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _SHOWN)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        """Equal when of the same class with equal fields (the compare=True ones)."""
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(_COMPARED(self) == _COMPARED(other))

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value: unhashable

    def effective_outputs(self) -> list[str]:
        """The outputs in force: `save` when none was configured, nothing for `none`."""
        chosen = self.outputs or ["save"]
        return [o for o in chosen if o != "none"]

    def wants_requisites(self) -> bool:
        """`requisites` in force: as set, else on exactly when `output warc` is."""
        if self.requisites is not None:
            return self.requisites
        return "warc" in self.effective_outputs()

    def error(self, key: str, message: str) -> ConfigError:
        """A ConfigError pointing at the line where `key` was set."""
        return ConfigError(self.path, self.lines.get(key.lower()), message)


# Config's fields: (default, factory or None) by name; those repr and eq show and compare
_DEFAULTS: dict[str, tuple[Any, Callable[[], Any] | None]] = {
    f.name: (f.default, None if f.default_factory is MISSING else f.default_factory)
    for f in fields(Config)
}
_SHOWN = tuple(f.name for f in fields(Config) if f.repr)
_COMPARED = attrgetter(*(f.name for f in fields(Config) if f.compare))  # -> a tuple of them


def _default_of(f: Field[Any]) -> Any:
    """A field's default value (a fresh one for a list)."""
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


def _table() -> dict[str, Key]:
    """Every key by its lower-case name, in declaration order, with its field and default."""
    table: dict[str, Key] = {}
    for f in fields(Config):
        spec = f.metadata.get("key")
        if spec is not None:
            table[spec.larbin.lower()] = replace(spec, attr=f.name, default=_default_of(f))
    return table


KEYS: dict[str, Key] = _table()


# --- parsing --------------------------------------------------------------------------------


def default_hash_size(seen_set: str, cluster: bool) -> int:
    """hashSize when larbin.conf sets none: the key's default where the bitmap only filters
    (seenSet exact, and a cluster node's, always exact), LOSSY_HASH_SIZE where its fill is the
    loss (seenSet bitmap)."""
    return LOSSY_HASH_SIZE if seen_set == "bitmap" and not cluster else Config.hash_size


# pages a second the default budget serves: about what one core parses (docs/benchmarks.md)
SITES_A_WAIT_SECOND = 1_500
SITES_DEFAULT_MAX = 90_000  # what fits a 500 MB crawl with the rest (docs/architecture.md)


def default_sites_in_memory(wait_duration: float) -> int:
    """maxSitesInMemory when larbin.conf sets none: enough sites at work for 1,500 pages a
    second under waitDuration (each site gives one a wait), within the key's floor and
    SITES_DEFAULT_MAX."""
    wanted = math.ceil(SITES_A_WAIT_SECOND * wait_duration)
    return max(Config.max_sites_in_memory, min(SITES_DEFAULT_MAX, wanted))


def load_config(path: str | Path) -> Config:
    """Read and validate a larbin.conf file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(p), None, f"cannot read configuration: {exc}") from None
    return parse_config(text, str(p))


def parse_config(text: str, path: str = "larbin.conf") -> Config:
    """Parse and validate larbin.conf text; `path` is only used in error messages."""
    cfg = Config(path=path)
    tokens = tokenize(text, path)
    i = 0
    while i < len(tokens):
        i = _parse_key(cfg, tokens, i)
    if "hashsize" not in cfg.lines:
        cfg.hash_size = default_hash_size(cfg.seen_set, cfg.cluster is not None)
    if "requisites" not in cfg.lines:  # what is in force, as check-config shows it
        cfg.requisites = cfg.wants_requisites()
    if "maxsitesinmemory" not in cfg.lines:
        cfg.max_sites_in_memory = default_sites_in_memory(cfg.wait_duration)
    validate(cfg)
    return cfg


def _parse_key(cfg: Config, tokens: list[Token], i: int) -> int:
    """Apply the key at tokens[i]; return the index of the next key."""
    tok = tokens[i]
    name = tok.text.lower()
    spec = KEYS.get(name)
    if spec is None:
        raise ConfigError(cfg.path, tok.line, f"unknown key {tok.text!r}")
    if name in cfg.lines and spec.kind in ("value", "flag") and name not in MAY_REPEAT:
        # not an error: generated configurations append overrides to a base file (the shared
        # benchmark's, the tests'); but the last never wins silently
        cfg.warnings.append(f"{cfg.path}:{tok.line}: {tok.text} is set twice (lines "
                            f"{cfg.lines[name]} and {tok.line}); line {tok.line} wins")
    if spec.kind in ("value", "flag"):
        cfg.lines[name] = tok.line  # errors found later point at the line in effect
    else:
        cfg.lines.setdefault(name, tok.line)
    if spec.read is not None:
        return spec.read(cfg, tokens, i)
    if spec.kind == "flag":
        return _read_flag(cfg, tokens, i, spec)
    if spec.kind == "list":
        return _parse_list(cfg, tokens, i, spec)
    parsed = _convert(cfg, _next_value(cfg, tokens, i), spec.parse, tok.text)
    if spec.kind == "repeat":
        getattr(cfg, spec.attr).append(parsed)
    else:
        setattr(cfg, spec.attr, parsed)
    return i + 2


def _read_flag(cfg: Config, tokens: list[Token], i: int, spec: Key) -> int:
    """A flag alone turns on; `on`/`yes`/`true` or `off`/`no`/`false` after it are taken too
    (people write them); any other word on its line is an error naming the flag."""
    tok = tokens[i]
    if i + 1 >= len(tokens) or tokens[i + 1].line != tok.line:
        setattr(cfg, spec.attr, True)
        return i + 1
    word = tokens[i + 1].text.lower()
    if word not in FLAG_WORDS:
        raise ConfigError(cfg.path, tok.line, f"{tok.text} is a flag: it takes no value "
                          f"(or on/off), got {tokens[i + 1].text!r}")
    setattr(cfg, spec.attr, FLAG_WORDS[word])
    return i + 2


def _parse_list(cfg: Config, tokens: list[Token], i: int, spec: Key) -> int:
    """Values after a list key up to the token `end` (they may span lines)."""
    start = tokens[i]
    items: list[Any] = []
    j = i + 1
    while j < len(tokens) and tokens[j].text.lower() != "end":
        tok = tokens[j]
        if tok.text.lower() in KEYS and tokens[j - 1].line != tok.line:
            # a key's name at the start of a line: the list above it lacks its `end` (larbin
            # would take the rest of the file as items)
            raise ConfigError(cfg.path, tok.line, f"{start.text} (line {start.line}) is "
                              f"missing its 'end' before {tok.text}")
        items.append(_convert(cfg, tok, spec.parse, start.text))
        j += 1
    if j >= len(tokens):
        raise ConfigError(cfg.path, start.line, f"{start.text} list is missing its 'end'")
    current = getattr(cfg, spec.attr)
    setattr(cfg, spec.attr, (current or []) + items)
    return j + 1


def validate(cfg: Config) -> None:
    """Checks that need the whole file: ranges and combinations."""
    for name, spec in KEYS.items():
        if spec.bounds is None or name not in cfg.lines:
            continue
        low, high = spec.bounds
        value = getattr(cfg, spec.attr)
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise cfg.error(name, f"{spec.larbin} must be {bound}, got {value}")
    if "none" in cfg.outputs and len(cfg.outputs) > 1:
        raise cfg.error("output", "output none cannot be combined with other outputs")
    if cfg.ca_file is not None and not Path(cfg.ca_file).is_file():
        raise cfg.error("cafile", f"caFile {cfg.ca_file}: no such file")
    if cfg.input_token is not None and not cfg.input_token.strip():
        # an empty token would accept anyone while looking protected
        raise cfg.error("inputtoken", "inputToken must not be empty")
    if cfg.recrawl and cfg.exit_at_end:
        raise cfg.error("recrawl", "recrawl on never ends by itself: it cannot be combined "
                        f"with exitAtEnd (line {cfg.lines.get('exitatend')})")
    if cfg.recrawl and cfg.recrawl_min > cfg.recrawl_max:
        raise cfg.error("recrawlmin" if "recrawlmin" in cfg.lines else "recrawlmax",
                        f"recrawlMin ({cfg.recrawl_min:g} s) must not exceed recrawlMax "
                        f"({cfg.recrawl_max:g} s)")
    if cfg.cluster is not None and not re.match(r"(redis|rediss|unix)://", cfg.cluster):
        raise cfg.error("cluster", f"cluster must be a redis://host:port/db URL, got "
                                   f"{cfg.cluster!r}")


# --- describing -----------------------------------------------------------------------------


def describe(cfg: Config, defaults: dict[str, str] | None = None) -> str:
    """The effective configuration, one `key value` line each, for `check-config`: what is in
    effect (a default the table cannot spell is in `defaults`, by key), secrets masked."""
    lines = [f"# effective configuration of {cfg.path}"]
    shown = {"output": " ".join(cfg.effective_outputs()) or "none", **(defaults or {})}
    for name, spec in KEYS.items():
        value = getattr(cfg, spec.attr)
        if spec.larbin in shown and (value in (None, []) or spec.larbin == "output"):
            value = shown[spec.larbin]
        elif name in SECRET_KEYS and value is not None:
            value = "(set, not shown)"
        elif isinstance(value, list):
            value = " ".join(_show(v) for v in value) or "(none)"
        lines.append(f"{spec.larbin:<20} {_show(value)}")
    return "\n".join(lines)


SECRET_KEYS = frozenset({"inputtoken"})  # check-config's output may be pasted anywhere


def _show(value: Any) -> str:
    """A value as a person would write it in larbin.conf."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, re.Pattern):
        return str(value.pattern)
    if isinstance(value, StartUrl):
        return f"{value.url}(depth {value.depth})"
    if value is None:
        return "(unset)"
    return str(value)


def value_form(spec: Key) -> str:
    """How a key's value is written: `integer`, `on | off`, `regex ... end`, ..."""
    if spec.kind == "flag":
        return "flag"
    form = spec.syntax or SYNTAX.get(spec.parse, "text")
    if spec.kind == "list":
        return f"{form} ... end"
    if spec.kind == "repeat":
        return f"{form}, repeatable"
    return form


def default_text(spec: Key) -> str:
    """A key's default as docs/configuration.md and the `[...]` notes of larbin.conf show it."""
    if spec.default_doc is not None:
        return spec.default_doc
    value = spec.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "" or value == []:
        return "none"
    return _number(value, spec.unit) if isinstance(value, int | float) else str(value)


def range_text(spec: Key) -> str:
    """A key's allowed values, when it has bounds: `0 to 65535`, `at least 1`."""
    if spec.bounds is None:
        return ""
    low, high = (None if b is None else _number(b, spec.unit) for b in spec.bounds)
    return f"{low} to {high}" if high is not None else f"at least {low}"


def _number(value: float, unit: str) -> str:
    """A number as larbin.conf could say it: `60`, `0.5`, `10MiB` (bytes), `2^30` (big powers)."""
    if isinstance(value, float) and not value.is_integer():
        return repr(value)
    n = int(value)
    if unit == "bytes":
        for suffix, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
            if n and n % size == 0:
                return f"{n // size}{suffix}"
    if n >= 1 << 16 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return str(n)


MARKDOWN_HEAD = """\
# larbin.conf reference

<!-- Generated by `make docs` (python -m larbinpy.config --markdown) from the key table in
larbinpy/config.py: edit the table, not this file. -->

larbinpy reads larbin's configuration file with larbin's syntax: whitespace-separated tokens,
`#` starts a comment to the end of the line, `"..."` is one token with spaces, keys are
case-insensitive. An unknown key, a bad value or a value out of range stops larbinpy with the file
and line of the mistake (exit code 2). `larbinpy check-config -c FILE` checks a file and prints
every key's value in force. The shipped `larbin.conf` shows every key with its default.

How values are written:

- integer: digits, `2^N`, or a size with a suffix: `k`, `M`, `G` (powers of 1000) or `KiB`,
  `MiB`, `GiB` (powers of 1024), as in `10MiB`;
- number: a decimal number such as `0.5`;
- `on | off`: also `yes` / `no`, `true` / `false`, `1` / `0`;
- flag: the key alone turns the option on; without it the option is off;
- `... end`: a list, values up to the token `end`, over several lines if need be; a list key
  given twice adds to the list;
- repeatable: one value a line; the key may be given again to add another.

The Unit column says what a number counts; a value outside the Range column is an error.
"""


def markdown() -> str:
    """docs/configuration.md: every key with its value form, default, unit, range and doc."""
    out = [MARKDOWN_HEAD, "| Key | Value | Default | Unit | Range | Description |",
           "|---|---|---|---|---|---|"]
    for spec in KEYS.values():
        cells = (f"`{spec.larbin}`", value_form(spec), default_text(spec), spec.unit,
                 range_text(spec), spec.doc)
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m larbinpy.config --markdown`: print the key reference (make docs)."""
    p = argparse.ArgumentParser(
        prog="python -m larbinpy.config", description="larbin.conf's key table, as a document."
    )
    p.add_argument("--markdown", action="store_true", help="print docs/configuration.md")
    if not p.parse_args(argv).markdown:
        p.error("nothing to do: give --markdown")
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
