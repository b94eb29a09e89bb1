"""The small demo web that `make run` crawls, and the runner that serves it around a command.

    python -m larbinpy.demo.demoweb [--dns-port 15353] [--http-port 18080]
                                    [--crawler-conf larbin.conf] -- CMD ARGS...
    python -m larbinpy.demo.demoweb --serve-only

Four hosts on three loopback IPs (blog and docs share 127.0.1.2, to show per-IP politeness),
about 60 pages with navigation and cross-host links, robots.txt variants (a Disallow, none at
all, a Crawl-delay), redirects, links to files with forbidden extensions, one 404 link and one
link to a host that is not in DNS. Everything is reachable from DEMO_START_URL within depth 3.
The runner starts the DNS and HTTP servers, runs CMD as a child (in its own process group, with
SIGINT/SIGTERM forwarded once), stops the servers and exits with the child's exit code.
With `--crawler-conf`, the crawler's httpPort and inputPort that are busy on this machine (another
daemon on 8081, say) are moved to free ports, passed to CMD as `--http-port N --input-port N`,
so that `make run` works wherever it runs. A busy demo port (18080, 15353: larbin.conf names
them) is said in one line, not a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import html
import os
import re
import signal
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urldefrag, urljoin

from larbinpy.demo.web import LocalWeb, Page, Site, redirect
from larbinpy.runtime import missing_extra

if TYPE_CHECKING:
    from larbinpy.demo.dnsserver import DnsServer

DEMO_DNS_PORT = 15353
DEMO_HTTP_PORT = 18080
DOMAIN = "larbin-demo.test"
WWW, BLOG, DOCS, SHOP = (f"{n}.{DOMAIN}" for n in ("www", "blog", "docs", "shop"))
DEMO_NODNS_HOST = f"gone.{DOMAIN}"  # linked from www, deliberately absent from DNS
DEMO_MISSING_PATH = "/this-page-does-not-exist.html"  # linked from www, deliberately 404
DEMO_IPS = {WWW: "127.0.1.1", BLOG: "127.0.1.2", DOCS: "127.0.1.2", SHOP: "127.0.1.3"}
DEMO_START_URL = f"http://{WWW}:{DEMO_HTTP_PORT}/"

# Small but real file bodies, so a crawler that wrongly fetches them gets a plausible answer.
_FILES = {
    ".jpg": ("image/jpeg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00demo\xff\xd9"),
    ".png": ("image/png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDRdemo"),
    ".gif": ("image/gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"),
    ".zip": ("application/zip", b"PK\x05\x06" + b"\x00" * 18),
    ".gz": ("application/gzip", b"\x1f\x8b\x08\x00demo"),
    ".pdf": ("application/pdf", b"%PDF-1.4\n%demo\n%%EOF\n"),
    ".exe": ("application/octet-stream", b"MZdemo"),
}

_LOREM = (
    "Larbin was written to fetch a very large number of pages from a single process, "
    "keeping thousands of connections open with non-blocking sockets.",
    "Politeness matters: a crawler should never open two connections to the same server "
    "at once, and it should wait a little between two requests to one host.",
    "The robots exclusion protocol lets a webmaster tell crawlers which parts of a site "
    "they may visit; a missing robots.txt means everything is allowed.",
    "Each host name is resolved once, and the answer is kept for as long as its time to "
    "live allows, so the DNS server is not flooded with repeated questions.",
    "Links found in a page are normalised, checked against the set of already seen URLs, "
    "and queued by host, which keeps the frontier fair across sites.",
    "Pictures, archives and other binary files are recognised by their extension and "
    "skipped, since only HTML pages are parsed for new links.",
    "A redirect is treated like a link: the target URL goes through the same checks as "
    "any other URL before it is fetched.",
    "Large crawls are limited by memory, so the structures for seen URLs and waiting "
    "hosts are kept compact and bounded.",
)


def _paras(seed: int, first: str) -> list[str]:
    """A page's paragraphs: its own sentence, then two from the shared pool."""
    return [first, _LOREM[seed % len(_LOREM)], _LOREM[(seed * 3 + 1) % len(_LOREM)]]


def _html(site: str, title: str, paras: list[str], links: list[tuple[str, str]],
          nav: list[tuple[str, str]]) -> str:
    """Render one demo page."""
    esc = html.escape

    def anchors(items: list[tuple[str, str]]) -> str:
        """<li> list of links."""
        return "\n".join(f'  <li><a href="{esc(h)}">{esc(t)}</a></li>' for h, t in items)

    body = "\n".join(f"<p>{esc(p)}</p>" for p in paras)
    return (
        f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f"<title>{esc(title)} - {esc(site)}</title></head>\n<body>\n"
        f"<nav><ul>\n{anchors(nav)}\n</ul></nav>\n<h1>{esc(title)}</h1>\n{body}\n"
        f"<ul>\n{anchors(links)}\n</ul>\n<footer>Served by the larbinpy demo.</footer>\n"
        f"</body></html>\n"
    )


class _Builder:
    """Collects the pages of one demo site."""

    def __init__(self, host: str, port: int, robots: str | None) -> None:
        self.site = Site(host, DEMO_IPS[host])
        self.port = port
        self.n = 0
        if robots is not None:
            self.site.pages["/robots.txt"] = Page(robots, content_type="text/plain")

    def abs(self, host: str, path: str = "/") -> str:
        """Absolute URL on another demo host."""
        return f"http://{host}:{self.port}{path}"

    def nav(self) -> list[tuple[str, str]]:
        """Navigation bar: this site's home and the other sites' homes."""
        items = [("/", "Home")]
        items += [(self.abs(h), h.split(".")[0].title()) for h in (WWW, BLOG, DOCS, SHOP)
                  if h != self.site.host]
        return items

    def page(self, path: str, title: str, text: str, links: list[tuple[str, str]]) -> None:
        """Add an HTML page."""
        self.n += 1
        body = _html(self.site.host, title, _paras(self.n, text), links, self.nav())
        self.site.pages[path] = Page(body, content_type="text/html; charset=utf-8")

    def file(self, path: str) -> None:
        """Add a binary file, typed by its extension."""
        ctype, data = _FILES[path[path.rfind("."):]]
        self.site.pages[path] = Page(data, content_type=ctype)

    def redirect(self, path: str, location: str, status: int = 301) -> None:
        """Add a redirect."""
        self.site.pages[path] = redirect(location, status)


def _www(port: int) -> Site:
    """www: the start site; robots.txt disallows /private/."""
    b = _Builder(WWW, port, "User-agent: *\nDisallow: /private/\n")
    months = [f"2024-{m:02d}" for m in range(1, 7)]
    b.page("/", "Welcome to the larbin demo web", "This small web exists to be crawled.", [
        ("/about.html", "About"), ("/news/", "News"), ("/team.html", "Team"),
        ("/contact.html", "Contact"), ("/faq.html", "FAQ"), ("/history.html", "History"),
        ("/downloads.html", "Downloads"), ("/old-home.html", "Old home page (moved)"),
        (DEMO_MISSING_PATH, "A page that was removed"), ("/private/staff.html", "Staff only"),
        (f"http://{DEMO_NODNS_HOST}:{port}/", "Our old server"),
        (b.abs(BLOG), "Read the blog"), (b.abs(DOCS), "Documentation"), (b.abs(SHOP), "Shop"),
    ])
    b.page("/about.html", "About us", "We build crawlers that are fast and polite.",
           [("team.html", "Meet the team"), (b.abs(DOCS, "/guide/install.html"), "Install")])
    b.page("/team.html", "The team", "Three people and a very patient DNS server.",
           [("/about.html", "About"), (b.abs(BLOG, "/posts/hello-world.html"), "First post")])
    b.page("/contact.html", "Contact", "Write to us; we answer every polite request.",
           [("/faq.html", "Read the FAQ first")])
    b.page("/faq.html", "Frequently asked questions", "Yes, it obeys robots.txt.",
           [(b.abs(DOCS, "/faq.html"), "Technical FAQ"), ("/contact.html", "Still stuck?")])
    b.page("/history.html", "History", "Larbin started as a student project in 2001.",
           [("/news/", "Latest news"), ("/news/2024-01.html", "January news")])
    b.page("/downloads.html", "Downloads", "Sources and pictures (not HTML, not crawled).", [
        ("/files/larbin-2.6.3.tar.gz", "larbin 2.6.3 (tar.gz)"),
        ("/files/larbin-2.6.3.zip", "larbin 2.6.3 (zip)"), ("/files/manual.pdf", "Manual"),
        ("/img/logo.jpg", "Logo"), ("/img/architecture.png", "Architecture diagram"),
    ])
    for path in ("/files/larbin-2.6.3.tar.gz", "/files/larbin-2.6.3.zip", "/files/manual.pdf",
                 "/img/logo.jpg", "/img/architecture.png"):
        b.file(path)
    b.page("/news/", "News", "What happened this year.",
           [(f"{m}.html", f"News of {m}") for m in months])
    for i, m in enumerate(months):
        nxt = [(f"{months[i + 1]}.html", "Next month")] if i + 1 < len(months) else []
        b.page(f"/news/{m}.html", f"News of {m}", f"Monthly notes for {m}.",
               [("./", "All news"), *nxt, (b.abs(BLOG, "/archive.html"), "Blog archive")])
    b.redirect("/old-home.html", "/")
    b.page("/private/staff.html", "Staff only", "Robots must not read this page.", [])
    return b.site


_POSTS = ["hello-world", "why-politeness", "dns-caching", "robots-txt", "url-normalisation",
          "one-event-loop", "keep-alive", "memory-budget", "crawl-traps", "release-notes"]


def _blog(port: int) -> Site:
    """blog: no robots.txt at all (404 means allow everything); shares an IP with docs."""
    b = _Builder(BLOG, port, None)
    titles = [p.replace("-", " ").capitalize() for p in _POSTS]
    b.page("/", "The larbin blog", "Notes from the crawler team.", [
        *[(f"/posts/{p}.html", t) for p, t in zip(_POSTS, titles, strict=True)],
        ("/archive.html", "Archive"), ("/tags/crawling.html", "#crawling"),
        ("/tags/python.html", "#python"), ("/gallery.html", "Gallery"), ("/feed", "Feed"),
    ])
    for i, (post, title) in enumerate(zip(_POSTS, titles, strict=True)):
        links = [("../archive.html", "Archive"), (b.abs(DOCS, "/guide/politeness.html"), "Docs")]
        if i + 1 < len(_POSTS):
            links.insert(0, (f"{_POSTS[i + 1]}.html", "Next post"))
        b.page(f"/posts/{post}.html", title, f"In this post: {title.lower()}.", links)
    b.page("/archive.html", "Archive, page 1", "Older posts are on page 2.",
           [(f"/posts/{p}.html", p) for p in _POSTS[:5]] + [("?page=2", "Page 2")])
    b.page("/archive.html?page=2", "Archive, page 2", "The oldest posts.",
           [(f"/posts/{p}.html", p) for p in _POSTS[5:]] + [("/archive.html", "Page 1")])
    b.page("/tags/crawling.html", "Tag: crawling", "Posts about crawling.",
           [("/posts/why-politeness.html", "Politeness"), ("/posts/crawl-traps.html", "Traps")])
    b.page("/tags/python.html", "Tag: python", "Posts about Python.",
           [("/posts/one-event-loop.html", "One event loop"), (b.abs(SHOP), "Buy a mug")])
    b.page("/gallery.html", "Gallery", "Photos from the last meetup (images are not crawled).",
           [("/photos/meetup-1.jpg", "Meetup 1"), ("/photos/meetup-2.jpg", "Meetup 2"),
            ("/photos/team.png", "Team"), ("/photos/dance.gif", "Dance")])
    for path in ("/photos/meetup-1.jpg", "/photos/meetup-2.jpg", "/photos/team.png",
                 "/photos/dance.gif"):
        b.file(path)
    b.redirect("/feed", "/archive.html", 302)
    return b.site


_GUIDES = ["install", "config", "usage", "politeness", "robots", "dns"]
_APIS = ["fetch", "queue", "url", "dns"]


def _docs(port: int) -> Site:
    """docs: robots.txt disallows /drafts/; shares 127.0.1.2 with blog."""
    b = _Builder(DOCS, port, "User-agent: *\nDisallow: /drafts/\n")
    b.page("/", "larbinpy documentation", "Everything about running the crawler.", [
        *[(f"/guide/{g}.html", f"Guide: {g}") for g in _GUIDES], ("/api/", "API reference"),
        ("/faq.html", "FAQ"), ("/downloads.html", "Downloads"), ("/v1/", "Old v1 docs"),
        ("/drafts/wip.html", "Work in progress"),
    ])
    for i, g in enumerate(_GUIDES):
        links = [("../", "Contents"), (b.abs(BLOG, f"/posts/{_POSTS[i]}.html"), "Blog post")]
        if i + 1 < len(_GUIDES):
            links.insert(0, (f"{_GUIDES[i + 1]}.html", "Next chapter"))
        b.page(f"/guide/{g}.html", f"Guide: {g}", f"How to deal with {g}.", links)
    b.page("/api/", "API reference", "Modules of larbinpy.",
           [(f"{a}.html", f"larbinpy.{a}") for a in _APIS])
    for a in _APIS:
        b.page(f"/api/{a}.html", f"larbinpy.{a}", f"The {a} module.",
               [("./", "API index"), ("/guide/usage.html", "Usage guide")])
    b.page("/faq.html", "Technical FAQ", "Why is my crawl slow? Because it is polite.",
           [(b.abs(WWW, "/faq.html"), "General FAQ"), ("/guide/config.html", "Configuration")])
    b.page("/downloads.html", "Downloads", "Printable manuals and installers.",
           [("/pdf/manual.pdf", "Manual (PDF)"), ("/bin/setup.exe", "Installer"),
            ("/src/docs.tar.gz", "Sources")])
    for path in ("/pdf/manual.pdf", "/bin/setup.exe", "/src/docs.tar.gz"):
        b.file(path)
    b.redirect("/v1/", "/", 302)
    b.page("/drafts/wip.html", "Draft", "Robots must not read this draft.", [])
    return b.site


def _shop(port: int) -> Site:
    """shop: robots.txt with a short Crawl-delay and a Disallow of /checkout/."""
    b = _Builder(SHOP, port, "User-agent: *\nCrawl-delay: 0.2\nDisallow: /checkout/\n")
    widgets = [f"widget-{i}" for i in range(1, 9)]
    b.page("/", "The larbin shop", "Mugs, stickers and widgets.", [
        ("/catalog.html", "Catalog"), ("/cart.html", "Cart"), ("/images.html", "Pictures"),
        ("/sale.html", "Sale!"), (b.abs(WWW, "/about.html"), "About the makers"),
    ])
    b.page("/catalog.html", "Catalog", "All our products.",
           [(f"/products/{w}.html", w.title()) for w in widgets])
    for i, w in enumerate(widgets):
        b.page(f"/products/{w}.html", w.title(), f"{w.title()} costs {i + 3} euros.",
               [("/cart.html", "Add to cart"), (f"{widgets[(i + 1) % 8]}.html", "Next product"),
                (f"/img/{w}.jpg", "Photo")])
        b.file(f"/img/{w}.jpg")
    b.page("/cart.html", "Your cart", "The cart is empty.", [("/checkout/pay.html", "Pay")])
    b.page("/checkout/pay.html", "Payment", "Robots must not pay.", [])
    b.page("/images.html", "Pictures", "Product photos (not crawled).",
           [(f"/img/{w}.jpg", w) for w in widgets[:4]])
    b.redirect("/sale.html", "/catalog.html")
    return b.site


def demo_sites(http_port: int = DEMO_HTTP_PORT) -> list[Site]:
    """The four demo sites; absolute links in them carry `http_port`."""
    return [_www(http_port), _blog(http_port), _docs(http_port), _shop(http_port)]


def demo_links(http_port: int = DEMO_HTTP_PORT) -> dict[str, list[str]]:
    """Every HTML page URL -> the absolute URLs it links to (fragments removed)."""
    out: dict[str, list[str]] = {}
    for site in demo_sites(http_port):
        for path, page in site.pages.items():
            if not page.content_type.startswith("text/html"):
                continue
            base = f"http://{site.host}:{http_port}{path}"
            body = page.body if isinstance(page.body, str) else page.body.decode()
            hrefs = re.findall(r'href="([^"]*)"', body)
            out[base] = [urldefrag(urljoin(base, html.unescape(h)))[0] for h in hrefs]
    return out


def _pages_count(sites: list[Site]) -> int:
    """Number of HTML pages in `sites`."""
    return sum(p.content_type.startswith("text/html") for s in sites for p in s.pages.values())


async def start_demo(http_port: int = DEMO_HTTP_PORT, dns_port: int = DEMO_DNS_PORT,
                     record: bool = True) -> tuple[LocalWeb, DnsServer]:
    """Start the demo HTTP and DNS servers (port 0 = any free port)."""
    from larbinpy.demo.dnsserver import start_dns_for  # dnslib: the `demo` extra

    sites = demo_sites(http_port)
    web = LocalWeb(sites, port=http_port, record=record)
    try:
        await web.start()
    except OSError as exc:
        raise DemoPortBusy(f"the demo web's HTTP port {http_port}", exc) from None
    if http_port == 0:  # absolute links must carry the port actually bound
        for site, fresh in zip(sites, demo_sites(web.port), strict=True):
            site.pages = fresh.pages
    try:
        return web, await start_dns_for(web, dns_port)
    except OSError as exc:
        await web.stop()
        raise DemoPortBusy(f"the demo DNS port {dns_port}", exc) from None


class DemoPortBusy(OSError):
    """A port the demo must serve on cannot be had (in use, most likely)."""

    def __init__(self, what: str, exc: OSError) -> None:
        super().__init__(exc.errno, f"cannot listen on {what}: {exc.strerror or exc}")


def free_crawler_ports(conf: str) -> list[str]:
    """`--http-port N --input-port N` for the crawler's ports that are busy here (a port both
    keys share moves once); [] when they are free or off."""
    from larbinpy.config import load_config

    cfg = load_config(conf)
    moved: dict[int, int] = {}
    args: list[str] = []
    for port, option, key in ((cfg.http_port, "--http-port", "httpPort"),
                              (cfg.input_port, "--input-port", "inputPort")):
        if not port or (port not in moved and _can_listen(cfg.http_host, port)):
            continue
        if port not in moved:
            moved[port] = _free_port(cfg.http_host)
            print(f"larbinpy demo: {key} {port} is busy on {cfg.http_host}: the crawler "
                  f"listens on {moved[port]} instead", file=sys.stderr)
        args += [option, str(moved[port])]
    return args


def _can_listen(host: str, port: int) -> bool:
    """Could a server listen on host:port now (as asyncio's would, with SO_REUSEADDR)?"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    """A port the kernel says is free on host."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
    return port


async def _run_child(cmd: list[str]) -> int:
    """Run cmd in its own process group, forwarding SIGINT/SIGTERM; return its exit code."""
    try:
        # Own group: a terminal Ctrl-C reaches the child once (through us), not twice.
        proc = await asyncio.create_subprocess_exec(
            *cmd, process_group=0, preexec_fn=_die_with_parent_hook())
    except OSError as exc:
        print(f"larbinpy demo: cannot run {cmd[0]}: {exc}", file=sys.stderr)
        return 127
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _forward, proc, sig)
    try:
        code = await proc.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return 128 - code if code < 0 else code


def _die_with_parent_hook() -> Callable[[], None] | None:
    """What the child runs before exec so that it gets SIGTERM when the demo dies, even by
    SIGKILL, and a crawler never outlives the web it was started to crawl (Linux's prctl
    PR_SET_PDEATHSIG). Looked up here, in the parent: loading a library between fork and exec
    can deadlock."""
    if sys.platform != "linux":
        return None
    prctl, parent = ctypes.CDLL(None).prctl, os.getpid()

    def die_with_parent() -> None:
        prctl(1, signal.SIGTERM)
        if os.getppid() != parent:  # the demo died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return die_with_parent


def _forward(proc: asyncio.subprocess.Process, sig: int) -> None:
    """Pass a signal on to the child, unless it is already gone."""
    if proc.returncode is None:
        proc.send_signal(sig)


async def _serve_forever(web: LocalWeb, dns: DnsServer) -> int:
    """Print the URLs and serve until SIGINT/SIGTERM."""
    for site in web.sites.values():
        print(f"{web.url(site.host)}  ({site.ip})", flush=True)
    print(f"dnsServers {dns.address}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    return 0


async def _main(args: argparse.Namespace, cmd: list[str]) -> int:
    """Serve the demo around the child command (or forever)."""
    try:
        web, dns = await start_demo(args.http_port, args.dns_port, record=False)
    except DemoPortBusy as exc:
        print(f"larbinpy demo: {exc.strerror}. Is another `make run` or demo still running? "
              "Stop it, or free the port (larbin.conf's startUrl and dnsServers name the "
              "demo's ports).", file=sys.stderr)
        return 1
    try:
        print(f"larbinpy demo: serving {_pages_count(list(web.sites.values()))} pages on "
              f"{len(web.sites)} hosts at {web.url(WWW)} (DNS {dns.address})", file=sys.stderr)
        return await (_serve_forever(web, dns) if args.serve_only else _run_child(cmd))
    finally:
        await dns.stop()
        await web.stop()


def _split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Options before `--`, command after it."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the child's exit code."""
    p = argparse.ArgumentParser(prog="python -m larbinpy.demo.demoweb",
                                usage="%(prog)s [options] (--serve-only | -- CMD ARGS...)")
    p.add_argument("--dns-port", type=int, default=DEMO_DNS_PORT)
    p.add_argument("--http-port", type=int, default=DEMO_HTTP_PORT)
    p.add_argument("--serve-only", action="store_true", help="serve until killed")
    p.add_argument("--crawler-conf", default=None, metavar="LARBIN_CONF",
                   help="the crawler's larbin.conf: its busy ports are moved (CMD gets "
                   "--http-port/--input-port)")
    opts, cmd = _split_argv(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(opts)
    if not cmd and not args.serve_only:
        p.error("give a command after --, or --serve-only")
    if problem := missing_extra("larbinpy demo", "dnslib", "demo"):
        print(problem, file=sys.stderr)
        return 1
    if args.crawler_conf and cmd:
        from larbinpy.config import ConfigError

        try:
            cmd += free_crawler_ports(args.crawler_conf)
        except ConfigError as exc:
            print(f"larbinpy demo: {exc}", file=sys.stderr)
            return 2
    return asyncio.run(_main(args, cmd))


if __name__ == "__main__":
    sys.exit(main())

