"""Behaviour of the loopback test servers: DNS, virtual-host web, synthetic web, demo web."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiodns
import aiohttp
import pytest
from conftest import WAIT_TIMEOUT
from dnslib import DNSRecord

from larbinpy.bench.synth import ROBOTS_TXT, start_synth, synth_sites, synth_urls
from larbinpy.demo import DnsServer, LocalWeb, Page, Site, redirect
from larbinpy.demo import demoweb as demo_mod

ROOT = Path(__file__).resolve().parent.parent
ENOTFOUND, ETIMEOUT = 4, 12  # c-ares status codes carried in DNSError.args[0]


def resolver(dns: DnsServer) -> aiodns.DNSResolver:
    """A fresh resolver (c-ares caches answers, so reuse would hide queries)."""
    return aiodns.DNSResolver(nameservers=[dns.address], timeout=1, tries=1)


@pytest.fixture
async def dns() -> AsyncIterator[DnsServer]:
    """A DNS server with a few names, one of them silent."""
    server = DnsServer({"Www.Example.test.": ["127.0.0.2", "::1"], "b.test": ["127.0.0.3"]},
                       ttl=123, silent={"slow.test"})
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def web() -> AsyncIterator[LocalWeb]:
    """Two hosts on two IPs plus a third host sharing the first IP."""
    sites = [
        Site("a.test", "127.0.0.2", {
            "/": Page("home of a"),
            "/slow": Page("slow", delay=0.3),
            "/moved": redirect("/", 302),
            "/q?x=1": Page("with query", content_type="text/plain; charset=utf-8"),
            "/reset": Page(abort=True),
        }),
        Site("b.test", "127.0.0.3", {"/": Page(b"home of b"), "/slow": Page("s", delay=0.3)}),
        Site("c.test", "127.0.0.2", {"/slow": Page("s", delay=0.3)}),
    ]
    server = LocalWeb(sites)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def session_for(web: LocalWeb, **kw: object) -> aiohttp.ClientSession:
    """A client session that resolves the web's host names without DNS."""
    conn = aiohttp.TCPConnector(resolver=web.resolver(), **kw)  # type: ignore[arg-type]
    return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=10))


async def get(session: aiohttp.ClientSession, url: str, **kw: object) -> tuple[int, bytes]:
    """Status and body of a GET."""
    async with session.get(url, **kw) as resp:  # type: ignore[arg-type]
        return resp.status, await resp.read()


# --- DNS -------------------------------------------------------------------------------------


async def test_dns_answers_a_with_ttl_case_insensitively(dns: DnsServer) -> None:
    res = await resolver(dns).query_dns("WWW.example.TEST", "A")
    assert [(rr.ttl, rr.data.addr) for rr in res.answer] == [(123, "127.0.0.2")]
    assert dns.queries[("www.example.test", "A")] == 1


async def test_dns_answers_aaaa(dns: DnsServer) -> None:
    res = await resolver(dns).query_dns("www.example.test", "AAAA")
    assert [rr.data.addr for rr in res.answer] == ["::1"]


async def test_dns_nxdomain_for_unknown_names(dns: DnsServer) -> None:
    with pytest.raises(aiodns.error.DNSError) as err:
        await resolver(dns).query_dns("nowhere.test", "A")
    assert err.value.args[0] == ENOTFOUND
    assert dns.queries[("nowhere.test", "A")] == 1


async def test_dns_counts_one_query_per_lookup(dns: DnsServer) -> None:
    for _ in range(3):
        await resolver(dns).query_dns("b.test", "A")
    assert dns.queries[("b.test", "A")] == 3
    assert dns.queries[("b.test", "AAAA")] == 0


async def test_dns_records_change_live(dns: DnsServer) -> None:
    dns.set("b.test", ["127.0.0.9"])
    dns.set("new.test", ["127.0.0.10"])
    assert (await resolver(dns).query_dns("b.test", "A")).answer[0].data.addr == "127.0.0.9"
    assert (await resolver(dns).query_dns("new.test", "A")).answer[0].data.addr == "127.0.0.10"


async def test_dns_silent_name_times_out(dns: DnsServer) -> None:
    with pytest.raises(aiodns.error.DNSError) as err:  # the resolver's own timeout, not the guard's
        await asyncio.wait_for(resolver(dns).query_dns("slow.test", "A"), WAIT_TIMEOUT)
    assert err.value.args[0] == ETIMEOUT
    assert dns.queries[("slow.test", "A")] >= 1


async def test_dns_over_tcp(dns: DnsServer) -> None:
    query = DNSRecord.question("b.test", "A").pack()
    reader, writer = await asyncio.open_connection(dns.host, dns.port)
    try:
        writer.write(len(query).to_bytes(2, "big") + query)
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(2), 2), "big")
        reply = DNSRecord.parse(await reader.readexactly(size))
    finally:
        writer.close()
    assert [str(rr.rdata) for rr in reply.rr] == ["127.0.0.3"]


# --- LocalWeb --------------------------------------------------------------------------------


async def test_web_routes_by_host_across_two_ips_on_one_port(web: LocalWeb) -> None:
    assert web.ips == ["127.0.0.2", "127.0.0.3"]
    async with session_for(web) as s:
        assert await get(s, web.url("a.test")) == (200, b"home of a")
        assert await get(s, web.url("b.test")) == (200, b"home of b")
    assert [(h.host, h.ip, h.path, h.method) for h in web.hits] == [
        ("a.test", "127.0.0.2", "/", "GET"), ("b.test", "127.0.0.3", "/", "GET")]
    assert [h.path for h in web.hits_for("b.test")] == ["/"]
    assert all(h.start <= h.end for h in web.hits)
    assert "User-Agent" in web.hits[0].headers


async def test_web_through_real_dns(web: LocalWeb) -> None:
    async with DnsServer(web.dns_records) as dns:
        conn = aiohttp.TCPConnector(resolver=aiohttp.AsyncResolver(nameservers=[dns.address]))
        async with aiohttp.ClientSession(connector=conn) as s:
            assert await get(s, web.url("b.test")) == (200, b"home of b")
    assert web.hits[0].ip == "127.0.0.3"


async def test_web_status_codes_types_and_redirects(web: LocalWeb) -> None:
    async with session_for(web) as s:
        assert (await get(s, web.url("a.test", "/missing")))[0] == 404
        assert (await get(s, web.url("a.test", "/robots.txt")))[0] == 404
        assert (await get(s, f"http://127.0.0.2:{web.port}/"))[0] == 404
        async with s.get(web.url("a.test", "/moved"), allow_redirects=False) as resp:
            assert (resp.status, resp.headers["Location"]) == (302, "/")
        async with s.get(web.url("a.test", "/q?x=1")) as resp:
            assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
        async with s.get(web.url("a.test")) as resp:
            assert resp.headers["Content-Type"] == "text/html"
        async with s.head(web.url("a.test")) as resp:
            assert resp.status == 200
    assert web.hits[-1].method == "HEAD"


async def test_web_abort_page_drops_the_connection(web: LocalWeb) -> None:
    async with session_for(web) as s:
        with pytest.raises(aiohttp.ClientError):
            await get(s, web.url("a.test", "/reset"))


async def test_web_keeps_connections_alive(web: LocalWeb) -> None:
    async with session_for(web, limit=1) as s:
        for _ in range(3):
            await get(s, web.url("a.test"))
    assert len({h.peer for h in web.hits}) == 1


async def test_web_measures_concurrency_per_host_and_per_ip(web: LocalWeb) -> None:
    async with session_for(web) as s:
        await asyncio.gather(get(s, web.url("a.test", "/slow")), get(s, web.url("a.test", "/slow")))
        await asyncio.gather(get(s, web.url("b.test", "/slow")), get(s, web.url("c.test", "/slow")))
    assert web.max_concurrency("a.test") == 2
    assert web.max_concurrency("b.test") == 1
    assert web.max_concurrency("c.test") == 1
    assert web.max_concurrency("127.0.0.2") == 2
    assert web.max_concurrency("127.0.0.3") == 1
    a1, a2 = web.hits_for("a.test")
    assert a1.start < a2.end and a2.start < a1.end  # the two slow hits overlap
    assert min(a1.end - a1.start, a2.end - a2.start) >= 0.29


async def test_web_does_not_record_when_asked() -> None:
    async with LocalWeb([Site("a.test", "127.0.0.2", {"/": Page("x")})], record=False) as web:
        async with session_for(web) as s:
            assert await get(s, web.url("a.test")) == (200, b"x")
        assert web.hits == []


async def test_web_fixed_port_in_use_fails_cleanly() -> None:
    async with LocalWeb([Site("a.test", "127.0.0.4")]) as first:
        again = LocalWeb([Site("a.test", "127.0.0.4")], port=first.port)
        with pytest.raises(OSError):
            await again.start()
        await again.stop()


# --- synthetic web ---------------------------------------------------------------------------


def test_synth_is_deterministic_and_sized() -> None:
    _, f1 = synth_sites(5, 50, port=8000)
    _, f2 = synth_sites(5, 50, port=8000)
    _, f3 = synth_sites(5, 50, port=8000, seed=2)
    page = f1("h3.bench.test", "/p7.html")
    assert page is not None and page == f2("h3.bench.test", "/p7.html")
    assert page != f3("h3.bench.test", "/p7.html")
    assert 13000 < len(page.body) < 17000
    assert page.body.count(b"<a href=") == 40


def test_synth_rejects_what_it_does_not_have() -> None:
    _, f = synth_sites(5, 50)
    for host, path in [("h5.bench.test", "/"), ("h03.bench.test", "/"), ("x.test", "/"),
                       ("h1.bench.test", "/p50.html"), ("h1.bench.test", "/p0.html"),
                       ("h1.bench.test", "/p07.html"), ("h1.bench.test", "/p7.html?x")]:
        assert f(host, path) is None, (host, path)


def test_synth_links_resolve_and_everything_is_reachable() -> None:
    hosts, pages, port = 4, 30, 8000
    sites, f = synth_sites(hosts, pages, port=port, max_ips=3)
    assert len({s.ip for s in sites}) == 3
    assert all(s.pages["/robots.txt"].body == ROBOTS_TXT.encode() for s in sites)
    start = f"http://h0.bench.test:{port}/"
    seen, todo, forms = {start}, [start], set()
    while todo:
        url = todo.pop()
        parts = urlsplit(url)
        page = f(parts.hostname or "", parts.path)
        assert page is not None and page.status == 200, url
        for href in f.links_of(f.host_index(parts.hostname or "") or 0, f.page_number(parts.path)
                               or 0):
            forms.add("abs" if href.startswith("http") else "root" if href[0] == "/" else "rel")
            target = urljoin(url, href)
            assert "/private/" not in target
            if target not in seen:
                seen.add(target)
                todo.append(target)
    assert seen == set(synth_urls(hosts, pages, port))
    assert forms == {"abs", "root", "rel"}


async def test_synth_served_over_http() -> None:
    web, dns, factory = await start_synth(3, 10, record=False)
    try:
        urls = list(synth_urls(3, 10, web.port))
        async with session_for(web) as s:
            for url in urls[::7]:
                status, body = await get(s, url)
                assert status == 200 and f":{web.port}/".encode() in body
            assert await get(s, web.url("h1.bench.test", "/robots.txt")) == (
                200, ROBOTS_TXT.encode())
        res = await resolver(dns).query_dns("h2.bench.test", "A")
        assert res.answer[0].data.addr == "127.0.2.3"
    finally:
        await dns.stop()
        await web.stop()


# --- demo web --------------------------------------------------------------------------------


def test_demo_links_exist_except_the_deliberate_ones() -> None:
    port = demo_mod.DEMO_HTTP_PORT
    sites = {s.host: s for s in demo_mod.demo_sites(port)}
    assert len(sites) == 4 and len({s.ip for s in sites.values()}) == 3
    broken = set()
    for targets in demo_mod.demo_links(port).values():
        for url in targets:
            parts = urlsplit(url)
            site = sites.get(parts.hostname or "")
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            if site is None or path not in site.pages:
                broken.add(url)
    assert broken == {
        f"http://www.larbin-demo.test:{port}{demo_mod.DEMO_MISSING_PATH}",
        f"http://{demo_mod.DEMO_NODNS_HOST}:{port}/",
    }


def test_demo_is_reachable_within_depth_five() -> None:
    port = demo_mod.DEMO_HTTP_PORT
    links = demo_mod.demo_links(port)
    sites = {s.host: s for s in demo_mod.demo_sites(port)}
    depth = {demo_mod.DEMO_START_URL: 0}
    frontier = [demo_mod.DEMO_START_URL]
    for d in range(1, 6):
        nxt = []
        for url in frontier:
            targets = list(links.get(url, []))
            parts = urlsplit(url)
            page = sites[parts.hostname].pages.get(parts.path) if parts.hostname in sites else None
            if page is not None and "Location" in page.headers:
                targets.append(urljoin(url, page.headers["Location"]))
            for t in targets:
                if t not in depth:
                    depth[t] = d
                    nxt.append(t)
        frontier = nxt
    assert set(links) <= set(depth)
    assert 55 <= len(links) <= 70


async def test_demo_serves_over_dns_and_http() -> None:
    web, dns = await demo_mod.start_demo(http_port=0, dns_port=0)
    try:
        async with session_for(web) as s:
            urls = [u for targets in demo_mod.demo_links(web.port).values() for u in targets]
            for url in sorted(set(urls)):
                if demo_mod.DEMO_NODNS_HOST in url:
                    continue
                status, _ = await get(s, url, allow_redirects=False)
                missing = url.endswith(demo_mod.DEMO_MISSING_PATH)
                assert status in ((404,) if missing else (200, 301, 302)), url
        assert web.max_concurrency("127.0.1.2") >= 1
        with pytest.raises(aiodns.error.DNSError) as err:
            await resolver(dns).query_dns(demo_mod.DEMO_NODNS_HOST, "A")
        assert err.value.args[0] == ENOTFOUND
        res = await resolver(dns).query_dns("docs.larbin-demo.test", "A")
        assert res.answer[0].data.addr == "127.0.1.2"
    finally:
        await dns.stop()
        await web.stop()


def free_port() -> int:
    """A port that was free a moment ago on 127.0.1.1 and 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.1.1", 0))
        return s.getsockname()[1]


def test_demo_runner_runs_the_command_and_returns_its_code() -> None:
    child = (
        "import socket, sys; s = socket.create_connection(('127.0.1.3', int(sys.argv[1])), 5);"
        "s.sendall(b'GET /robots.txt HTTP/1.0\\r\\nHost: shop.larbin-demo.test\\r\\n\\r\\n');"
        "data = b''.join(iter(lambda: s.recv(4096), b''));"
        "sys.exit(7 if b'Crawl-delay' in data else 1)"
    )
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "larbinpy.demo.demoweb", "--http-port", str(port),
         "--dns-port", str(free_port()), "--", sys.executable, "-c", child, str(port)],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 7, proc.stderr
    assert "larbinpy demo: serving" in proc.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_demo_child_does_not_outlive_a_killed_demo(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    child = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()));"
             "time.sleep(60)")
    demo = subprocess.Popen(
        [sys.executable, "-m", "larbinpy.demo.demoweb", "--http-port", str(free_port()),
         "--dns-port", str(free_port()), "--", sys.executable, "-c", child],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the demo never started its command"
            time.sleep(0.05)
        pid = int(pid_file.read_text())
    finally:
        demo.kill()  # SIGKILL: the demo cannot forward anything
        demo.wait()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and "Z" not in _proc_state(pid):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            pytest.fail("the demo's command outlived the demo")
        time.sleep(0.05)


def _proc_state(pid: int) -> str:
    """The state letter of a process ('' once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _listen(host: str) -> socket.socket:
    """A socket listening on a kernel-chosen port of host: a port some other program holds."""
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen()
    return sock


def test_a_busy_demo_port_is_said_in_one_line() -> None:
    with _listen("127.0.1.1") as busy:
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "larbinpy.demo.demoweb", "--http-port", str(port),
             "--dns-port", str(free_port()), "--", "true"],
            cwd=ROOT, capture_output=True, text=True, timeout=30,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert f"cannot listen on the demo web's HTTP port {port}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_demo_moves_the_crawler_ports_that_are_busy(tmp_path: Path) -> None:
    """A daemon already on the crawler's httpPort: the crawler is told another port (and the
    free inputPort stays as configured)."""
    with _listen("127.0.0.1") as busy:
        taken, free = busy.getsockname()[1], free_port()
        conf = tmp_path / "larbin.conf"
        conf.write_text(f"httpPort {taken}\ninputPort {free}\n")
        child = "import sys; print(sys.argv[1:])"
        proc = subprocess.run(
            [sys.executable, "-m", "larbinpy.demo.demoweb", "--http-port", str(free_port()),
             "--dns-port", str(free_port()), "--crawler-conf", str(conf), "--",
             sys.executable, "-c", child],
            cwd=ROOT, capture_output=True, text=True, timeout=30,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert f"httpPort {taken} is busy" in proc.stderr
    args = eval(proc.stdout)  # the child's argv, as Python printed it
    assert args[0] == "--http-port" and int(args[1]) != taken and len(args) == 2


async def test_a_web_of_many_ips_listens_once_for_all_of_loopback() -> None:
    """Past BIND_EACH_MAX IPs the server holds one socket, on the loopback interface only, and
    still answers each host on its own IP (and the record names the IP a request reached)."""
    from larbinpy.demo.web import BIND_EACH_MAX

    sites = [Site(f"s{i}.test", f"127.9.{i // 250}.{i % 250 + 1}", {"/": Page(f"site {i}")})
             for i in range(BIND_EACH_MAX + 1)]
    async with LocalWeb(sites) as web:
        [sock] = web.sockets
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, 16).rstrip(b"\0") \
            == b"lo"
        async with aiohttp.ClientSession() as s:
            for i in (0, BIND_EACH_MAX):
                ip = sites[i].ip
                async with s.get(f"http://{ip}:{web.port}/",
                                 headers={"Host": sites[i].host}) as resp:
                    assert (resp.status, await resp.text()) == (200, f"site {i}")
            assert [h.ip for h in web.hits] == [sites[0].ip, sites[BIND_EACH_MAX].ip]


async def test_the_synth_servers_politeness_record_counts_gaps_per_ip() -> None:
    """Two requests to one IP 0.2 s apart under a 1 s wait are a gap; one host asked once and
    the control host itself are not; reset forgets."""
    from larbinpy.bench.politeness import PolitenessLog, read_log

    log = PolitenessLog(1.0)
    web, dns, _ = await start_synth(3, 4, record=False, politeness=log)
    try:
        async with session_for(web) as s:
            await get(s, web.url("h0.bench.test", "/"))
            t0 = time.monotonic()
            await asyncio.sleep(0.2)
            await get(s, web.url("h0.bench.test", "/p1.html"))
            await get(s, web.url("h1.bench.test", "/robots.txt"))
        gap = time.monotonic() - t0
        seen = await asyncio.to_thread(read_log, web.port, True)
        assert (seen["requests"], seen["ips"], seen["gaps"]) == (3, 2, 1)
        assert 0.2 <= seen["shortest_spacing"] <= gap + 0.05
        assert (await asyncio.to_thread(read_log, web.port))["requests"] == 0
    finally:
        await dns.stop()
        await web.stop()
