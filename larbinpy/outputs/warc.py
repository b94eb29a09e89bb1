"""`output warc`: WARC/1.1 files (gzip per record) with each exchange as it went over the wire.

Every file starts with a `warcinfo` record (software, operator `From`, user agent, a digest of
the effective configuration). Each fetch becomes a `response` record (status line and headers
as received, body before content-decoding, so `Content-Encoding` stays truthful) and a
`request` record (the request line and headers sent) linked by `WARC-Concurrent-To`, with
`WARC-Target-URI`, `WARC-Date`, `WARC-IP-Address` and SHA-1 payload and block digests. Every
status is archived, robots.txt fetches too. A noDup duplicate whose exact payload this run has
already archived becomes a `revisit` record pointing at the original; otherwise it is archived
in full (a revisit must name a payload that exists). With `recrawl on`, a revisit that found
the copy kept (`Page.revisit`) is a `revisit` record too: profile `server-not-modified` for a
304, `identical-payload-digest` for the same body, naming the original capture's URI, date
and payload digest (the schedule keeps them), so a replay tool shows every capture.

aiohttp hands the body de-chunked, so a `Transfer-Encoding` header is renamed
`X-Larbinpy-Transfer-Encoding` in the record (a reader would otherwise de-chunk it again).

Files are `saveDir/PREFIX-YYYYMMDDhhmmss-NNNNN.warc.gz`, written as `....warc.gz.open` and
renamed when closed, so a crash never leaves a half-written file that looks complete. A new
file starts once one reaches `warcMaxSize`. Records are written whole or not at all
(`AppendFile`), so a disk-full pause and retry keeps the file valid.

Beside each closed file, its CDXJ index `PREFIX-YYYYMMDDhhmmss-NNNNN.cdxj` (`cdxj.py`): each
response and revisit record's line is made as it is appended (its offset and length are known
then) and the lines are sorted off the event loop once the file is closed.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import logging
import os
import re
import socket
import time
from collections import OrderedDict
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

import warcio
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.utils import Digester
from warcio.warcwriter import WARCWriter
from yarl import URL

try:  # zlib-ng: the gzip format zlib writes, about the same size, for less CPU
    from zlib_ng import zlib_ng as zlib
except ImportError:  # pragma: no cover - a dependency; the standard zlib writes the same format
    import zlib  # type: ignore[no-redef]  # the fallback: the same compressobj

from larbinpy import __version__
from larbinpy.config import Config, describe
from larbinpy.outputs import Archive
from larbinpy.outputs.cdxj import Entry, Sorter, WarcIndex, index_name, parse_http
from larbinpy.outputs.files import AppendFile, Unsynced
from larbinpy.records import Page

log = logging.getLogger("larbinpy.outputs")

GZIP_LEVEL = 6  # gzip's default: files a little bigger than 9's for much less CPU; compression
# is most of what a record costs (figures, and why not ISA-L: docs/benchmarks.md)
# noDup: payloads remembered for its duplicates' revisit records (one string each; what that
# costs at the bound: docs/architecture.md); without noDup nothing is remembered: a recrawl's
# revisit records name the capture the schedule kept
REVISIT_MEMORY = 100_000
RENAMED_TRANSFER_ENCODING = b"X-Larbinpy-Transfer-Encoding"
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/"  # + records.Revisit.profile


def make(cfg: Config) -> WarcOutput:
    """The output for `output warc`."""
    return WarcOutput(
        cfg.save_dir, prefix=cfg.warc_prefix,
        max_size=cfg.warc_max_size, info=warcinfo_fields(cfg), dedup=cfg.no_dup,
    )


def warcinfo_fields(cfg: Config) -> dict[str, str]:
    """The `warcinfo` record's fields for this configuration."""
    # the digest identifies the configuration without publishing it (nor its inputToken)
    masked = dataclasses.replace(cfg, input_token="(set)" if cfg.input_token else None)
    digest = hashlib.sha256(describe(masked).encode()).hexdigest()
    return {
        "software": f"larbinpy/{__version__} (warcio/{_warcio_version()})",
        "format": "WARC File Format 1.1",
        "conformsTo": "https://iipc.github.io/warc-specifications/specifications/"
                      "warc-format/warc-1.1/",
        "operator": cfg.from_,
        "http-header-user-agent": cfg.user_agent,
        "http-header-from": cfg.from_,
        "robots": "obey" if cfg.robots else "ignore",
        "hostname": socket.gethostname(),
        "config-digest": f"sha256:{digest}",
    }


def _warcio_version() -> str:
    """warcio's version (for the software field)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("warcio")
    except PackageNotFoundError:  # pragma: no cover
        return getattr(warcio, "__version__", "?")


class RawHttpHeaders(StatusAndHeaders):  # type: ignore[misc]  # warcio ships no type hints
    """HTTP status line and headers whose bytes are given, not re-serialised by warcio."""

    def __init__(self, statusline: str, protocol: str, block: bytes) -> None:
        super().__init__(statusline, [], protocol=protocol)
        self.headers_buff = block

    def compute_headers_buffer(self, header_filter: Any = None) -> None:
        """Keep the bytes as exchanged (warcio would rebuild them from parsed headers)."""

    def __bool__(self) -> bool:
        """Always present (warcio skips "empty" headers, judging by parsed fields we lack)."""
        return True


def response_block(page: Page) -> bytes:
    """Status line and headers of the response, as received, up to the blank line."""
    line = f"{page.http_version} {page.status} {page.reason}".rstrip() + "\r\n"
    lines = [line.encode("latin-1", "replace")]
    for name, value in page.raw_headers or _encoded(page.headers):
        if name.lower() == b"transfer-encoding":
            name = RENAMED_TRANSFER_ENCODING  # the body we have is already de-chunked
        lines.append(name + b": " + value + b"\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


def request_block(page: Page) -> bytes:
    """Request line and headers as sent (aiohttp's view of them; Host first if missing)."""
    url = URL(page.url)
    headers = list(_encoded(page.request_headers))
    if not any(name.lower() == b"host" for name, _ in headers):
        host = url.raw_host or ""
        if url.port is not None and not url.is_default_port():
            host = f"{host}:{url.port}"
        headers.insert(0, (b"Host", host.encode("ascii", "replace")))
    lines = [f"GET {url.raw_path_qs} {page.http_version}\r\n".encode("ascii", "replace")]
    lines += [name + b": " + value + b"\r\n" for name, value in headers]
    lines.append(b"\r\n")
    return b"".join(lines)


def _encoded(headers: Any) -> list[tuple[bytes, bytes]]:
    """(name, value) byte pairs of a str mapping or multidict (empty for None)."""
    if headers is None:
        return []
    items = headers.items() if hasattr(headers, "items") else headers
    return [(str(k).encode("utf-8"), str(v).encode("utf-8")) for k, v in items]


def _truncated(page: Page, payload: bytes) -> bool:
    """Is the payload shorter than the Content-Length the server announced?"""
    for name, value in page.raw_headers:
        if name.lower() == b"content-length":
            return value.strip().isdigit() and int(value) > len(payload)
    return False


def warc_date(timestamp: float) -> str:
    """WARC/1.1 date with microseconds, UTC."""
    moment = datetime.fromtimestamp(timestamp, UTC).replace(tzinfo=None)
    date: str = datetime_to_iso_date(moment, use_micros=True)
    return date


def payload_digest(payload: bytes) -> str:
    """The WARC payload digest of these bytes (warcio's `sha1:BASE32`)."""
    digester = Digester("sha1")
    digester.update(payload)
    return str(digester)


class WarcOutput(Archive):
    """Rotating gzip WARC/1.1 files of every exchange."""

    name = "warc"

    def __init__(self, save_dir: str, prefix: str = "larbinpy", max_size: int = 1 << 30,
                 info: dict[str, str] | None = None, dedup: bool = True) -> None:
        self.root = Path(save_dir)
        self.prefix = prefix
        self.max_size = max_size
        self.info = info or {"software": f"larbinpy/{__version__}"}
        # warcio builds the records; gzip is ours (warcio compresses at level 9, see GZIP_LEVEL)
        self.writer = WARCWriter(None, gzip=False, warc_version="1.1")
        self.file: AppendFile | None = None
        self.index: WarcIndex | None = None  # the current file's CDXJ lines
        self.sorter = Sorter()  # sorts each closed file's lines into its index
        self.final_name = ""
        self.serial = -1  # found on the first file
        self.records = 0
        # payload digest -> "uri date record-id" of 2xx responses archived, for noDup's
        # revisits (`dedup`: only noDup has duplicates; kept without it, a recrawl's every
        # changed page would add one)
        self.dedup = dedup
        self.archived: OrderedDict[str, str] = OrderedDict()
        self.unsynced = Unsynced()  # finished files and folder entries, for flush()

    # --- the Archive interface ---

    def write(self, page: Page) -> None:
        """A request + response pair for one exchange (any status)."""
        self._exchange(page, duplicate=False)

    def record_robots(self, page: Page) -> None:
        """A robots.txt exchange, archived like any other."""
        self._exchange(page, duplicate=False)

    def record_duplicate(self, page: Page) -> None:
        """A noDup duplicate: a revisit when its payload was archived, else a full response."""
        self._exchange(page, duplicate=True)

    def flush(self) -> None:
        """Make the records written so far durable: the current file, finished ones, saveDir."""
        if self.file is not None:
            self.file.sync()
        self.unsynced.sync()

    def close(self) -> None:
        """Finish the current file (rename it from `.open`) and wait for the indexes."""
        try:
            self._finish()
        finally:
            self.sorter.wait()

    # --- records ---

    def _exchange(self, page: Page, duplicate: bool) -> None:
        """Build the request and response (or revisit) records and append them in one write."""
        payload = page.raw_body if page.raw_body is not None else page.body
        date = warc_date(page.fetched_at)
        extra = {"WARC-Date": date}
        if page.ip:
            extra["WARC-IP-Address"] = page.ip
        if _truncated(page, payload):
            extra["WARC-Truncated"] = "length"  # robots.txt is read up to 500 KiB only
        block = response_block(page)
        resp_headers = RawHttpHeaders(
            f"{page.status} {page.reason}".rstrip(), page.http_version, block)
        digest = payload_digest(payload)
        original = self._original(digest) if duplicate else None
        if page.revisit is not None:  # recrawl: a 304, or the body of the copy kept
            resp = self._recrawl_revisit(page, resp_headers, extra)
        elif original is not None:
            uri, when, record_id = original
            resp = self.writer.create_revisit_record(
                page.url, digest, uri, when, http_headers=resp_headers, warc_headers_dict=extra)
            resp.rec_headers.add_header("WARC-Refers-To", record_id)
        else:
            resp = self.writer.create_warc_record(
                page.url, "response", payload=BytesIO(payload), length=len(payload),
                http_headers=resp_headers, warc_headers_dict=extra)
        # response then request, each its own gzip member, linked by WARC-Concurrent-To
        req = self.writer.create_warc_record(
            page.url, "request", payload=BytesIO(), length=0,
            http_headers=RawHttpHeaders(URL(page.url).raw_path_qs, "GET", request_block(page)),
            warc_headers_dict=dict(extra))
        req.rec_headers.add_header("WARC-Concurrent-To",
                                   resp.rec_headers.get_header("WARC-Record-ID"))
        resp_member, req_member = self._member(resp), self._member(req)
        entry = Entry(page.url, date, resp.rec_type,
                      resp.rec_headers.get_header("WARC-Payload-Digest"),
                      parse_http(block if resp.http_headers else None), len(resp_member))
        self._append(resp_member + req_member, entry)
        self.records += 2
        if (self.dedup and original is None and page.revisit is None
                and 200 <= page.status < 300):
            self._remember(digest, page.url, date, resp.rec_headers.get_header("WARC-Record-ID"))

    def _recrawl_revisit(self, page: Page, http_headers: RawHttpHeaders,
                         extra: dict[str, str]) -> Any:
        """A revisit record of the original capture the recrawl kept: its URI, date and
        payload digest, with the profile of what this fetch found (a 304, an identical body)."""
        revisit = page.revisit
        assert revisit is not None
        digest = "sha1:" + base64.b32encode(revisit.payload_digest).decode("ascii")
        # a 304's record has no block: its headers would replay (pywb) as a 304 without a
        # body instead of the original capture it stands for
        record = self.writer.create_revisit_record(
            page.url, digest, revisit.refers_to_uri, warc_date(revisit.refers_to_date),
            http_headers=http_headers if revisit.profile != "server-not-modified" else None,
            warc_headers_dict=extra)
        record.rec_headers.replace_header("WARC-Profile", REVISIT_PROFILE + revisit.profile)
        return record

    def _member(self, record: Any) -> bytes:
        """One record as one gzip member (warcio serialises, we compress at GZIP_LEVEL)."""
        buffer = BytesIO()
        self.writer.out = buffer
        self.writer.write_record(record)
        gz = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        return gz.compress(buffer.getvalue()) + gz.flush()

    def _remember(self, digest: str, uri: str, date: str, record_id: str) -> None:
        """Remember an archived payload for later revisits (bounded, oldest forgotten): one
        string (a URI has no space; the date and the record id neither)."""
        self.archived[digest] = f"{uri} {date} {record_id}"
        if len(self.archived) > REVISIT_MEMORY:
            self.archived.popitem(last=False)

    def _original(self, digest: str) -> tuple[str, str, str] | None:
        """(uri, date, record id) of the archived response with this payload, if remembered."""
        kept = self.archived.get(digest)
        if kept is None:
            return None
        uri, date, record_id = kept.split(" ", 2)
        return uri, date, record_id

    # --- files ---

    def _append(self, data: bytes, entry: Entry) -> None:
        """Append records to the current file, starting a new one when needed; `entry` is
        the first record's, for the index."""
        if self.file is not None and self.file.damaged:
            log.error("WARC file %s.open was damaged by a failed write; starting another",
                      self.final_name)
            self.file.close()
            self.file = None
            if self.index is not None:
                self.index.discard()
                self.index = None
        if self.file is None:
            self._start()
        assert self.file is not None and self.index is not None
        offset = self.file.size
        self.file.append(data)
        self.index.add(entry, offset)
        if self.file.size >= self.max_size:
            try:
                self._finish()
            except OSError as exc:  # the records are written: never report this page failed
                log.error("could not rename WARC file %s.open: %s", self.final_name, exc)
                self.file = None

    def _start(self) -> None:
        """Open the next `.open` file and write its warcinfo record."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.serial < 0:
            self.serial = self._last_serial()
        self.serial += 1
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        self.final_name = f"{self.prefix}-{stamp}-{self.serial:05d}.warc.gz"
        path = self.root / (self.final_name + ".open")
        self.file = AppendFile(path, exclusive=True)
        self.unsynced.changed(self.root)
        self.unsynced.changed(self.root.parent)
        info = self.writer.create_warcinfo_record(self.final_name, self.info)
        try:
            self.file.append(self._member(info))
            self.index = WarcIndex(self.final_name, self.root)
        except OSError:
            self.file.close()
            self.file = None
            path.unlink(missing_ok=True)  # an empty file would only confuse
            raise

    def _last_serial(self) -> int:
        """Highest serial of this prefix's files in saveDir (-1 if none): names stay unique."""
        pattern = re.compile(re.escape(self.prefix) + r"-\d{14}-(\d{5,})\.warc\.gz(\.open)?$")
        serials = [int(m.group(1)) for p in self.root.iterdir() if (m := pattern.match(p.name))]
        leftovers = [p.name for p in self.root.glob(f"{self.prefix}-*.warc.gz.open")]
        if leftovers:
            log.warning("unfinished WARC files from an earlier run left as they are: %s",
                        ", ".join(sorted(leftovers)))
        self._index_unindexed(pattern)
        return max(serials, default=-1)

    def _index_unindexed(self, pattern: re.Pattern[str]) -> None:
        """Closed files of this prefix without their index (an earlier run was killed between
        a file's close and its index, or predates indexes) are indexed by reading them."""
        for path in sorted(self.root.iterdir()):
            if pattern.match(path.name) and not path.name.endswith(".open") \
                    and not index_name(path).exists():
                log.warning("WARC file %s has no CDXJ index: indexing it", path.name)
                self.sorter.index(path)

    def _finish(self) -> None:
        """Close the current file, give it its final name and have its index sorted."""
        if self.file is None:
            return
        self.file.close()
        final = self.root / self.final_name
        index, self.index = self.index, None
        if self.file.damaged:
            log.error("WARC file %s left as .open: a failed write could not be undone", final)
            if index is not None:
                index.discard()
        else:
            try:
                os.replace(self.file.path, final)
            except OSError:
                if index is not None:
                    index.discard()
                raise
            self.unsynced.wrote(self.root, final.name)
            if index is not None:
                self.sorter.submit(final, index)
        self.file = None
