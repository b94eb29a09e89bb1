"""The larbin.conf reader: turns the configuration file into one validated `Config`.

Not a pipeline stage: every stage reads its settings from the `Config` this module builds.
The syntax is larbin's: whitespace-separated tokens, `#` starts a comment to the end of the
line, `"..."` is one token with spaces, keys are case-insensitive, list keys end with `end`.
Every error names the file and line (`ConfigError`), and nothing unknown is silently ignored.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10

OUTPUTS = ("none", "save", "mirror", "warc", "links")


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


@dataclass
class Config:
    """Every larbin.conf key, with SPEC.md's defaults. Field names are the keys in snake case."""

    path: str = "<defaults>"
    # larbin's own keys
    from_: str = ""
    user_agent: str = "larbinpy/0.1"
    http_port: int = 8081
    input_port: int = 1976
    pages_connexions: int = 100
    dns_connexions: int = 5
    depth_in_site: int = 5
    no_external_links: bool = False
    wait_duration: float = 60.0
    proxy: tuple[str, int] | None = None
    start_urls: list[StartUrl] = field(default_factory=list)
    limit_to_domain: list[str] = field(default_factory=list)
    forbidden_extensions: list[str] = field(default_factory=list)
    # new keys
    dns_servers: list[str] = field(default_factory=list)
    exclude_patterns: list[re.Pattern[str]] = field(default_factory=list)
    include_patterns: list[re.Pattern[str]] = field(default_factory=list)
    connections_per_host: int = 1
    state_dir: str = "./larbin-state"
    hash_size: int = 1 << 30
    hash_functions: int = 1
    outputs: list[str] = field(default_factory=list)
    save_dir: str = "./save"
    warc_max_size: int = GiB
    warc_prefix: str = "larbinpy"
    user_output: str | None = None
    specific_search: list[str] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    max_page_size: int = 10 * MiB
    max_url_length: int = 2048
    max_redirects: int = 5
    max_pages_per_site: int = 0  # 0 = unlimited
    timeout_connect: float = 10.0
    timeout_read: float = 30.0
    timeout_total: float = 120.0
    min_rate: float = 0.0
    max_bandwidth: int = 0  # 0 = unlimited
    per_call: int = 100
    exit_at_end: bool = False
    http_host: str = "127.0.0.1"
    input_token: str | None = None
    seed_file: str | None = None
    robots: bool = True
    robots_ttl: float = 86400.0
    no_dup: bool = False
    allow_networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = field(
        default_factory=list
    )
    strip_params: list[str] | None = None  # None = the built-in session-id / utm_* list
    max_links_per_page: int = 10000
    checkpoint_interval: float = 10.0
    input_max_body: int = MiB
    input_max_urls: int = 10000
    log_file: str | None = None
    tls_verify: bool = True
    ca_file: str | None = None
    ip_version: str = "any"
    proxy_dns: str = "proxy"
    max_retries: int = 2
    max_retry_after: float = 3600.0
    max_crawl_delay: float = 60.0
    sitemaps: bool = True
    sitemap_priority: int = 0  # priority of the URLs sitemaps list
    follow_images: bool = False
    any_type: bool = False
    cookies: bool = False
    cgi_level: int = 0
    depth_by_site: bool = True
    cluster: str | None = None
    cluster_name: str = "larbinpy"
    node_id: str | None = None
    # where each key was set, for errors found after parsing (key -> line)
    lines: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def effective_outputs(self) -> list[str]:
        """The outputs in force: `save` when none was configured, nothing for `none`."""
        chosen = self.outputs or ["save"]
        return [o for o in chosen if o != "none"]

    def error(self, key: str, message: str) -> ConfigError:
        """A ConfigError pointing at the line where `key` was set."""
        return ConfigError(self.path, self.lines.get(key.lower()), message)


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

_SIZE_SUFFIX = {
    "": 1, "k": 1000, "m": 1000**2, "g": 1000**3,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "kib": KiB, "mib": MiB, "gib": GiB, "b": 1,
}


def parse_int(text: str) -> int:
    """An integer; accepts `2^30` and size suffixes (10M, 1GiB, 500KiB)."""
    t = text.strip().lower().replace("_", "")
    m = re.fullmatch(r"(\d+)\^(\d+)", t)
    if m:
        return int(m.group(1)) ** int(m.group(2))
    m = re.fullmatch(r"(\d+)([a-z]*)", t)
    if not m or m.group(2) not in _SIZE_SUFFIX:
        raise ValueError(f"not an integer: {text!r}")
    return int(m.group(1)) * _SIZE_SUFFIX[m.group(2)]


def parse_float(text: str) -> float:
    """A non-negative number of seconds (or bytes/s)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"not a finite number: {text!r}")
    return value


def parse_onoff(text: str) -> bool:
    """`on`/`off` (also yes/no, true/false, 1/0)."""
    t = text.lower()
    if t in ("on", "yes", "true", "1"):
        return True
    if t in ("off", "no", "false", "0"):
        return False
    raise ValueError(f"expected on or off, got {text!r}")


def parse_dns_server(text: str) -> str:
    """`ip[:port]` or `[ipv6]:port`, checked, returned as aiodns wants it."""
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


def parse_network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A CIDR range such as 127.0.0.0/8 or ::1/128."""
    return ipaddress.ip_network(text, strict=False)


def parse_regex(text: str) -> re.Pattern[str]:
    """A Python regular expression."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ValueError(f"bad regular expression {text!r}: {exc}") from None


def parse_extension(text: str) -> str:
    """A file extension, stored lower-case with its dot."""
    t = text.lower()
    return t if t.startswith(".") else "." + t


def parse_domain(text: str) -> str:
    """A domain suffix for limitToDomain, stored lower-case."""
    return text.lower()


def parse_file_prefix(text: str) -> str:
    """A file name prefix: letters, digits, `.`, `_`, `-` (it names files in saveDir)."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}", text):
        raise ValueError(f"expected letters, digits, '.', '_' or '-', got {text!r}")
    return text


def parse_user_output(text: str) -> str:
    """`module:callable`."""
    if not re.fullmatch(r"[\w.]+:[\w.]+", text):
        raise ValueError(f"expected module:callable, got {text!r}")
    return text


def choice(*allowed: str) -> Callable[[str], str]:
    """A parser accepting one of `allowed` (case-insensitive)."""

    def parse(text: str) -> str:
        t = text.lower()
        if t not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {text!r}")
        return t

    return parse


# --- the key table ------------------------------------------------------------------------

# kind: "value" (one token), "flag" (no token), "list" (tokens until `end`),
# "repeat" (one token, may be given several times, appended).
KEYS: dict[str, tuple[str, str, Callable[[str], Any]]] = {
    # key (lower-case): (field, kind, parser)
    "from": ("from_", "value", str),
    "useragent": ("user_agent", "value", str),
    "httpport": ("http_port", "value", parse_int),
    "inputport": ("input_port", "value", parse_int),
    "pagesconnexions": ("pages_connexions", "value", parse_int),
    "dnsconnexions": ("dns_connexions", "value", parse_int),
    "depthinsite": ("depth_in_site", "value", parse_int),
    "noexternallinks": ("no_external_links", "flag", bool),
    "waitduration": ("wait_duration", "value", parse_float),
    "limittodomain": ("limit_to_domain", "list", parse_domain),
    "forbiddenextensions": ("forbidden_extensions", "list", parse_extension),
    "dnsservers": ("dns_servers", "repeat", parse_dns_server),
    "excludepatterns": ("exclude_patterns", "list", parse_regex),
    "includepatterns": ("include_patterns", "list", parse_regex),
    "connectionsperhost": ("connections_per_host", "value", parse_int),
    "statedir": ("state_dir", "value", str),
    "hashsize": ("hash_size", "value", parse_int),
    "hashfunctions": ("hash_functions", "value", parse_int),
    "output": ("outputs", "repeat", choice(*OUTPUTS)),
    "savedir": ("save_dir", "value", str),
    "warcmaxsize": ("warc_max_size", "value", parse_int),
    "warcprefix": ("warc_prefix", "value", parse_file_prefix),
    "useroutput": ("user_output", "value", parse_user_output),
    "specificsearch": ("specific_search", "list", parse_extension),
    "contenttypes": ("content_types", "list", str.lower),
    "maxpagesize": ("max_page_size", "value", parse_int),
    "maxurllength": ("max_url_length", "value", parse_int),
    "maxredirects": ("max_redirects", "value", parse_int),
    "maxpagespersite": ("max_pages_per_site", "value", parse_int),
    "timeoutconnect": ("timeout_connect", "value", parse_float),
    "timeoutread": ("timeout_read", "value", parse_float),
    "timeouttotal": ("timeout_total", "value", parse_float),
    "minrate": ("min_rate", "value", parse_float),
    "maxbandwidth": ("max_bandwidth", "value", parse_int),
    "percall": ("per_call", "value", parse_int),
    "exitatend": ("exit_at_end", "flag", bool),
    "httphost": ("http_host", "value", str),
    "inputtoken": ("input_token", "value", str),
    "seedfile": ("seed_file", "value", str),
    "robots": ("robots", "value", parse_onoff),
    "robotsttl": ("robots_ttl", "value", parse_float),
    "nodup": ("no_dup", "flag", bool),
    "allownetworks": ("allow_networks", "list", parse_network),
    "stripparams": ("strip_params", "list", str.lower),
    "maxlinksperpage": ("max_links_per_page", "value", parse_int),
    "checkpointinterval": ("checkpoint_interval", "value", parse_float),
    "inputmaxbody": ("input_max_body", "value", parse_int),
    "inputmaxurls": ("input_max_urls", "value", parse_int),
    "logfile": ("log_file", "value", str),
    "tlsverify": ("tls_verify", "value", parse_onoff),
    "cafile": ("ca_file", "value", str),
    "ipversion": ("ip_version", "value", choice("4", "6", "any")),
    "proxydns": ("proxy_dns", "value", choice("local", "proxy")),
    "maxretries": ("max_retries", "value", parse_int),
    "maxretryafter": ("max_retry_after", "value", parse_float),
    "maxcrawldelay": ("max_crawl_delay", "value", parse_float),
    "sitemaps": ("sitemaps", "value", parse_onoff),
    "sitemappriority": ("sitemap_priority", "value", parse_int),
    "followimages": ("follow_images", "flag", bool),
    "anytype": ("any_type", "flag", bool),
    "cookies": ("cookies", "flag", bool),
    "cgilevel": ("cgi_level", "value", choice("0", "1")),
    "depthbysite": ("depth_by_site", "value", parse_onoff),
    "cluster": ("cluster", "value", str),
    "clustername": ("cluster_name", "value", str),
    "nodeid": ("node_id", "value", str),
}

# Keys whose behaviour is a later issue's: accepted only with the value that means "off",
# so a configuration never silently asks for something larbinpy does not do yet.
NOT_SUPPORTED_YET: dict[str, Callable[[Config], bool]] = {}

# (key, smallest allowed value, largest allowed value or None)
RANGES: list[tuple[str, float, float | None]] = [
    ("httpport", 0, 65535), ("inputport", 0, 65535), ("pagesconnexions", 1, 100000),
    ("dnsconnexions", 1, 10000), ("depthinsite", 0, None), ("waitduration", 0, None),
    ("connectionsperhost", 1, 1000), ("hashsize", 1024, 1 << 40), ("hashfunctions", 1, 32),
    ("warcmaxsize", 1, None), ("maxpagesize", 1, None), ("maxurllength", 16, None),
    ("maxredirects", 0, 100), ("maxpagespersite", 0, None), ("timeoutconnect", 0.001, None),
    ("timeoutread", 0.001, None), ("timeouttotal", 0.001, None), ("minrate", 0, None),
    ("maxbandwidth", 0, None), ("percall", 1, None), ("robotsttl", 0, None),
    ("maxlinksperpage", 0, None), ("checkpointinterval", 0.1, None), ("inputmaxbody", 1, None),
    ("inputmaxurls", 1, None), ("maxretries", 0, 100), ("maxretryafter", 0, None),
    ("maxcrawldelay", 0, None), ("sitemappriority", 0, 9),
]


# --- parsing --------------------------------------------------------------------------------


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
    validate(cfg)
    return cfg


def _parse_key(cfg: Config, tokens: list[Token], i: int) -> int:
    """Apply the key at tokens[i]; return the index of the next key."""
    tok = tokens[i]
    key = tok.text.lower()
    cfg.lines.setdefault(key, tok.line)
    if key == "starturl":
        value = _next_value(cfg, tokens, i, key)
        cfg.start_urls.append(StartUrl(value.text, cfg.depth_in_site, value.line))
        return i + 2
    if key == "proxy":
        return _parse_proxy(cfg, tokens, i)
    if key not in KEYS:
        raise ConfigError(cfg.path, tok.line, f"unknown key {tok.text!r}")
    name, kind, parser = KEYS[key]
    if kind == "flag":
        setattr(cfg, name, True)
        return i + 1
    if kind == "list":
        return _parse_list(cfg, tokens, i, name, parser)
    value = _next_value(cfg, tokens, i, key)
    parsed = _convert(cfg, value, parser, tok.text)
    if kind == "repeat":
        getattr(cfg, name).append(parsed)
    else:
        setattr(cfg, name, int(parsed) if key == "cgilevel" else parsed)
    return i + 2


def _next_value(cfg: Config, tokens: list[Token], i: int, key: str) -> Token:
    """The token after a key on the same line, or an error naming the key's line."""
    tok = tokens[i]
    if i + 1 >= len(tokens) or tokens[i + 1].line != tok.line:
        raise ConfigError(cfg.path, tok.line, f"{tok.text} needs a value")
    return tokens[i + 1]


def _convert(cfg: Config, value: Token, parser: Callable[[str], Any], key: str) -> Any:
    """Run a value parser, turning its ValueError into a ConfigError at the value's line."""
    try:
        return parser(value.text)
    except ValueError as exc:
        raise ConfigError(cfg.path, value.line, f"bad value for {key}: {exc}") from None


def _parse_list(
    cfg: Config, tokens: list[Token], i: int, name: str, parser: Callable[[str], Any]
) -> int:
    """Values after a list key up to the token `end` (they may span lines)."""
    start = tokens[i]
    items: list[Any] = []
    j = i + 1
    while j < len(tokens) and tokens[j].text.lower() != "end":
        items.append(_convert(cfg, tokens[j], parser, start.text))
        j += 1
    if j >= len(tokens):
        raise ConfigError(cfg.path, start.line, f"{start.text} list is missing its 'end'")
    current = getattr(cfg, name)
    setattr(cfg, name, (current or []) + items)
    return j + 1


def _parse_proxy(cfg: Config, tokens: list[Token], i: int) -> int:
    """`proxy host port` — two values."""
    tok = tokens[i]
    if i + 2 >= len(tokens) or tokens[i + 2].line != tok.line:
        raise ConfigError(cfg.path, tok.line, "proxy needs a host and a port")
    port = _convert(cfg, tokens[i + 2], parse_int, "proxy")
    if not 0 < port < 65536:
        raise ConfigError(cfg.path, tok.line, f"bad proxy port {port}")
    cfg.proxy = (tokens[i + 1].text, port)
    return i + 3


def validate(cfg: Config) -> None:
    """Checks that need the whole file: ranges, combinations, unsupported values."""
    for key, low, high in RANGES:
        if key not in cfg.lines:
            continue
        value = getattr(cfg, KEYS[key][0])
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise cfg.error(key, f"{SPELLING[key]} must be {bound}, got {value}")
    for key, is_used in NOT_SUPPORTED_YET.items():
        if is_used(cfg):
            raise cfg.error(key, f"{SPELLING[key]}: not supported yet in this version of larbinpy")
    if "none" in cfg.outputs and len(cfg.outputs) > 1:
        raise cfg.error("output", "output none cannot be combined with other outputs")
    if cfg.ca_file is not None and not Path(cfg.ca_file).is_file():
        raise cfg.error("cafile", f"caFile {cfg.ca_file}: no such file")
    if cfg.input_token is not None and not cfg.input_token.strip():
        # an empty token would accept anyone while looking protected
        raise cfg.error("inputtoken", "inputToken must not be empty")
    if cfg.cluster is not None and not re.match(r"(redis|rediss|unix)://", cfg.cluster):
        raise cfg.error("cluster", f"cluster must be a redis://host:port/db URL, got "
                                   f"{cfg.cluster!r}")


# How each key is spelled in larbin.conf (the parser itself is case-insensitive).
SPELLING = {k.lower(): k for k in (
    "From UserAgent httpPort inputPort pagesConnexions dnsConnexions depthInSite noExternalLinks "
    "waitDuration limitToDomain forbiddenExtensions dnsServers excludePatterns includePatterns "
    "connectionsPerHost stateDir hashSize hashFunctions output saveDir warcMaxSize warcPrefix "
    "userOutput specificSearch contentTypes maxPageSize maxUrlLength maxRedirects maxPagesPerSite "
    "timeoutConnect timeoutRead timeoutTotal minRate maxBandwidth perCall exitAtEnd httpHost "
    "inputToken seedFile robots robotsTtl noDup allowNetworks stripParams maxLinksPerPage "
    "checkpointInterval inputMaxBody inputMaxUrls logFile tlsVerify caFile ipVersion proxyDns "
    "maxRetries maxRetryAfter maxCrawlDelay sitemaps sitemapPriority followImages anyType cookies "
    "cgiLevel depthBySite cluster clusterName nodeId startUrl proxy"
).split()}


def describe(cfg: Config) -> str:
    """The effective configuration, one `key value` line each, for `check-config`."""
    lines = [f"# effective configuration of {cfg.path}"]
    names = {name: SPELLING[key] for key, (name, _, _) in KEYS.items()}
    names.update(start_urls="startUrl", proxy="proxy")
    for f in fields(cfg):
        if f.name in ("path", "lines"):
            continue
        value = getattr(cfg, f.name)
        if isinstance(value, list):
            value = " ".join(_show(v) for v in value) or "(none)"
        lines.append(f"{names[f.name]:<20} {_show(value)}")
    return "\n".join(lines)


def _show(value: Any) -> str:
    """A value as a person would write it in larbin.conf."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, re.Pattern):
        return value.pattern
    if isinstance(value, StartUrl):
        return f"{value.url}(depth {value.depth})"
    if value is None:
        return "(unset)"
    return str(value)
