"""A tiny authoritative DNS server on loopback, so the crawler's real resolver path is exercised.

It answers A/AAAA from an in-memory table over UDP and TCP (same port), says NXDOMAIN for
unknown names, never answers names in `silent` (to provoke resolver timeouts), and counts every
question it sees so tests can assert "one lookup per host".
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket
import sys
from collections import Counter
from typing import TYPE_CHECKING, cast

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSRecord

if TYPE_CHECKING:
    from larbinpy.demo.web import LocalWeb

log = logging.getLogger(__name__)

_BIND_TRIES = 8


def _norm(name: str) -> str:
    """Canonical form of a DNS name: lower case, no trailing dot."""
    return name.rstrip(".").lower()


def _family(host: str) -> socket.AddressFamily:
    """Socket family for a literal IP address."""
    return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET


class _Udp(asyncio.DatagramProtocol):
    """Datagram endpoint that hands each packet to the server and sends back its reply."""

    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport to answer on."""
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        """Answer one query (or stay silent)."""
        reply = self.server.answer(data)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


class DnsServer:
    """Authoritative-ish DNS for a fixed set of names, on UDP and TCP at `host:port`."""

    def __init__(
        self,
        records: dict[str, list[str]],
        host: str = "127.0.0.1",
        port: int = 0,
        ttl: int = 300,
        silent: set[str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.ttl = ttl
        self.silent = {_norm(n) for n in (silent or set())}
        self.queries: Counter[tuple[str, str]] = Counter()
        self._records: dict[str, list[str]] = {}
        for name, ips in records.items():
            self.set(name, ips)
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None

    @property
    def address(self) -> str:
        """`ip:port` as pycares (and aiodns) accept it in `nameservers=[...]`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def set(self, name: str, ips: list[str]) -> None:
        """Replace the addresses of `name` (an empty list makes it exist with no address)."""
        self._records[_norm(name)] = list(ips)

    def remove(self, name: str) -> None:
        """Forget `name`, so it answers NXDOMAIN from now on."""
        self._records.pop(_norm(name), None)

    async def start(self) -> None:
        """Bind TCP then UDP on the same port (a fresh port is retried if UDP's is taken).
        TCP first: its ports are the scarce ones, shared with every outgoing connection."""
        loop = asyncio.get_running_loop()
        wanted = self.port
        for attempt in range(_BIND_TRIES):
            self._tcp = await asyncio.start_server(self._serve_tcp, self.host, wanted)
            self.port = self._tcp.sockets[0].getsockname()[1]
            try:
                self._udp, _ = await loop.create_datagram_endpoint(
                    lambda: _Udp(self), local_addr=(self.host, self.port),
                    family=_family(self.host))
                return
            except OSError as exc:
                self._tcp.close()
                self._tcp = None
                # A kernel-picked TCP port may be busy on UDP; only then is retrying meaningful.
                if exc.errno != errno.EADDRINUSE or wanted != 0 or attempt == _BIND_TRIES - 1:
                    raise

    async def stop(self) -> None:
        """Close both endpoints; safe to call twice."""
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp is not None:
            self._tcp.close()
            # Idle TCP clients would otherwise keep wait_closed() hanging (3.13 can close them).
            if sys.version_info >= (3, 13):
                self._tcp.close_clients()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._tcp.wait_closed(), 1.0)
            self._tcp = None

    async def __aenter__(self) -> DnsServer:
        """Start on entry."""
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Stop on exit."""
        await self.stop()

    def answer(self, data: bytes) -> bytes | None:
        """Wire-format reply to the wire-format query `data`; None means stay silent."""
        try:
            request = DNSRecord.parse(data)
        except Exception:  # garbage on a test port is not worth crashing for
            log.debug("unparsable DNS packet ignored")
            return None
        if not request.questions:
            return None
        reply = request.reply()  # copies id and question (with the asker's letter case)
        for q in request.questions:
            name, qtype = _norm(str(q.qname)), QTYPE.get(q.qtype, str(q.qtype))
            self.queries[(name, qtype)] += 1
            if name in self.silent:
                return None
            if name not in self._records:
                reply.header.rcode = RCODE.NXDOMAIN
                continue
            for rr in self._rrs(q.qname, qtype, self._records[name]):
                reply.add_answer(rr)
        packed: bytes = reply.pack()
        return packed

    def _rrs(self, qname: object, qtype: str, ips: list[str]) -> list[RR]:
        """Answer records of type `qtype` among `ips` (empty list = NODATA)."""
        out = []
        for ip in ips:
            v6 = ipaddress.ip_address(ip).version == 6
            if qtype in ("A", "ANY") and not v6:
                out.append(RR(qname, QTYPE.A, rdata=A(ip), ttl=self.ttl))
            elif qtype in ("AAAA", "ANY") and v6:
                out.append(RR(qname, QTYPE.AAAA, rdata=AAAA(ip), ttl=self.ttl))
        return out

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """DNS over TCP: 2-byte length-prefixed messages, several per connection."""
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(2), "big")
                reply = self.answer(await reader.readexactly(size))
                if reply is not None:
                    writer.write(len(reply).to_bytes(2, "big") + reply)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def start_dns_for(web: LocalWeb, port: int = 0) -> DnsServer:
    """A DNS server answering for a started LocalWeb's hosts (the web is stopped if it fails)."""
    dns = DnsServer(web.dns_records, port=port)
    try:
        await dns.start()
    except BaseException:
        await web.stop()
        raise
    return dns
