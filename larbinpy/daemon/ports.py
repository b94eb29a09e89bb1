"""The built-in HTTP ports, on the crawler's own event loop (aiohttp.web).

- `httpPort` (read-only): `GET /` the status page, `GET /status.json`, `GET /metrics`; the
  per-site view `GET /sites` and `/sites.json` (the busiest and the most failing sites, also
  in status.json's `sites_view`), `GET
  /sites/HOST` and `/sites/HOST.json` (one site's detail, 404 with the reason when the crawl
  holds no site of that host).
- `inputPort` (write): `POST /urls` hands URLs to the input stage, JSON or larbin's text form.
They may share one port. Bad requests get a 4xx with a reason and queue nothing. The ports see
the crawl only through `status.StatusSource` and the `SubmitUrls` callable the crawler hands them.

A URL may carry an integer tag (larbin's URL_TAGS), kept across redirects and written by the
`save` and `links` outputs: JSON `"tag": N` for every URL of the body, or `{"url": u, "tag": N}`
items; text `?tag=N` (or `tag:N` in larbin's first line) for every URL, or `URL N` on a line.

The listeners defend themselves against clients that hold connections: a connection must send
a whole request head within IDLE_TIMEOUT of opening (or of its previous response: the idle
keep-alive limit, aiohttp's keep-alive timer), a body within BODY_TIMEOUT (else 408), and at
most MAX_CONNECTIONS are open at once (the next is answered 503 and closed at once, before it
costs a file descriptor for long). A JSON body nested deeper than Python's parser allows gets 400.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from larbinpy.config import Config
from larbinpy.daemon.sitespage import render_site, render_sites
from larbinpy.daemon.status import StatusSource, snapshot
from larbinpy.daemon.statuspage import metrics_text, render_html
from larbinpy.net.policy import NetworkPolicy

log = logging.getLogger("larbinpy.ports")

MAX_PRIORITY = 9  # each priority is a FIFO with its own files: keep their number small
TAG_MIN, TAG_MAX = -(2**31), 2**31 - 1  # larbin's tags are C ints
MAX_DEPTH = 1_000_000  # links followed: a chain deeper than this is unbounded in practice
DUPLICATE_HERE = "duplicate in this request"
DENIED_NETWORK = "deniedNetwork (an address allowNetworks does not allow)"


class BadSubmission(Exception):
    """A request the input port refuses: HTTP status and reason."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason
        self.headers = headers or {}


class Accepted(Protocol):
    """The input stage's answer to a submission."""

    accepted: int  # URLs queued
    rejected: list[tuple[str, str]]  # (URL as given, reason)


# the input stage's submit: (URLs, priority, depth or None for depthInSite, force) -> answer
SubmitUrls = Callable[[list[str | tuple[str, int]], int, int | None, bool], Accepted]


@dataclass
class Submission:
    """A parsed POST /urls."""

    urls: list[str | tuple[str, int]]  # a URL, or (URL, tag)
    priority: int = 0
    depth: int | None = None
    force: bool = False


def _int_param(value: Any, name: str, low: int, high: int | None = None) -> int:
    """An integer parameter within bounds, or a 400 that states them."""
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value := value.strip()):
        # int() strips less than str.strip() ('0\x1f' would raise); a huge number of digits
        # is out of any bound, and int() would refuse it (or take long) anyway
        value = int(value) if len(value) <= 19 else (-(10**19) if value[0] == "-" else 10**19)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadSubmission(400, f"{name} must be an integer")
    if value < low:
        raise BadSubmission(400, f"{name} must be at least {low}")
    if high is not None and value > high:
        raise BadSubmission(400, f"{name} must be at most {high}")
    return value


def _bool_param(value: Any, name: str) -> bool:
    """A boolean parameter (JSON true/false, or 0/1/true/false in a query), or a 400."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
        return value.lower() in ("1", "true", "yes")
    if value in (0, 1):
        return bool(value)
    raise BadSubmission(400, f"{name} must be true or false")


def parse_json_body(body: bytes) -> Submission:
    """`{"urls": [...], "priority": 0, "depth": 5, "force": false}`."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadSubmission(400, f"malformed JSON: {exc}") from None
    except RecursionError:  # the parser's own bound on nesting; a valid body nests 3 deep
        raise BadSubmission(400, "malformed JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise BadSubmission(400, "the body must be a JSON object")
    unknown = set(data) - {"urls", "priority", "depth", "force", "tag"}
    if unknown:
        raise BadSubmission(400, f"unknown fields: {', '.join(sorted(unknown))}")
    urls = data.get("urls")
    if not isinstance(urls, list):
        raise BadSubmission(400, 'urls must be a list of URLs (strings, or {"url": ..., "tag": N} '
                                  "objects)")
    tag = _tag(data.get("tag", 0))
    return Submission(
        [_json_url(u, tag) for u in urls],
        _int_param(data.get("priority", 0), "priority", 0, MAX_PRIORITY),
        _int_param(data["depth"], "depth", 0, MAX_DEPTH) if data.get("depth") is not None else None,
        _bool_param(data.get("force", False), "force"),
    )


def _tag(value: Any) -> int:
    """A URL tag, or a 400."""
    return _int_param(value, "tag", TAG_MIN, TAG_MAX)


def _json_url(item: Any, tag: int) -> str | tuple[str, int]:
    """One item of JSON `urls`: a string, or {"url": ..., "tag": ...}."""
    if isinstance(item, str):
        return (item, tag) if tag else item
    if isinstance(item, dict) and isinstance(item.get("url"), str) and set(item) <= {"url", "tag"}:
        return item["url"], _tag(item.get("tag", tag))
    raise BadSubmission(400, 'urls must be strings or {"url": ..., "tag": ...} objects')


_LINE_TAG = re.compile(r"^(\S+)\s+(-?\d{1,10})$")


def _text_url(line: str, tag: int) -> str | tuple[str, int]:
    """One line of a text body: `URL` or `URL TAG`."""
    m = _LINE_TAG.match(line)
    if m is not None:
        return m.group(1), _tag(m.group(2))
    return (line, tag) if tag else line


_LARBIN_HEADER = re.compile(r"^\s*(priority|depth|test|tag):", re.I)


def parse_text_body(body: bytes, query: dict[str, str]) -> Submission:
    """One URL per line; `?priority=&depth=&force=`; larbin's `priority:P depth:D test:T` line."""
    try:
        lines = body.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise BadSubmission(400, "the body must be UTF-8 text") from None
    params: dict[str, str] = dict(query)
    if lines and _LARBIN_HEADER.match(lines[0]):
        params.update(_larbin_header(lines.pop(0)))
    tag = _tag(params.get("tag", "0"))
    urls = [_text_url(line.strip(), tag) for line in lines
            if line.strip() and not line.lstrip().startswith("#")]
    return Submission(
        urls,
        _int_param(params.get("priority", "0"), "priority", 0, MAX_PRIORITY),
        _int_param(params["depth"], "depth", 0, MAX_DEPTH) if "depth" in params else None,
        _bool_param(params.get("force", params.get("test", "0")), "force"),
    )


def _larbin_header(line: str) -> dict[str, str]:
    """larbin's input header `priority:1 depth:3 test:0` (and `tag:N`) as parameters (test
    means force)."""
    out: dict[str, str] = {}
    for word in line.split():
        key, sep, value = word.partition(":")
        if not sep or key.lower() not in ("priority", "depth", "test", "tag"):
            raise BadSubmission(400, f"bad larbin header word {word!r}")
        out["force" if key.lower() == "test" else key.lower()] = value
    return out


_TOO_MANY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
             b"Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n")


class _Refuse(asyncio.Protocol):
    """A connection over MAX_CONNECTIONS: answered 503 and closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Say why, then hang up."""
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_TOO_MANY)
        transport.close()


class Ports:
    """The status and input listeners of one crawl."""

    IDLE_TIMEOUT = 15.0  # seconds to send a request head, from connect or the last response
    BODY_TIMEOUT = 30.0  # seconds to send a whole POST body
    MAX_CONNECTIONS = 64  # open connections per listener; a crawler's port has few clients

    def __init__(self, cfg: Config, source: StatusSource, submit: SubmitUrls,
                 changed: Callable[[], None],
                 normalize: Callable[[str], str | None] | None = None) -> None:
        self.cfg, self.source = cfg, source
        self.submit_urls = submit
        # the crawl's normaliser, to tell duplicates within one request (None: as given)
        self.normalize = normalize or (lambda url: url)
        self.policy = NetworkPolicy(cfg.allow_networks)  # the DNS stage's rule, from the config
        self.changed = changed  # told after each submission: the crawl may not be idle now
        self.runners: list[web.AppRunner] = []
        self.listeners: list[asyncio.Server] = []

    async def start(self) -> None:
        """Listen on httpPort and inputPort (one listener when equal; 0 disables)."""
        http, inp = self.cfg.http_port, self.cfg.input_port
        if http and http == inp:
            await self._serve(http, status=True, submit=True)
            return
        if http:
            await self._serve(http, status=True, submit=False)
        if inp:
            await self._serve(inp, status=False, submit=True)

    async def _serve(self, port: int, status: bool, submit: bool) -> None:
        """One aiohttp.web listener."""
        app = web.Application(client_max_size=self.cfg.input_max_body)
        if status:
            app.router.add_get("/", self.page)
            app.router.add_get("/status.json", self.status_json)
            app.router.add_get("/metrics", self.metrics)
            app.router.add_get("/sites", self.sites)
            app.router.add_get("/sites.json", self.sites_json)
            app.router.add_get("/sites/{host}", self.site)
        if submit:
            app.router.add_post("/urls", self.submit)
        # aiohttp arms its keep-alive timer at connect too: a silent or half-sent head is closed
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=self.IDLE_TIMEOUT)
        await runner.setup()
        self.runners.append(runner)
        server = runner.server
        assert server is not None

        def protocol() -> asyncio.Protocol:
            if len(server.connections) >= self.MAX_CONNECTIONS:
                return _Refuse()
            return server()

        try:
            self.listeners.append(await asyncio.get_running_loop().create_server(
                protocol, self.cfg.http_host, port, backlog=128))
        except OSError as exc:
            key = "httpport" if status else "inputport"
            raise self.cfg.error(key, f"cannot listen on {self.cfg.http_host}:{port}: "
                                      f"{exc.strerror or exc}") from None

    async def stop(self) -> None:
        """Close the listeners."""
        for listener in self.listeners:
            listener.close()
        self.listeners.clear()
        for runner in self.runners:
            await runner.cleanup()
        self.runners.clear()

    async def page(self, request: web.Request) -> web.Response:
        """GET /: the HTML status page."""
        return web.Response(text=render_html(snapshot(self.source)), content_type="text/html")

    async def status_json(self, request: web.Request) -> web.Response:
        """GET /status.json: the status page's figures, and the per-site view's lists
        (`sites_view`, as /sites.json)."""
        return web.json_response({**snapshot(self.source),
                                  "sites_view": self.source.sites_view()})

    async def metrics(self, request: web.Request) -> web.Response:
        """GET /metrics: Prometheus text format."""
        body, ctype = metrics_text(snapshot(self.source))
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def sites(self, request: web.Request) -> web.Response:
        """GET /sites: the busiest and the most failing sites."""
        return web.Response(text=render_sites(self.source.sites_view()),
                            content_type="text/html")

    async def sites_json(self, request: web.Request) -> web.Response:
        """GET /sites.json."""
        return web.json_response(self.source.sites_view())

    async def site(self, request: web.Request) -> web.Response:
        """GET /sites/HOST (HTML) or /sites/HOST.json: the sites of host[:port]; 404 with
        the reason when the crawl holds none."""
        host = request.match_info["host"]
        as_json = host.endswith(".json")
        host = host.removesuffix(".json") if as_json else host
        found = self.source.site_view(host)
        if not found:
            reason = (f"no site {host} in this crawl's site table (it holds the sites with "
                      "work and the most recently idle; the crawl log has every URL)")
            if as_json:
                return web.json_response({"error": reason}, status=404)
            return web.Response(text=reason + "\n", status=404)
        if as_json:
            return web.json_response(found)
        return web.Response(text=render_site(host, found), content_type="text/html")

    async def submit(self, request: web.Request) -> web.Response:
        """POST /urls: hand URLs to the input stage; 202 with what was accepted."""
        try:
            self._authorize(request)
            sub = await self._parse(request)
        except BadSubmission as exc:
            log.info("submission from %s refused (%d): %s", request.remote, exc.status,
                     exc.reason)
            response = web.json_response({"error": exc.reason}, status=exc.status,
                                         headers=exc.headers)
            if exc.status == 408:  # the rest of a late body may still come: not a request
                response.force_close()
            return response
        urls, refused = self._screen(sub.urls)
        result = self.submit_urls(urls, sub.priority, sub.depth, sub.force)
        self.changed()
        rejected = len(refused) + len(result.rejected)
        log.info("submission from %s: accepted %d, rejected %d (priority %d, depth %s%s)",
                 request.remote, result.accepted, rejected, sub.priority,
                 "depthInSite" if sub.depth is None else sub.depth,
                 ", force" if sub.force else "")
        return web.json_response(
            {"accepted": result.accepted,
             "rejected": [{"url": u, "reason": r} for u, r in refused + result.rejected]},
            status=202,
        )

    def _screen(self, urls: list[str | tuple[str, int]]
                ) -> tuple[list[str | tuple[str, int]], list[tuple[str, str]]]:
        """What the port can refuse itself, so every line gets an answer: a repeat within the
        request, and an IP-literal host on a network the policy denies (a name is resolved
        later, by the DNS stage, and refused there). Invalid URLs are the input stage's."""
        kept: list[str | tuple[str, int]] = []
        refused: list[tuple[str, str]] = []
        here: set[str] = set()
        for item in urls:
            raw = item if isinstance(item, str) else item[0]
            url = self.normalize(raw.strip())
            if url is None:
                kept.append(item)
            elif url in here:
                refused.append((raw, DUPLICATE_HERE))
            elif not self._network_ok(url):
                here.add(url)
                refused.append((raw, DENIED_NETWORK))
            else:
                here.add(url)
                kept.append(item)
        return kept, refused

    def _network_ok(self, url: str) -> bool:
        """False for a URL whose host is an IP address the network policy denies."""
        try:
            host = urlsplit(url).hostname or ""
            ip = ipaddress.ip_address(host) if host[-1:].isdigit() or ":" in host else None
        except ValueError:
            return True  # not an address: the DNS stage decides
        return ip is None or self.policy.allowed(str(ip))

    def _authorize(self, request: web.Request) -> None:
        """403 for a browser page's request; 401 unless the bearer token matches (if set)."""
        if "Origin" in request.headers:
            # Browsers add Origin to a page's cross-site POST; larbinpy submit and curl do not.
            # Without this, any web page the operator opens could feed the crawler URLs.
            raise BadSubmission(403, "requests from web pages (with an Origin header) are refused")
        token = self.cfg.input_token
        if token is None:
            return
        scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
        # the scheme is case-insensitive (RFC 9110 11.1); the token is compared in constant
        # time: the comparison must not tell how much of a guess was right
        right = hmac.compare_digest(given.strip().encode(), token.encode())
        if scheme.lower() != "bearer" or not right:
            raise BadSubmission(401, "missing or wrong bearer token",
                                {"WWW-Authenticate": 'Bearer realm="larbinpy input"'})

    async def _parse(self, request: web.Request) -> Submission:
        """Read (bounded) and parse the body by content type."""
        limit = self.cfg.input_max_body
        if request.content_length is not None and request.content_length > limit:
            raise BadSubmission(413, f"body over inputMaxBody ({limit} bytes)")
        try:
            async with asyncio.timeout(self.BODY_TIMEOUT):
                body = await self._read_capped(request, limit)
        except TimeoutError:
            raise BadSubmission(408, f"body not sent within {self.BODY_TIMEOUT:g} s") from None
        if request.content_type == "application/json":
            sub = parse_json_body(body)
        elif request.content_type in ("text/plain", "application/octet-stream", ""):
            sub = parse_text_body(body, dict(request.query))
        else:
            raise BadSubmission(415, f"unsupported content type {request.content_type}")
        if len(sub.urls) > self.cfg.input_max_urls:
            raise BadSubmission(413, f"more than inputMaxUrls ({self.cfg.input_max_urls}) URLs")
        return sub

    @staticmethod
    async def _read_capped(request: web.Request, limit: int) -> bytes:
        """The body, refusing (413) as soon as it goes over `limit` (chunked bodies too)."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > limit:
                raise BadSubmission(413, f"body over inputMaxBody ({limit} bytes)")
            chunks.append(chunk)
        return b"".join(chunks)
