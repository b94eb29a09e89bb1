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
import json
import logging
import os
import re
import tempfile
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


class Hashing:
    """Writes bytes on and keeps their sha256 and count."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        """Pass `data` on, counted and hashed."""
        self.out.write(data)
        self.sha.update(data)
        self.size += len(data)

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
        # the pages and the index are made in a scratch folder beside the target first: an
        # entry streamed into the ZIP at an unknown size would need ZIP64 headers, which
        # ReplayWeb.page (wabac.js) misreads on small entries
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as work, \
                zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
            resources = _pack_into(zf, warcs, Path(work), packed)
            package = datapackage(resources, title or f"larbinpy crawl of {folder.name}")
            package_bytes = json.dumps(package, indent=2).encode()
            zf.writestr(_entry("datapackage.json"), package_bytes)
            digest = {"path": "datapackage.json",
                      "hash": f"sha256:{hashlib.sha256(package_bytes).hexdigest()}"}
            zf.writestr(_entry("datapackage-digest.json"), json.dumps(digest, indent=2).encode())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return packed


def _pack_into(zf: zipfile.ZipFile, warcs: list[Path], work: Path,
               packed: Packed) -> list[dict[str, object]]:
    """The WARC files, the pages and the index into `zf` (`work`: a scratch folder); their
    resources."""
    resources = []
    indexes = []
    for warc in warcs:
        resources.append(_copy(zf, warc, f"archive/{warc.name}"))
        packed.warcs.append(warc.name)
        packed.warc_bytes += warc.stat().st_size
        index = index_name(warc)
        if not index.is_file():
            log.warning("%s has no index beside it: indexing it by reading it", warc.name)
            packed.indexed_by_reading.append(warc.name)
            index = work / f"{warc.name}.cdxj"
            with open(index, "w", encoding="utf-8") as f:
                index_warc(warc, f)
        indexes.append((warc, index))
    pages = work / "pages.jsonl"
    write_pages(pages, indexes, packed)
    resources.append(_copy(zf, pages, "pages/pages.jsonl", deflate=True))
    data, idx = work / "index.cdx.gz", work / "index.idx"
    merge_indexes(data, idx, [i for _, i in indexes], packed)
    resources.append(_copy(zf, data, "indexes/index.cdx.gz"))
    resources.append(_copy(zf, idx, "indexes/index.idx", deflate=True))
    return resources


def _entry(path: str) -> zipfile.ZipInfo:
    """A small ZIP entry dated now, compressed."""
    info = zipfile.ZipInfo(path, datetime.now(UTC).timetuple()[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _copy(zf: zipfile.ZipFile, source: Path, path: str, deflate: bool = False
          ) -> dict[str, object]:
    """A file into the ZIP, hashed on the way; stored unless `deflate` (WARC files and the
    gzipped index are read by offset). Its size is known up front, so ZIP64 headers are
    written only for an entry that needs them (over 2 GiB)."""
    info = zipfile.ZipInfo.from_file(source, path)
    info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with open(source, "rb") as src, zf.open(info, "w") as dst:
        out = Hashing(dst)
        while chunk := src.read(COPY_CHUNK):
            out.write(chunk)
    return out.resource(path)


def merge_indexes(data: Path, idx: Path, indexes: list[Path], packed: Packed) -> None:
    """The per-file indexes merged (each is sorted) into `data` (gzip blocks of INDEX_BLOCK
    lines) and `idx`, the index of the blocks (cdxj-indexer's compressed form)."""
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(i, encoding="utf-8")) for i in indexes]
        out = stack.enter_context(open(data, "wb"))
        idx_out = stack.enter_context(open(idx, "w", encoding="utf-8"))
        writer = CompressedWriter(idx_out, data_out=out, num_lines=INDEX_BLOCK,
                                  data_out_name="index.cdx.gz", digest_records=True)
        last = None
        for line in heapq.merge(*files):
            if line != last:  # the same capture indexed twice is listed once
                writer.write(line)
                packed.captures += 1
            last = line
        if writer.block:
            writer.flush()


def write_pages(path: Path, indexes: list[tuple[Path, Path]], packed: Packed) -> None:
    """pages.jsonl: every HTML page archived in full, in crawl order, with its title."""
    with open(path, "w", encoding="utf-8") as out:
        header = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
        out.write(json.dumps(header) + "\n")
        for warc, index in indexes:
            for page in warc_pages(warc, index):
                out.write(json.dumps(page) + "\n")
                packed.pages += 1


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
