"""Test helpers for the modern web: an HTTPS LocalWeb with a test CA, a loopback HTTP proxy,
IPv6 loopback detection. Servers are started and stopped by the tests that use them."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import trustme
from conftest import TestWeb
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from larbinpy.demo import DnsServer, LocalWeb, Page, Site

# --- IPv6 ---


def ipv6_loopback() -> str | None:
    """None when ::1 can be bound here, else why not (the reason a test skips with)."""
    if not socket.has_ipv6:
        return "this Python has no IPv6 support"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        return f"cannot bind ::1 on this machine ({exc}); IPv6 loopback is off"
    return None


# --- certificates ---


class Certs:
    """A test CA and the certificates of each bad-certificate case, written under `tmp`."""

    def __init__(self, tmp: Path) -> None:
        self.ca = trustme.CA()
        self.ca_file = tmp / "test-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.tmp = tmp

    def good(self, host: str) -> ssl.SSLContext:
        """A server context with a valid certificate for `host`, signed by the test CA."""
        return self._ctx(self.ca.issue_cert(host))

    def expired(self, host: str) -> ssl.SSLContext:
        """A certificate for `host` by the test CA that expired yesterday."""
        now = datetime.datetime.now(datetime.UTC)
        return self._ctx(self.ca.issue_cert(host, not_before=now - datetime.timedelta(days=30),
                                            not_after=now - datetime.timedelta(days=1)))

    def wrong_name(self, host: str) -> ssl.SSLContext:
        """A valid certificate by the test CA, for another name than `host`."""
        return self._ctx(self.ca.issue_cert("someone-else.test"))

    def self_signed(self, host: str) -> ssl.SSLContext:
        """A certificate for `host` signed by its own key (no CA at all)."""
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .sign(key, hashes.SHA256())
        )
        cert_path, key_path = self.tmp / f"{host}.self.pem", self.tmp / f"{host}.self.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(cert_path), str(key_path))
        return ctx

    @staticmethod
    def _ctx(leaf: trustme.LeafCert) -> ssl.SSLContext:
        """A server context serving `leaf`."""
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        leaf.configure_cert(ctx)
        return ctx


class TlsWeb(LocalWeb):
    """A LocalWeb served over HTTPS: one certificate per host name, chosen by SNI."""

    def __init__(self, sites: list[Site], contexts: dict[str, ssl.SSLContext]) -> None:
        super().__init__(sites)
        self.contexts = contexts

    def url(self, host: str, path: str = "/") -> str:
        """Absolute https URL of `path` on `host`."""
        return "https" + super().url(host, path)[4:]

    def ssl_context(self) -> ssl.SSLContext:
        """The listening context: switches to the host's own context on SNI."""
        default = next(iter(self.contexts.values()))

        def pick(sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
            if name in self.contexts:
                sock.context = self.contexts[name]

        default.sni_callback = pick  # type: ignore[assignment]
        return default

# --- a loopback HTTP proxy ---


@dataclass
class Proxy:
    """A small forward proxy: absolute-form HTTP requests and CONNECT tunnels, recorded.

    It resolves host names from its own table (as a real proxy would with its DNS), so the
    crawler need not resolve them.
    """

    records: dict[str, list[str]]
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, target)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> None:
        """Listen on 127.0.0.1."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the listener and every connection."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(AttributeError):
                self._server.close_clients()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._server = None

    def _ip(self, host: str) -> str:
        """The address of a host name (or literal)."""
        host = host.strip("[]").lower()
        return self.records.get(host, [host])[0]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: one request (closed after it), or one tunnel."""
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, *headers = head.decode("latin-1").split("\r\n")
            method, target, _version = line.split(" ", 2)
            self.requests.append((method, target))
            if method == "CONNECT":
                await self._tunnel(target, reader, writer)
            else:
                await self._forward(method, target, headers, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, OSError):
            pass
        finally:
            writer.close()
            self._tasks.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def _tunnel(self, target: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        """CONNECT host:port: a byte pipe both ways."""
        host, _, port = target.rpartition(":")
        up_r, up_w = await asyncio.open_connection(self._ip(host), int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))

    async def _forward(self, method: str, target: str, headers: list[str],
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """GET http://host:port/path: ask the origin (origin form), relay its answer, close."""
        parts = urlsplit(target)
        path = parts.path or "/"
        kept = [h for h in headers if h and not h.lower().startswith(
            ("connection:", "proxy-connection:", "keep-alive:"))]
        request = f"{method} {path}{'?' if parts.query else ''}{parts.query} HTTP/1.1\r\n"
        request += "".join(f"{h}\r\n" for h in kept)
        up_r, up_w = await asyncio.open_connection(self._ip(parts.hostname or ""),
                                                   parts.port or 80)
        up_w.write((request + "Connection: close\r\n\r\n").encode("latin-1"))
        await up_w.drain()
        await _pipe(up_r, writer)


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy until EOF, then close the writing side."""
    try:
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            dst.close()


async def start_dns(records: dict[str, list[str]]) -> DnsServer:
    """A started DNS server for `records` (the caller stops it)."""
    dns = DnsServer(records)
    await dns.start()
    return dns


# --- a web whose answers change from one request to the next ---


class ScriptedWeb(LocalWeb):
    """A LocalWeb where some URLs answer from a script: each request takes the next Page of
    the list, the last one repeating (a 503 first, then the page, for instance)."""

    def __init__(self, sites: list[Site], scripts: dict[tuple[str, str], list[Page]]) -> None:
        super().__init__(sites)
        self.scripts = scripts

    def page_for(self, host: str, path_qs: str) -> Page:
        """The scripted answer when there is one, else the static page."""
        script = self.scripts.get((host, path_qs))
        if script:
            return script.pop(0) if len(script) > 1 else script[0]
        return super().page_for(host, path_qs)


async def start_scripted(
    sites: list[Site], scripts: dict[tuple[str, str], list[Page]], tmp: Path
) -> TestWeb:
    """A started ScriptedWeb and its DNS, as a conftest TestWeb (stop with `stop_web`)."""
    web = ScriptedWeb(sites, scripts)
    await web.start()
    dns = await start_dns(web.dns_records)
    return TestWeb(web, dns, tmp)


async def stop_web(tw: TestWeb) -> None:
    """Stop a web started by this module."""
    await tw.web.stop()
    await tw.dns.stop()
