"""Reading a response body under limits, for the reader and robots stages.

The HTTP client does not decompress (so the raw bytes stay available for WARC and a
compression bomb cannot inflate behind our back): bodies are decoded here, incrementally,
never producing more than `limit` bytes however small the compressed input. `minRate`
(bytes/s, averaged after a grace period) cuts off servers that drip. `maxBandwidth` throttles
through `Throttle` (the bandwidth stage's token bucket).

Every byte counts, not only content: a response of our own HTTP/1.1 client (`http1.Response`)
is told the limits (`limit_reading`) and counts every byte of the response against them, head
and chunk framing too, measuring `minRate` on them from the request on, even while no content
arrives; aiohttp's connections (HTTPS, proxies) count a body's bytes on the wire the same way
(`aio.CountingHandler`), framing included.

Given a `Reservation` of the process's document memory (`docmemory.py`), the body takes its
bytes from it before holding them: all at once when Content-Length says how many, else as they
arrive, waiting for room when the pool is full. Time spent waiting for room is ours, not the
server's: minRate's clock does not run meanwhile (`_Got.take`).
"""

from __future__ import annotations

import codecs
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import brotli

from larbinpy.net.docmemory import Reservation
from larbinpy.stats import Outcome

if TYPE_CHECKING:
    from larbinpy.net.response import Response

ACCEPT_ENCODING = "gzip, deflate, br"
UTF8_BOM = b"\xef\xbb\xbf"
_BOMS = (UTF8_BOM, b"\xff\xfe", b"\xfe\xff")
_CHARSET_PARAM = re.compile(r";\s*charset\s*=\s*[\"']?([^\"';\s]+)", re.I)
_META_CHARSET = re.compile(rb"<meta[^>]+charset", re.I)
# WHATWG Encoding: these labels mean windows-1252, whatever Python's codecs think
_AS_CP1252 = frozenset({"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "ascii",
                        "us-ascii", "iso_8859-1", "cp819", "ibm819", "windows-1252"})
MIN_RATE_GRACE = 3.0  # seconds before minRate applies: slow starts are normal
# bytes a body may take on the wire beyond its limit: chunk sizes and extensions, trailers
FRAMING_ALLOWANCE = 128 * 1024


class Throttle(Protocol):
    """A bandwidth budget the reading spends (stages.bandwidth.BandwidthLimiter)."""

    async def take(self, nbytes: int) -> None:
        """Spend `nbytes`, waiting while the budget is spent."""
        ...


class BodyError(Exception):
    """The body could not be read within the limits: `kind` is the outcome to count; for a
    timeout, `timeout` names the limit (minRate)."""

    def __init__(self, kind: Outcome, timeout: str | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.timeout = timeout


@dataclass(slots=True)
class Body:
    """A body as received (`raw`, kept only when asked) and decoded (`data`)."""

    data: bytes
    raw: bytes | None
    wire_bytes: int


def _inflater(encoding: str) -> Callable[[bytes, int], bytes] | None:
    """A function (chunk, max_out) -> decoded bytes for a Content-Encoding; None = identity."""
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return None
    if enc in ("gzip", "x-gzip"):
        return _ZlibInflater(zlib.MAX_WBITS | 16).feed
    if enc == "deflate":
        return _ZlibInflater(zlib.MAX_WBITS, raw_fallback=True).feed
    if enc == "br":
        return _BrotliInflater().feed
    raise BodyError(Outcome.badEncoding)


class _ZlibInflater:
    """gzip/deflate, bounded output per call."""

    def __init__(self, wbits: int, raw_fallback: bool = False) -> None:
        self.d = zlib.decompressobj(wbits)
        self.raw_fallback = raw_fallback  # servers send raw deflate as "deflate" too
        self.started = False

    def feed(self, chunk: bytes, max_out: int) -> bytes:
        """Decode a chunk, producing at most `max_out` + 1 bytes (+1 tells "over the limit")."""
        try:
            out = self.d.decompress(chunk, max_out + 1)
        except zlib.error:
            if self.raw_fallback and not self.started:
                self.d = zlib.decompressobj(-zlib.MAX_WBITS)
                self.raw_fallback = False
                return self.feed(chunk, max_out)
            raise BodyError(Outcome.badEncoding) from None
        self.started = True
        return out


class _BrotliInflater:
    """brotli, bounded output per call."""

    def __init__(self) -> None:
        self.d = brotli.Decompressor()

    def feed(self, chunk: bytes, max_out: int) -> bytes:
        """Decode a chunk, producing at most about `max_out` + 1 bytes."""
        try:
            out: bytes = self.d.process(chunk, output_buffer_limit=max_out + 1)
            return out
        except brotli.error:
            raise BodyError(Outcome.badEncoding) from None


async def read_body(
    resp: Response,
    limit: int,
    *,
    keep_raw: bool = False,
    limiter: Throttle | None = None,
    min_rate: float = 0.0,
    truncate: bool = False,
    memory: Reservation | None = None,
) -> Body:
    """The decoded body, at most `limit` bytes (tooBig beyond, or cut if truncate).

    With `memory`, the bytes held are taken from it first; if the body cannot be read, what
    it took is given back here, else the caller gives it back once the body is parsed."""
    try:
        return await _read_body(resp, limit, keep_raw, limiter, min_rate, truncate, memory)
    except BaseException:
        if memory is not None:
            memory.release()
        raise


async def _read_body(
    resp: Any, limit: int, keep_raw: bool, limiter: Throttle | None,
    min_rate: float, truncate: bool, memory: Reservation | None,
) -> Body:
    """`read_body`, its reservation left to the caller."""
    inflate = _inflater(resp.headers.get("Content-Encoding", ""))
    length = resp.content_length
    if length is not None and length > limit and inflate is None and not truncate:
        raise BodyError(Outcome.tooBig)  # said up front: do not read it at all
    got = _Got(memory=memory, resp=resp)
    if memory is not None and length is not None and inflate is None:
        await got.take(min(length, limit) * (2 if keep_raw else 1))  # body, and its raw copy
    limit_reading = getattr(resp, "limit_reading", None)
    if limit_reading is not None:  # http1.Response: it watches every byte and the rate itself
        limit_reading(limit, min_rate, MIN_RATE_GRACE, truncate)
        min_rate = 0.0
        whole = resp.whole_body() if inflate is None and limiter is None else None
        if whole is not None:  # all in already (the limits above saw every byte of it)
            if not _took(got, whole, whole, limit, keep_raw, truncate) and _short(got, keep_raw):
                await got.reserve(keep_raw)
            return got.body(limit, keep_raw)
    else:  # aiohttp's: its connection counts the body's bytes, if it is a CountingHandler
        from larbinpy.net import aio  # loaded already: this response is aiohttp's

        protocol = getattr(getattr(resp, "connection", None), "protocol", None)
        if isinstance(protocol, aio.CountingHandler):
            protocol.limit_reading(limit + FRAMING_ALLOWANCE)
            try:
                await _read(resp, got, limit, inflate, keep_raw, limiter, min_rate, truncate)
            except aio.PayloadError:
                if not protocol.over_budget:
                    raise
                if not truncate:  # we cut it: the body was too big, not broken
                    raise BodyError(Outcome.tooBig) from None
            finally:
                protocol.budget = None  # a kept-alive connection's next answer: its own budget
            return got.body(limit, keep_raw)
    await _read(resp, got, limit, inflate, keep_raw, limiter, min_rate, truncate)
    return got.body(limit, keep_raw)


@dataclass(slots=True)
class _Got:
    """A body as far as it was read."""

    raw: list[bytes] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    wire: int = 0
    size: int = 0
    memory: Reservation | None = None
    reserved: int = 0  # bytes taken from `memory` so far
    resp: Any = None  # the response being read
    waited: float = 0.0  # seconds spent waiting for room in `memory`

    async def reserve(self, keep_raw: bool) -> None:
        """Take from `memory` what the body holds beyond what was taken (waits for room)."""
        need = self.size + (self.wire if keep_raw else 0)
        if self.memory is not None and need > self.reserved:
            await self.take(need - self.reserved)

    async def take(self, nbytes: int) -> None:
        """Take `nbytes` more from `memory`, waiting for room; the wait is not the server's
        slowness, so minRate's clock skips it (here for aiohttp's responses; an http1.Response
        measures its rate from `started`, moved on by the wait)."""
        assert self.memory is not None
        if self.memory.take_now(nbytes):  # the common case: no wait, no coroutine
            self.reserved += nbytes
            return
        began = time.monotonic()
        await self.memory.take(nbytes)
        self.reserved += nbytes
        waited = time.monotonic() - began
        if waited > 0:
            self.waited += waited
            if hasattr(self.resp, "limit_reading"):  # http1.Response (loop clock, same pace)
                self.resp.started += waited

    def body(self, limit: int, keep_raw: bool) -> Body:
        """What was read, at most `limit` bytes of it."""
        data = b"".join(self.data)
        return Body(data[:limit], b"".join(self.raw) if keep_raw else None, self.wire)


async def _read(
    resp: Any,  # an aiohttp.ClientResponse or an http1.Response
    got: _Got,
    limit: int,
    inflate: Callable[[bytes, int], bytes] | None,
    keep_raw: bool,
    limiter: Throttle | None,
    min_rate: float,
    truncate: bool,
) -> None:
    """`read_body`'s loop: the chunks into `got` as they come, decoded, under the limits."""
    start = time.monotonic() - got.waited  # minRate's clock, less the waits for memory to come
    async for chunk in resp.content.iter_any():
        out = inflate(chunk, limit - got.size) if inflate is not None else chunk
        if _took(got, chunk, out, limit, keep_raw, truncate):
            return
        if _short(got, keep_raw):
            await got.reserve(keep_raw)
        if limiter is not None:
            await limiter.take(len(chunk))
        if min_rate:
            _check_rate(got.wire, start + got.waited, min_rate)


def _took(got: _Got, chunk: bytes, out: bytes, limit: int, keep_raw: bool,
          truncate: bool) -> bool:
    """Add a chunk as received and as decoded (`out`) to `got`: True when the body ends there
    (cut at `limit`), BodyError(tooBig) when it is over `limit` and may not be cut."""
    got.wire += len(chunk)
    if keep_raw:
        got.raw.append(chunk)
    got.size += len(out)
    got.data.append(out)
    if got.size > limit or got.wire > limit:
        if truncate:
            return True
        raise BodyError(Outcome.tooBig)
    return False


def _short(got: _Got, keep_raw: bool) -> bool:
    """Does `got` hold more than it took from its memory reservation?"""
    return got.memory is not None and got.size + (got.wire if keep_raw else 0) > got.reserved


def _check_rate(nbytes: int, start: float, min_rate: float) -> None:
    """minRate: after the grace period, a body arriving slower than min_rate since `start`
    (moved on by any wait for memory) is cut off."""
    elapsed = time.monotonic() - start
    if elapsed > MIN_RATE_GRACE and nbytes / elapsed < min_rate:
        raise BodyError(Outcome.timeout, "minRate")


def html_for_links(data: bytes, content_type: str) -> bytes:
    """The body as the link extractor should parse it: charset from the Content-Type header,
    else the page's own `<meta>`/BOM (the parser reads those), else detected (UTF-8 if it
    decodes, windows-1252 if not). Transcoded text gets a UTF-8 BOM, which the parser trusts
    over any `<meta>`. Invalid bytes become U+FFFD; nothing here raises."""
    if data.isascii():
        return data  # every ASCII-compatible charset reads it the same way: the common case
    codec = header_codec(content_type)
    if codec is None:
        if data.startswith(_BOMS) or _META_CHARSET.search(data, 0, 1024):
            return data  # the page says what it is: the parser honours it
        codec = _detect(data)
    if codec == "utf-8":
        return data if data.startswith(UTF8_BOM) else UTF8_BOM + data
    return UTF8_BOM + data.decode(codec, "replace").encode("utf-8", "replace")


def header_codec(content_type: str) -> str | None:
    """Python codec of a Content-Type's charset parameter (None when absent or unknown)."""
    m = _CHARSET_PARAM.search(content_type)
    if m is None:
        return None
    label = m.group(1).strip().lower()
    if label in _AS_CP1252:
        return "cp1252"
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return "utf-8" if name in ("utf-8", "utf-8-sig") else name


def _detect(data: bytes) -> str:
    """UTF-8 if the bytes decode as UTF-8 (a sequence cut at the end is allowed), else cp1252."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 3:
            return "cp1252"
    return "utf-8"
