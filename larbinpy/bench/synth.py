"""The synthetic web crawled by `larbinpy bench`: deterministic pages made on the fly.

Host i is `h{i}.bench.test`; its pages are `/` (page 0) and `/p1.html` ... `/p{pages-1}.html`.
A page is a pure function of (seed, host, page number, port), so nothing need be stored per
page: memory is O(hosts) for the Site list plus a bounded LRU of rendered bodies. The bench's
server (`serve`) renders a web of up to PRERENDER_BYTES before it is ready, and serves it from
memory. Page n always links to page n+1, so everything is reachable from `/`; the other links
are random, 90% on the same host (root-relative, relative and absolute forms mixed) and
`cross_host` absolute links to other hosts. Every host serves a robots.txt disallowing
/private/, which no page links to.

Every host also serves `/static/site.css` (the stylesheet dense pages link to), whose `url()`
names `/static/bg.png`; with `images` K, each page shows K images of its own,
`/img/p{n}-{k}.png` (IMAGE_BYTES each): what `requisites` fetches, and most of an archive's
bytes on real sites.

Two page shapes carry the same links (`PAGE_SHAPES`): `plain` pages are paragraphs of text with
one link each, a few hundred DOM nodes in 15 kB; `dense` pages are marked up like a forum or news
page (a head with an inline style and script, a navigation list, then posts of nested divs,
spans, buttons, icons and a table row, pretty-printed), about DENSE_NODES_PER_KB nodes (elements,
text and comments, as lexbor builds the tree) a kB: ~3,000 nodes in 20 kB, as real pages have.
The parse and the tag walks of the link extractor cost per node, so the two shapes show that
cost apart from the per-link one.

Hosts get loopback IPs base+1 ... base+250, then the next /24 (127.0.3.1 ...), up to `max_ips`
distinct IPs; beyond that hosts share IPs round-robin (host i uses IP number i % max_ips). A web
of one IP a host for 200,000 hosts reaches 127.3.34.x; past 1,000 IPs the server listens on one
socket for all of loopback (`demo/web.py`). With `--wait W` the server keeps a politeness record
of what it received (`bench/politeness.py`).

Run as a separate process for the benchmark (so serving CPU is not charged to the crawler):
    python -m larbinpy.bench.synth serve --hosts N --pages N --http-port P --dns-port Q
It prints `READY <http_port> <dns_port>` on stdout (and writes the same two numbers to
--ready-file if given) once listening, then serves until SIGTERM/SIGINT.
`python -m larbinpy.bench.synth urls --hosts N --pages N --http-port P` lists every URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import ipaddress
import os
import random
import signal
import sys
from collections.abc import Coroutine, Iterator
from typing import Any

from larbinpy.bench.politeness import CONTROL_HOST, PolitenessLog
from larbinpy.demo.dnsserver import DnsServer, start_dns_for
from larbinpy.demo.web import LocalWeb, Page, Site

DOMAIN = "bench.test"
ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n"
_ROBOTS_PAGE = Page(body=ROBOTS_TXT.encode(), content_type="text/plain")
IMAGE_BYTES = 8192
# (random bytes: an image's compress no better than a real PNG's or JPEG's in an archive)
_IMAGE = Page(body=b"\x89PNG\r\n\x1a\n" + random.Random(0).randbytes(IMAGE_BYTES - 8),
              content_type="image/png")
_STATIC = {
    "/static/site.css": Page(body=b"body { background: #fff url(bg.png) repeat-x }\n"
                                  b".post { margin: 0 0 1em }\n", content_type="text/css"),
    "/static/bg.png": _IMAGE,
}
_IPS_PER_BLOCK = 250  # .1 ... .250 of each /24: avoids .0 and .255, which look odd in logs
_LRU_SIZE = 4096
# A web up to this many bytes of pages is rendered before the server says it is ready, and
# served from memory: rendering a page on request costs the server about as much CPU as a
# page costs the crawler, so a crawler faster than that would wait for it, and sleeping and
# waking after every response costs the crawler kernel time it does not pay when busy.
PRERENDER_BYTES = 512 * 1024 * 1024
PAGE_SHAPES = ("plain", "dense")
DENSE_NODES_PER_KB = 140  # about; tests/test_bench.py holds the dense pages to it
_DENSE_NAV_LINKS = 6  # the first links of a dense page are its navigation bar
_DENSE_POST_BYTES = 1020  # about, so that a dense page is about page_bytes long
_WORDS = (
    "crawler spider queue fetch parse robots politeness host page link anchor frontier "
    "resolver socket buffer header body status redirect cache index archive document web "
    "network latency throughput event loop coroutine select poll timeout retry bandwidth "
    "server client request response encoding charset html text title paragraph section "
    "the a of and to in is for on with as by at from that this it be are was were or an"
).split()


def host_name(i: int) -> str:
    """Name of synthetic host number i."""
    return f"h{i}.{DOMAIN}"


def host_ip(i: int, base_ip: str = "127.0.2.0", max_ips: int = 1000) -> str:
    """Loopback IP of host i: base+1..base+250, then the next /24, wrapping at max_ips."""
    k = i % max_ips
    addr = ipaddress.IPv4Address(base_ip) + (k // _IPS_PER_BLOCK) * 256 + k % _IPS_PER_BLOCK + 1
    if not addr.is_loopback:
        raise ValueError(f"synthetic host {i} would get {addr}, outside 127.0.0.0/8")
    return str(addr)


def page_path(n: int) -> str:
    """Path of page n (page 0 is the root)."""
    return "/" if n == 0 else f"/p{n}.html"


def synth_urls(hosts: int, pages: int, port: int) -> Iterator[str]:
    """Every reachable page URL, page-major (so consecutive URLs hit different hosts)."""
    for n in range(pages):
        for h in range(hosts):
            yield f"http://{host_name(h)}:{port}{page_path(n)}"


@functools.lru_cache(maxsize=4)
def _filler(size: int) -> str:
    """A fixed block of pseudo-text that page bodies are sliced from."""
    rng = random.Random(0)
    words: list[str] = []
    total = 0
    while total < size:
        word = rng.choice(_WORDS)
        words.append(word)
        total += len(word) + 1
    return " ".join(words)


class SynthFactory:
    """page_factory for LocalWeb: renders synthetic pages on demand, with a bounded LRU."""

    def __init__(
        self,
        hosts: int,
        pages: int,
        *,
        port: int = 0,
        page_bytes: int = 15000,
        links: int = 40,
        cross_host: float = 0.10,
        seed: int = 1,
        shape: str = "plain",
        images: int = 0,
    ) -> None:
        if shape not in PAGE_SHAPES:
            raise ValueError(f"page shape {shape!r} is not one of {PAGE_SHAPES}")
        self.hosts, self.pages, self.shape, self.images = hosts, pages, shape, images
        self.page_bytes, self.links = page_bytes, links
        self.cross_host, self.seed = cross_host, seed
        self._port = port
        self._text = _filler(max(2 * page_bytes, 65536))
        self._render = functools.lru_cache(maxsize=_LRU_SIZE)(self._render_uncached)

    @property
    def port(self) -> int:
        """HTTP port written into absolute links."""
        return self._port

    @port.setter
    def port(self, value: int) -> None:
        """Change the port (e.g. once LocalWeb picked one); cached bodies become stale."""
        self._port = value
        self._render.cache_clear()

    def prerender(self) -> bool:
        """Render every page now and keep them all (False: the web is over PRERENDER_BYTES,
        its pages are rendered when asked)."""
        if self.hosts * self.pages * self.page_bytes > PRERENDER_BYTES:
            return False
        self._render = functools.lru_cache(maxsize=None)(self._render_uncached)
        for h in range(self.hosts):
            for n in range(self.pages):
                self._render(h, n)
        return True

    def __call__(self, host: str, path_qs: str) -> Page | None:
        """The page for host + path, or None (404) if it is not part of the synthetic web."""
        h, n = self.host_index(host), self.page_number(path_qs)
        if h is None:
            return None
        if n is None:
            return _STATIC.get(path_qs) or (_IMAGE if self._is_image(path_qs) else None)
        return self._render(h, n)

    def _is_image(self, path_qs: str) -> bool:
        """Whether the path is one of the pages' images, `/img/p{n}-{k}.png`."""
        if not (path_qs.startswith("/img/p") and path_qs.endswith(".png")):
            return False
        n, _, k = path_qs[6:-4].partition("-")
        return (n.isdigit() and k.isdigit() and int(n) < self.pages
                and int(k) < self.images)

    def _images(self, n: int) -> str:
        """The `<img>` tags of page n (none unless `images`)."""
        return "".join(f'<img src="/img/p{n}-{k}.png" alt="">\n' for k in range(self.images))

    def host_index(self, host: str) -> int | None:
        """i for `h{i}.bench.test` within range, else None."""
        label, _, domain = host.partition(".")
        digits = label[1:]
        if domain != DOMAIN or label[:1] != "h" or not digits.isdigit():
            return None
        i = int(digits)
        return i if str(i) == digits and i < self.hosts else None

    def page_number(self, path_qs: str) -> int | None:
        """n for `/` or `/p{n}.html` within range, else None."""
        if path_qs == "/":
            return 0
        if not (path_qs.startswith("/p") and path_qs.endswith(".html")):
            return None
        digits = path_qs[2:-5]
        if not digits.isdigit() or str(int(digits)) != digits:
            return None
        n = int(digits)
        return n if 0 < n < self.pages else None

    def url(self, h: int, n: int) -> str:
        """Absolute URL of page n on host h."""
        return f"http://{host_name(h)}:{self._port}{page_path(n)}"

    def links_of(self, h: int, n: int) -> list[str]:
        """The hrefs of page n on host h, exactly as written in its HTML."""
        rng = random.Random(f"{self.seed}:{h}:{n}")
        hrefs = [page_path(n + 1)] if n + 1 < self.pages else []
        while len(hrefs) < self.links:
            hrefs.append(self._random_href(rng, h))
        return hrefs

    def _random_href(self, rng: random.Random, h: int) -> str:
        """One random link: another host's page, or this host's in one of three forms."""
        m = rng.randrange(self.pages)
        if self.hosts > 1 and rng.random() < self.cross_host:
            other = (h + 1 + rng.randrange(self.hosts - 1)) % self.hosts
            return self.url(other, m)
        form = rng.randrange(3)
        if form == 0:
            return page_path(m)
        if form == 1:
            return "./" if m == 0 else f"p{m}.html"  # relative; every page lives at the root
        return self.url(h, m)

    def _render_uncached(self, h: int, n: int) -> Page:
        """Build the HTML of page n on host h (about page_bytes long) in the factory's shape."""
        if self.shape == "dense":
            return Page(body=self._render_dense(h, n).encode())
        return self._render_plain(h, n)

    def _render_plain(self, h: int, n: int) -> Page:
        """A plain page: paragraphs of text, each but the last ending in one link."""
        rng = random.Random(f"{self.seed}:{h}:{n}:text")
        hrefs = self.links_of(h, n)
        title = f"{host_name(h)} page {n}"
        chunk = max(0, (self.page_bytes - 200 - 40 * len(hrefs)) // (len(hrefs) + 1))
        parts = [
            f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"</head>\n<body><h1>{title}</h1>\n"
        ]
        for i, href in enumerate([*hrefs, None]):
            start = self._text.find(" ", rng.randrange(len(self._text) - 2 * chunk - 1)) + 1
            parts.append(f"<p>{self._text[start:start + chunk]}")
            if href is not None:
                parts.append(f' <a href="{href}">link {i}</a>')
            parts.append("</p>\n")
        parts.append(f"{self._images(n)}</body></html>\n")
        return Page(body="".join(parts).encode())

    def _render_dense(self, h: int, n: int) -> str:
        """A dense page: head, navigation bar (the first links), then as many posts as make
        page_bytes, the other links spread over them."""
        rng = random.Random(f"{self.seed}:{h}:{n}:dense")
        hrefs = self.links_of(h, n)
        nav, rest = hrefs[:_DENSE_NAV_LINKS], hrefs[_DENSE_NAV_LINKS:]
        parts = [_dense_head(f"{host_name(h)} page {n}"), _dense_nav(nav)]
        size = sum(map(len, parts)) + len(_DENSE_FOOT)
        posts = max(1, (self.page_bytes - size) // _DENSE_POST_BYTES)
        for i in range(posts):
            parts.append(_dense_post(rng, i, rest[i::posts]))
        parts.append(self._images(n))
        parts.append(_DENSE_FOOT)
        return "".join(parts)


_DENSE_STYLE = (
    "body{margin:0;font:14px/1.4 sans-serif;color:#222}.post{border-bottom:1px solid #ddd;"
    "padding:8px 12px}.hd{display:flex;gap:6px;align-items:center}.av .ic{width:24px;"
    "height:24px;border-radius:50%}.bo p{margin:4px 0}.ac{list-style:none;display:flex;"
    "gap:8px;padding:0}.ac button{border:0;background:none;cursor:pointer}.st td{padding:0 4px;"
    "font-size:11px;color:#777}.t{background:#eef;border-radius:3px;padding:0 3px}"
    "nav ul{display:flex;gap:12px;list-style:none}footer{font-size:12px;color:#999}"
)
# A script whose text holds `<` and `</` that are not tags, as minified scripts do.
_DENSE_SCRIPT = (
    "(function(w,d){var q=[],n=0;function t(e){for(var i=0;i<e.length&&n<50;i++){q.push(e[i]);"
    "n++}}w.addEventListener('load',function(){var b=d.querySelectorAll('.ac button');"
    "for(var i=0;i<b.length;i++){b[i].onclick=function(e){t([this.dataset.a,Date.now()]);"
    "if(q.length>10&&navigator.sendBeacon){navigator.sendBeacon('/beacon',JSON.stringify(q));"
    "q=[]}}}var s=d.createElement('div');s.innerHTML='<span class=\"x\"></span>';})})"
    "(window,document);\n"
)
_DENSE_FOOT = (
    '<footer class="ft">\n<p>&copy; 2026 <b>bench</b> &middot; <span>terms</span> '
    "&middot; <span>privacy</span></p>\n<!-- rendered by synth -->\n</footer>\n"
    "</main>\n</body></html>\n"
)


def _dense_head(title: str) -> str:
    """Head of a dense page: metas, a stylesheet link, an inline style and script."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width,initial-scale=1">\n'
        f"<title>{title}</title>\n"
        '<link rel="stylesheet" href="/static/site.css">\n'
        f"<style>{_DENSE_STYLE}</style>\n<script>{_DENSE_SCRIPT}</script>\n"
        '</head>\n<body class="forum">\n<main id="main">\n'
    )


def _dense_nav(hrefs: list[str]) -> str:
    """The navigation bar: one list item per link."""
    items = "".join(f'<li class="nv"><a href="{href}">{_WORDS[i]}</a></li>\n'
                    for i, href in enumerate(hrefs))
    return f'<nav class="top">\n<ul>\n{items}</ul>\n</nav>\n'


def _dense_post(rng: random.Random, i: int, hrefs: list[str]) -> str:
    """One post: header, body text with inline markup (and its links), actions, a stats row."""
    def w() -> str:
        return rng.choice(_WORDS)

    day = rng.randrange(1, 29)
    links = " ".join(f'<a href="{href}">{w()}</a>' for href in hrefs)
    cells = "".join(f"\n<td>{rng.randrange(100)}</td>" for _ in range(32))
    return (
        f'<article class="post" id="p{i}" data-id="{i}">\n'
        f'<div class="hd">\n<span class="av"><i class="ic u"></i></span>\n<b>{w()}</b>\n'
        f'<time datetime="2026-11-{day:02}">{day} Nov</time>\n'
        f'<span class="bd">{rng.randrange(99)}</span>\n</div>\n'
        f'<div class="bo">\n<p>{w()} <b>{w()}</b> {w()} <em>{w()}</em> '
        f'<span class="t">{w()}</span> {w()}<br><code>{w()}</code> {w()} <i>{w()}</i> '
        f'<span class="m">{w()}</span> {links}</p>\n</div>\n'
        f'<ul class="ac">\n<li><button data-a="up"><i class="ic up"></i>'
        f"<span>{rng.randrange(50)}</span></button></li>\n"
        f'<li><button data-a="re"><i class="ic re"></i>reply</button></li>\n'
        f'<li><button data-a="sh"><i class="ic sh"></i></button></li>\n</ul>\n'
        f'<table class="st"><tr>{cells}\n</tr></table>\n</article>\n'
    )


def synth_sites(
    hosts: int,
    pages: int,
    *,
    base_ip: str = "127.0.2.0",
    page_bytes: int = 15000,
    links: int = 40,
    cross_host: float = 0.10,
    seed: int = 1,
    port: int = 0,
    max_ips: int = 1000,
    shape: str = "plain",
    images: int = 0,
) -> tuple[list[Site], SynthFactory]:
    """Sites (with robots.txt) and the page factory of a synthetic web; see module docstring."""
    sites = [
        Site(host_name(i), host_ip(i, base_ip, max_ips), {"/robots.txt": _ROBOTS_PAGE})
        for i in range(hosts)
    ]
    factory = SynthFactory(hosts, pages, port=port, page_bytes=page_bytes, links=links,
                           cross_host=cross_host, seed=seed, shape=shape, images=images)
    return sites, factory


async def start_synth(
    hosts: int, pages: int, *, http_port: int = 0, dns_port: int = 0, record: bool = True,
    politeness: PolitenessLog | None = None, **kwargs: Any,
) -> tuple[LocalWeb, DnsServer, SynthFactory]:
    """Start LocalWeb + DnsServer for a synthetic web (kwargs go to synth_sites); with
    `politeness`, the server keeps that record and answers its control host."""
    sites, factory = synth_sites(hosts, pages, port=http_port, **kwargs)
    if politeness is None:
        web = LocalWeb(sites, port=http_port, page_factory=factory, record=record)
    else:
        sites.append(Site(CONTROL_HOST, "127.0.0.1"))
        web = LocalWeb(sites, port=http_port, page_factory=politeness.control(factory),
                       record=record, on_request=politeness.observe)
    await web.start()
    factory.port = web.port
    return web, await start_dns_for(web, dns_port), factory


def _write_ready(path: str, text: str) -> None:
    """Write the ready file atomically, so a poller never reads half of it."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


async def _serve(args: argparse.Namespace) -> None:
    """Serve the synthetic web until SIGTERM/SIGINT."""
    web, dns, factory = await start_synth(
        args.hosts, args.pages, http_port=args.http_port, dns_port=args.dns_port, record=False,
        page_bytes=args.page_bytes, links=args.links, cross_host=args.cross_host,
        seed=args.seed, max_ips=args.max_ips, shape=args.page_shape, images=args.images,
        politeness=PolitenessLog(args.wait) if args.wait > 0 else None,
    )
    factory.prerender()  # (after the port is known: absolute links carry it)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if args.ready_file:
            _write_ready(args.ready_file, f"{web.port} {dns.port}\n")
        print(f"READY {web.port} {dns.port}", flush=True)
        await stop.wait()
    finally:
        await dns.stop()
        await web.stop()


def _run(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine on uvloop when available (cheaper serving), else asyncio."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


def _parser() -> argparse.ArgumentParser:
    """Command line of `python -m larbinpy.bench.synth`."""
    p = argparse.ArgumentParser(prog="python -m larbinpy.bench.synth", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="serve the synthetic web (DNS + HTTP) until SIGTERM")
    urls = sub.add_parser("urls", help="print every page URL")
    for sp in (serve, urls):
        sp.add_argument("--hosts", type=int, default=100)
        sp.add_argument("--pages", type=int, default=100, help="pages per host")
        sp.add_argument("--http-port", type=int, default=0)
    serve.add_argument("--dns-port", type=int, default=0)
    serve.add_argument("--ready-file", default=None)
    serve.add_argument("--page-bytes", type=int, default=15000)
    serve.add_argument("--links", type=int, default=40)
    serve.add_argument("--page-shape", choices=PAGE_SHAPES, default="plain")
    serve.add_argument("--cross-host", type=float, default=0.10)
    serve.add_argument("--seed", type=int, default=1)
    serve.add_argument("--max-ips", type=int, default=1000)
    serve.add_argument("--images", type=int, default=0, help="images on each page")
    serve.add_argument("--wait", type=float, default=0.0,
                       help="keep a politeness record of the requests each IP receives, a gap "
                            "being two starts closer than this many seconds (bench/politeness.py)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.cmd == "urls":
        with contextlib.suppress(BrokenPipeError):
            for url in synth_urls(args.hosts, args.pages, args.http_port):
                sys.stdout.write(url + "\n")
        return 0
    _run(_serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
