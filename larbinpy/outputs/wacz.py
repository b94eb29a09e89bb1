"""`larbinpy wacz DIR -o FILE`: a crawl's WARC files packed as a WACZ (Web Archive Collection
Zipped), the file ReplayWeb.page opens.

The ZIP holds, as the WACZ specification lays them out:
- `archive/NAME.warc.gz`: every closed WARC file of DIR (stored, not compressed again, so a
  reader can fetch a record by its offset);
- `indexes/index.cdx.gz` and `indexes/index.idx`: the CDXJ indexes beside the WARC files
  (`cdxj.py`) merged into one sorted index, gzipped in blocks of `INDEX_BLOCK` lines with
  `index.idx` saying where each block starts (cdxj-indexer's compressed form, as py-wacz
  writes it); a WARC file without its index is indexed by reading it;
- `pages/pages.jsonl`: every HTML page archived in full (a 2xx `text/html` or XHTML response
  record: a noDup or recrawl revisit is not listed again), with its URL, timestamp and the
  `<title>` read from the record at pack time (reading only those records, found through the
  index: no page costs the crawl anything);
- `datapackage.json`: each file's path, size and sha256, and `datapackage-digest.json`, the
  sha256 of `datapackage.json`.

Two departures from WACZ 1.2.0, for the tools that read WACZ today: `profile` is
`data-package` (the validator's frictionless refuses `wacz`, which it cannot resolve) and
`wacz_version` is `1.1.1` (the only version the `wacz` package's validator accepts).

Memory is bounded whatever the crawl's size: files are streamed, indexes merged as sorted
streams, and only the offsets of one WARC file's HTML records are held at a time.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import heapq
import io
import json
import logging
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from cdxj_indexer.main import CompressedWriter
from warcio.archiveiterator import ArchiveIterator

from larbinpy import __version__
from larbinpy.outputs.cdxj import index_name, index_warc

log = logging.getLogger("larbinpy.wacz")

INDEX_BLOCK = 1024  # CDXJ lines a gzip block of index.cdx.gz (py-wacz's and ArchiveWeb.page's)
COPY_CHUNK = 1 << 20
TITLE_WINDOW = 1 << 20  # bytes of a page read for its <title> (it is in the <head>)
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
WACZ_VERSION = "1.1.1"
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([-\w.:]+)""", re.IGNORECASE)
_CHARSET = re.compile(r"charset\s*=\s*[\"']?([-\w.:]+)", re.IGNORECASE)


class WaczError(Exception):
    """DIR cannot be packed (no WARC files, unreadable...): the message says why."""


@dataclass
class Packed:
    """What went into a WACZ: for the command's summary and the tests."""

    warcs: list[str] = field(default_factory=list)
    warc_bytes: int = 0
    captures: int = 0  # CDXJ lines
    pages: int = 0
    indexed_by_reading: list[str] = field(default_factory=list)  # WARCs without their index


class Hashing(io.RawIOBase):
    """A writable stream that passes bytes on and keeps their sha256 and count."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]  # bytes in, as io wants
        self.out.write(data)
        self.sha.update(data)
        self.size += len(data)
        return len(data)

    def resource(self, path: str) -> dict[str, object]:
        """Its entry of datapackage.json's resources."""
        return {"name": os.path.basename(path).lower(), "path": path,
                "hash": f"sha256:{self.sha.hexdigest()}", "bytes": self.size}


def find_warcs(folder: Path) -> list[Path]:
    """The closed WARC files of a crawl's saveDir, in name (so crawl) order."""
    if not folder.is_dir():
        raise WaczError(f"{folder} is not a directory")
    warcs = sorted(p for p in folder.iterdir()
                   if p.name.endswith((".warc.gz", ".warc")) and p.is_file())
    unfinished = sorted(p.name for p in folder.glob("*.warc.gz.open"))
    if unfinished:
        log.warning("left out, unfinished (a crawl running, or killed): %s", ", ".join(unfinished))
    if not warcs:
        raise WaczError(f"{folder} has no WARC files (*.warc.gz): was it crawled with "
                        "`output warc`?")
    return warcs


def pack(folder: Path, target: Path, title: str | None = None) -> Packed:
    """Pack the WARC files of `folder` and their indexes into the WACZ `target` (written as
    `target.tmp`, renamed when complete)."""
    warcs = find_warcs(folder)
    packed = Packed()
    tmp = target.with_name(target.name + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
            resources = _pack_into(zf, warcs, packed)
            package = datapackage(resources, title or f"larbinpy crawl of {folder.name}")
            package_bytes = json.dumps(package, indent=2).encode()
            zf.writestr(_entry("datapackage.json", deflate=True), package_bytes)
            digest = {"path": "datapackage.json",
                      "hash": f"sha256:{hashlib.sha256(package_bytes).hexdigest()}"}
            zf.writestr(_entry("datapackage-digest.json", deflate=True),
                        json.dumps(digest, indent=2).encode())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return packed


def _pack_into(zf: zipfile.ZipFile, warcs: list[Path], packed: Packed) -> list[dict[str, object]]:
    """The WARC files, the pages and the index into `zf`; their resources."""
    resources = []
    indexes = []
    with contextlib.ExitStack() as stack:
        for warc in warcs:
            resources.append(_copy(zf, warc, f"archive/{warc.name}"))
            packed.warcs.append(warc.name)
            packed.warc_bytes += warc.stat().st_size
            index = index_name(warc)
            if not index.is_file():
                log.warning("%s has no index beside it: indexing it by reading it", warc.name)
                packed.indexed_by_reading.append(warc.name)
                made = stack.enter_context(_scratch_index(warc))
                index = made
            indexes.append((warc, index))
        resources.append(_pages(zf, indexes, packed))
        resources += _merged_index(zf, [i for _, i in indexes], packed)
    return resources


@contextlib.contextmanager
def _scratch_index(warc: Path) -> Iterator[Path]:
    """The index of a WARC file made by reading it, in a temporary file removed afterwards."""
    import tempfile

    fd, name = tempfile.mkstemp(suffix=".cdxj")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            index_warc(warc, f)
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def _entry(path: str, deflate: bool = False) -> zipfile.ZipInfo:
    """A ZIP entry dated now, compressed or stored."""
    info = zipfile.ZipInfo(path, datetime.now(UTC).timetuple()[:6])
    info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    return info


def _copy(zf: zipfile.ZipFile, source: Path, path: str) -> dict[str, object]:
    """A file into the ZIP, stored (WARC files are gzip already), hashed on the way."""
    info = zipfile.ZipInfo.from_file(source, path)
    info.compress_type = zipfile.ZIP_STORED
    with open(source, "rb") as src, zf.open(info, "w", force_zip64=True) as dst:
        out = Hashing(dst)
        while chunk := src.read(COPY_CHUNK):
            out.write(chunk)
    return out.resource(path)


def _merged_index(zf: zipfile.ZipFile, indexes: list[Path],
                  packed: Packed) -> list[dict[str, object]]:
    """The per-file indexes merged (each is sorted) into `indexes/index.cdx.gz`, and the
    `indexes/index.idx` that finds its blocks."""
    idx = io.StringIO()  # one line a block of INDEX_BLOCK lines: small
    with contextlib.ExitStack() as stack, \
            zf.open(_entry("indexes/index.cdx.gz"), "w", force_zip64=True) as data:
        files = [stack.enter_context(open(i, encoding="utf-8")) for i in indexes]
        out = Hashing(data)
        writer = CompressedWriter(idx, data_out=out, num_lines=INDEX_BLOCK,
                                  data_out_name="index.cdx.gz", digest_records=True)
        last = None
        for line in heapq.merge(*files):
            if line != last:  # the same capture indexed twice is listed once
                writer.write(line)
                packed.captures += 1
            last = line
        if writer.block:
            writer.flush()
        cdx = out.resource("indexes/index.cdx.gz")
    idx_bytes = idx.getvalue().encode()
    zf.writestr(_entry("indexes/index.idx", deflate=True), idx_bytes)
    return [cdx, {"name": "index.idx", "path": "indexes/index.idx",
                  "hash": f"sha256:{hashlib.sha256(idx_bytes).hexdigest()}",
                  "bytes": len(idx_bytes)}]


def _pages(zf: zipfile.ZipFile, indexes: list[tuple[Path, Path]],
           packed: Packed) -> dict[str, object]:
    """`pages/pages.jsonl`: every HTML page archived in full, in crawl order, with its title."""
    with zf.open(_entry("pages/pages.jsonl", deflate=True), "w", force_zip64=True) as data:
        out = Hashing(data)
        header = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
        out.write((json.dumps(header) + "\n").encode())
        for warc, index in indexes:
            for page in warc_pages(warc, index):
                out.write((json.dumps(page) + "\n").encode())
                packed.pages += 1
        return out.resource("pages/pages.jsonl")


def html_offsets(index: Path) -> list[int]:
    """Offsets of a WARC file's full HTML responses (2xx), from its CDXJ index."""
    offsets = []
    with open(index, encoding="utf-8") as f:
        for line in f:
            fields = json.loads(line.split(" ", 2)[2])
            if fields.get("mime") in HTML_TYPES and fields.get("status", "").startswith("2"):
                offsets.append(int(fields["offset"]))
    offsets.sort()
    return offsets


def warc_pages(warc: Path, index: Path) -> Iterator[dict[str, str]]:
    """The pages.jsonl entries of one WARC file's HTML responses."""
    with open(warc, "rb") as f:
        for offset in html_offsets(index):
            f.seek(offset)
            record = next(iter(ArchiveIterator(f)), None)
            if record is None or record.rec_type != "response":
                continue
            url = record.rec_headers.get_header("WARC-Target-URI")
            ts = record.rec_headers.get_header("WARC-Date")
            # an id on every line: a reader that takes the file for a table (frictionless, in
            # the validator) finds each row filled in the header's columns
            page = {"id": hashlib.sha1(f"{ts} {url}".encode()).hexdigest()[:16], "url": url,
                    "ts": ts}
            ctype = record.http_headers.get_header("content-type") or ""
            text = title(record.content_stream().read(TITLE_WINDOW), ctype)
            if text:
                page["title"] = text
            yield page


def title(body: bytes, content_type: str = "") -> str | None:
    """A page's `<title>` as a browser shows it (entities decoded, whitespace collapsed; None
    without one), the bytes decoded with the charset of its BOM, Content-Type or `<meta>`,
    else UTF-8."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(body.decode(_codec(body, content_type), "replace"))
    node = tree.css_first("title")
    text = " ".join((node.text() if node is not None else "").split())
    return text or None


def _codec(body: bytes, content_type: str) -> str:
    """The codec a page's bytes are read with (an unknown label: UTF-8)."""
    if body.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    declared = _CHARSET.search(content_type)
    label = declared.group(1) if declared else None
    if label is None and (meta := _META_CHARSET.search(body, 0, 1024)) is not None:
        label = meta.group(1).decode("ascii", "replace")
    try:
        return codecs.lookup(label).name if label else "utf-8"
    except LookupError:
        return "utf-8"


def datapackage(resources: list[dict[str, object]], title: str) -> dict[str, object]:
    """datapackage.json: the files with their sha256, and what made them."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"profile": "data-package", "resources": resources, "wacz_version": WACZ_VERSION,
            "title": title, "created": now, "modified": now,
            "software": f"larbinpy {__version__}"}
