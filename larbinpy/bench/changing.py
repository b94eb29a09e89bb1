"""The changing web of `larbinpy bench --recrawl`: pages that change at known Poisson rates.

Each host is one *kind* of server (`KINDS`): honest validators (`etag`: ETag and Last-Modified;
`lm`: Last-Modified only), none (`none`), or validators that lie (`lm-now`: Last-Modified is
always the time of the answer; `etag-churn`: a new ETag on every answer; `false-304`: a 304 to
every conditional request, changed or not; `lm-coarse`: Last-Modified has second resolution and
304 is sent when it matches, while pages change several times a second). Host j of kind k is
`{k}-{j}.changing.test`; its pages are `/` (linking every other page) and `/p1.html` ...

A page changes at the times of a Poisson process of its own rate, drawn from `RATE_MIXTURE`
(static pages to several changes a second), all seeded: the same seed and start time give the
same change times. A page's body carries its version (the number of changes so far), so every
change is a different payload. Change times are made lazily as the clock reaches them.

The server records every answer (`Answer`: times, page, status, the version current when it
answered, whether the request carried If-None-Match / If-Modified-Since), and tells it with
every page's change times: `GET /.changing/log` on any host, or the `--log` file written when it
stops. `POST /.changing/bump?path=/p1.html` changes a page now (for tests). robots.txt keeps
crawlers out of `/.changing/`.

As a child process (`ChangingServer` in `harness.py` style):
    python -m larbinpy.bench.changing serve --hosts-per-kind 2 --pages 40 --seed 1 \
        --ready-file F --log L [--lifetime SECONDS]
prints `READY <http_port> <dns_port>` and writes them to --ready-file once listening, then
serves until SIGTERM/SIGINT or the end of --lifetime, and writes --log on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import email.utils
import hashlib
import json
import math
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from larbinpy.bench.harness import ChildServer
from larbinpy.bench.synth import host_ip
from larbinpy.demo.dnsserver import DnsServer, start_dns_for
from larbinpy.demo.web import LocalWeb, Site

DOMAIN = "changing.test"
KINDS = ("etag", "lm", "none", "lm-now", "etag-churn", "false-304", "lm-coarse")
HONEST_VALIDATORS = ("etag", "lm")  # the kinds whose validators a crawler should use
CONTROL = "/.changing/"
ROBOTS_TXT = f"User-agent: *\nDisallow: {CONTROL}\n"
IP_BASE = "127.0.4.0"  # hosts get 127.0.4.1, .2 ...: one IP each, apart from the bench web's
BIRTH = 1000.0  # version 0 was made this many seconds before the server started
# (share of pages, lowest rate, highest rate) in changes a second: log-uniform within a band.
# Uniform revisiting at 4 fetches a second a host of 40 pages reaches about 0.93 of the optimum.
RATE_MIXTURE: tuple[tuple[float, float, float], ...] = (
    (0.15, 0.0, 0.0),  # static
    (0.25, 1 / 600, 1 / 60),
    (0.35, 1 / 60, 1 / 5),
    (0.25, 1 / 5, 5.0),  # several changes a second at the top
)
FILLER_WORDS = ("fresh stale copy version change revisit crawl page site budget rate "
                "interval poisson lambda schedule validator etag modified").split()


def draw_rate(rng: random.Random, mixture: tuple[tuple[float, float, float], ...]
              = RATE_MIXTURE) -> float:
    """One page's change rate (1/s) from the mixture."""
    u = rng.random() * sum(share for share, _, _ in mixture)
    for share, lo, hi in mixture:
        if u < share:
            return lo if lo <= 0 or hi <= lo else math.exp(rng.uniform(math.log(lo),
                                                                        math.log(hi)))
        u -= share
    return mixture[-1][2]


def http_date(t: float) -> str:
    """An HTTP date (second resolution: the fraction is dropped)."""
    return email.utils.formatdate(math.floor(t), usegmt=True)


def parse_http_date(text: str | None) -> float | None:
    """Unix time of an HTTP date, or None if absent or unreadable."""
    if not text:
        return None
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


@dataclass
class ChangingPage:
    """One page: its kind of server, its rate, and its change times (made lazily)."""

    host: str
    path: str
    kind: str
    rate: float
    t0: float  # the server's start (Unix time)
    seed: str
    changes: list[float] = field(default_factory=list)  # sorted Unix times
    _rng: random.Random = field(init=False, repr=False)
    _horizon: float = field(init=False, repr=False)  # changes are known up to this time

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._horizon = self.t0

    @property
    def url_path(self) -> str:
        """host + path, the key of the page in logs."""
        return f"{self.host}{self.path}"

    def _extend(self, until: float) -> None:
        """Draw the Poisson process's changes up to `until`."""
        if self.rate <= 0:
            self._horizon = max(self._horizon, until)
            return
        while self._horizon < until:  # the last change drawn may lie beyond `until`
            self._horizon += self._rng.expovariate(self.rate)
            bisect.insort(self.changes, self._horizon)

    def changes_until(self, t: float) -> list[float]:
        """Change times up to `t`."""
        self._extend(t)
        return self.changes[:bisect.bisect_right(self.changes, t)]

    def version(self, t: float) -> int:
        """Number of changes up to `t` (the version current at `t`)."""
        self._extend(t)
        return bisect.bisect_right(self.changes, t)

    def changed_at(self, version: int) -> float:
        """When `version` came into being (version 0: BIRTH seconds before start)."""
        return self.changes[version - 1] if version > 0 else self.t0 - BIRTH

    def same_second(self, version: int) -> int:
        """How many versions came into being in the second `version` did (up to it)."""
        second = math.floor(self.changed_at(version))
        n = 1
        while version - n >= 0 and math.floor(self.changed_at(version - n)) == second:
            n += 1
        return n

    def bump(self, t: float) -> int:
        """Change the page at `t` (a test's extra change); return the new version."""
        self._extend(t)
        bisect.insort(self.changes, t)
        return self.version(t)

    def etag(self, version: int) -> str:
        """The honest ETag of a version."""
        return '"' + hashlib.sha1(f"{self.url_path}:{version}".encode()).hexdigest()[:16] + '"'


@dataclass(slots=True)
class Answer:
    """One answer as the server gave it (Unix times)."""

    start: float
    end: float
    host: str
    path: str
    status: int
    version: int  # the page's version when answered (-1: robots.txt)
    inm: bool  # the request carried If-None-Match
    ims: bool  # the request carried If-Modified-Since

    def as_list(self) -> list[Any]:
        """Compact JSON form."""
        return [round(self.start, 6), round(self.end, 6), self.host, self.path, self.status,
                self.version, int(self.inm), int(self.ims)]


def host_name(kind: str, j: int) -> str:
    """Name of host j of a kind."""
    return f"{kind}-{j}.{DOMAIN}"


def page_path(n: int) -> str:
    """Path of page n (page 0 is the root)."""
    return "/" if n == 0 else f"/p{n}.html"


def make_pages(kinds: tuple[str, ...], hosts_per_kind: int, pages: int, seed: int, t0: float,
               fixed_rate: float | None = None) -> dict[tuple[str, str], ChangingPage]:
    """Every page of the web, keyed by (host, path); rates drawn from the seed (or all
    `fixed_rate`)."""
    out: dict[tuple[str, str], ChangingPage] = {}
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"unknown kind of host {kind!r}; kinds: {', '.join(KINDS)}")
        for j in range(hosts_per_kind):
            host = host_name(kind, j)
            for n in range(pages):
                key = f"{seed}:{host}:{n}"
                rate = fixed_rate if fixed_rate is not None else draw_rate(random.Random(key))
                out[(host, page_path(n))] = ChangingPage(host, page_path(n), kind, rate, t0,
                                                         key + ":changes")
    return out


class ChangingWeb(LocalWeb):
    """LocalWeb serving ChangingPages with each kind's validators, recording every answer."""

    def __init__(self, kinds: tuple[str, ...] = KINDS, hosts_per_kind: int = 2,
                 pages: int = 40, seed: int = 1, page_bytes: int = 2000,
                 fixed_rate: float | None = None, t0: float | None = None,
                 answers: bool = True) -> None:
        hosts = [host_name(k, j) for k in kinds for j in range(hosts_per_kind)]
        # one loopback IP per host (127.0.4.x...), so per-IP politeness never joins two hosts
        super().__init__([Site(h, host_ip(i, IP_BASE)) for i, h in enumerate(hosts)],
                         record=False)
        self.t0 = time.time() if t0 is None else t0
        self.seed, self.page_bytes, self.npages = seed, page_bytes, pages
        self.pages = make_pages(kinds, hosts_per_kind, pages, seed, self.t0, fixed_rate)
        self.answers: list[Answer] = []
        self.keep_answers = answers  # off for a soak: a long run's answers would fill memory
        self._churn = 0  # etag-churn's counter: a new ETag every answer

    def page_urls(self) -> list[str]:
        """Absolute URL of every page."""
        return [self.url(h, p) for h, p in self.pages]

    def roots(self) -> list[str]:
        """Absolute URL of every host's root (the seeds)."""
        return [self.url(s, "/") for s in self.sites]

    def log(self, until: float | None = None) -> dict[str, Any]:
        """The truth so far: every page's kind, rate and change times; every answer."""
        until = time.time() if until is None else until
        return {
            "t0": self.t0, "until": until, "port": self.port, "seed": self.seed,
            "pages": [{"url": self.url(p.host, p.path), "host": p.host, "path": p.path,
                       "kind": p.kind, "rate": p.rate, "changes": p.changes_until(until)}
                      for p in self.pages.values()],
            "answers": [a.as_list() for a in self.answers],
        }

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """Serve a page, robots.txt, or a control request."""
        start = time.time()
        host = request.host.rsplit(":", 1)[0].lower().rstrip(".")
        path = request.raw_path
        if path.startswith(CONTROL):
            return self._control(request, host, path)
        inm = request.headers.get("If-None-Match")
        ims = request.headers.get("If-Modified-Since")
        if path == "/robots.txt" and host in self.sites:
            resp = web.Response(text=ROBOTS_TXT, content_type="text/plain")
            version = -1
        elif (page := self.pages.get((host, path))) is not None:
            resp, version = self._answer(page, start, inm, ims)
        else:
            resp, version = web.Response(status=404, text="not found"), -1
        await resp.prepare(request)
        await resp.write_eof()
        if self.keep_answers:
            self.answers.append(Answer(start, time.time(), host, path, resp.status, version,
                                       inm is not None, ims is not None))
        return resp

    def _control(self, request: web.BaseRequest, host: str, path: str) -> web.Response:
        """`GET /.changing/log` (the truth so far), `POST /.changing/bump?path=P`."""
        if path == CONTROL + "log":
            return web.json_response(self.log())
        if path.startswith(CONTROL + "bump") and request.method == "POST":
            page = self.pages.get((host, request.query.get("path", "")))
            if page is None:
                return web.json_response({"error": "no such page"}, status=404)
            return web.json_response({"version": page.bump(time.time())})
        return web.json_response({"error": "unknown control request"}, status=404)

    def _answer(self, page: ChangingPage, now: float, inm: str | None, ims: str | None
                ) -> tuple[web.Response, int]:
        """The answer of `page`'s kind of server to a (perhaps conditional) GET."""
        v = page.version(now)
        headers = self._validators(page, v, now)
        if self._not_modified(page, v, headers, inm, ims):
            if page.kind == "false-304":  # a stale cache's answer: the client's validators
                headers = {k: val for k, val in (("ETag", inm), ("Last-Modified", ims)) if val}
            return web.Response(status=304, headers=headers), v
        return web.Response(body=self.body(page, v), content_type="text/html",
                            headers=headers), v

    def _validators(self, page: ChangingPage, v: int, now: float) -> dict[str, str]:
        """The ETag / Last-Modified headers that page's kind sends for version v."""
        kind = page.kind
        if kind in ("etag", "false-304"):
            return {"ETag": page.etag(v), "Last-Modified": http_date(page.changed_at(v))}
        if kind in ("lm", "lm-coarse"):
            return {"Last-Modified": http_date(page.changed_at(v))}
        if kind == "lm-now":
            return {"Last-Modified": http_date(now)}
        if kind == "etag-churn":
            self._churn += 1
            return {"ETag": f'"churn-{self._churn}"'}
        return {}

    @staticmethod
    def _not_modified(page: ChangingPage, v: int, headers: dict[str, str], inm: str | None,
                      ims: str | None) -> bool:
        """Whether this kind answers 304 (If-None-Match first, as RFC 9110 says)."""
        kind = page.kind
        if kind == "none" or (inm is None and ims is None):
            return False
        if kind == "false-304":
            return True  # the lie: changed or not
        if inm is not None and "ETag" in headers:
            tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
            return headers["ETag"] in tags or "*" in tags
        if ims is None or "Last-Modified" not in headers or kind == "lm-now":
            return False  # lm-now's Last-Modified is always later than any copy
        since = parse_http_date(ims)
        if since is None or since != math.floor(page.changed_at(v)):
            return False
        # An honest server cannot tell two versions of one second apart by Last-Modified:
        # it says 304 only when a single version was made in that second. lm-coarse does not
        # care (the lie of second resolution).
        return kind == "lm-coarse" or page.same_second(v) == 1

    def body(self, page: ChangingPage, version: int) -> bytes:
        """The page's HTML at `version` (the root links every page of its host)."""
        rng = random.Random(f"{page.seed}:{version}")
        links = ""
        if page.path == "/":
            links = "".join(f'<a href="{page_path(n)}">page {n}</a>\n'
                            for n in range(1, self.npages))
        words, size = [], 0
        while size < self.page_bytes:
            words.append(rng.choice(FILLER_WORDS))
            size += len(words[-1]) + 1
        title = f"{page.host}{page.path} version {version}"
        return (f"<!DOCTYPE html>\n<html><head><title>{title}</title></head><body>\n"
                f'<h1>{title}</h1>\n<p class="version">{version}</p>\n{links}'
                f"<p>{' '.join(words)}</p>\n</body></html>\n").encode()


def version_of(body: bytes) -> int | None:
    """The version a page body carries (None if it is not a changing page)."""
    start = body.find(b'<p class="version">')
    if start < 0:
        return None
    start += len(b'<p class="version">')
    end = body.find(b"</p>", start)
    digits = body[start:end]
    return int(digits) if digits.isdigit() else None


class ChangingServer(ChildServer):
    """`python -m larbinpy.bench.changing serve` in a child process; `truth()` once stopped."""

    def __init__(self, workdir: Path, *, kinds: tuple[str, ...] = KINDS,
                 hosts_per_kind: int = 2, pages: int = 40, seed: int = 1,
                 page_bytes: int = 2000, rate: float | None = None,
                 lifetime: float = 3600.0, answers: bool = True) -> None:
        self.log_file = workdir / "changing-web.json"
        args = ["--kinds", ",".join(kinds), "--hosts-per-kind", str(hosts_per_kind),
                "--pages", str(pages), "--seed", str(seed), "--page-bytes", str(page_bytes),
                "--lifetime", str(lifetime), "--log", str(self.log_file)]
        if rate is not None:
            args += ["--rate", str(rate)]
        if not answers:
            args.append("--no-answers")
        super().__init__("larbinpy.bench.changing", args, workdir, "changing web")
        self.kinds, self.hosts_per_kind, self.pages = kinds, hosts_per_kind, pages

    def hosts(self) -> list[str]:
        """Every host name, in the order of their IPs."""
        return [host_name(k, j) for k in self.kinds for j in range(self.hosts_per_kind)]

    def url(self, host: str, path: str = "/") -> str:
        """Absolute URL on this server."""
        return f"http://{host}:{self.http_port}{path}"

    def ip(self, host: str) -> str:
        """The loopback IP a host lives on."""
        return host_ip(self.hosts().index(host), IP_BASE)

    def control(self, host: str, what: str, method: str = "GET") -> Any:
        """A control request (`log`, `bump?path=/p1.html`) on `host`: its JSON answer."""
        import urllib.request

        req = urllib.request.Request(f"http://{self.ip(host)}:{self.http_port}{CONTROL}{what}",
                                     method=method, headers={"Host": host})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)

    def truth(self) -> dict[str, Any]:
        """The server's log written when it stopped (stops it first)."""
        self.stop()
        return dict(json.loads(self.log_file.read_text()))


# --- the child process -------------------------------------------------------------------


def _write_atomically(path: str, text: str) -> None:
    """Write a file so that a poller never reads half of it."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


async def serve(args: argparse.Namespace) -> None:
    """Serve until SIGTERM/SIGINT or the end of the lifetime; write the log on the way out."""
    kinds = tuple(args.kinds.split(",")) if args.kinds else KINDS
    web_ = ChangingWeb(kinds, args.hosts_per_kind, args.pages, args.seed, args.page_bytes,
                       args.rate, answers=not args.no_answers)
    await web_.start()
    await serve_until_stopped(web_, args)


async def serve_until_stopped(web_: Any, args: argparse.Namespace) -> None:
    """Serve a started web with its DNS server until SIGTERM/SIGINT or `args.lifetime`, saying
    READY (and writing `args.ready_file`); write its log (`args.log`) on the way out."""
    dns: DnsServer = await start_dns_for(web_)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if args.ready_file:
            _write_atomically(args.ready_file, f"{web_.port} {dns.port}\n")
        print(f"READY {web_.port} {dns.port}", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.lifetime)
    finally:
        until = time.time()
        await dns.stop()
        await web_.stop()
        if args.log:
            _write_atomically(args.log, json.dumps(web_.log(until)))


def parser() -> argparse.ArgumentParser:
    """Command line of `python -m larbinpy.bench.changing`."""
    p = argparse.ArgumentParser(prog="python -m larbinpy.bench.changing", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="serve the changing web (DNS + HTTP)")
    s.add_argument("--kinds", default="", help=f"comma-separated kinds [{','.join(KINDS)}]")
    s.add_argument("--hosts-per-kind", type=int, default=2)
    s.add_argument("--pages", type=int, default=40, help="pages per host, the root included")
    s.add_argument("--page-bytes", type=int, default=2000)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--rate", type=float, default=None,
                   help="every page changes at this rate (1/s) instead of the mixture")
    s.add_argument("--lifetime", type=float, default=3600.0,
                   help="stop by itself after this many seconds [3600]")
    s.add_argument("--no-answers", action="store_true",
                   help="do not record every answer (a soak: its log would grow all the run)")
    s.add_argument("--ready-file", default=None)
    s.add_argument("--log", default=None, help="write the truth (JSON) here when stopping")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parser().parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args))
    else:
        uvloop.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
