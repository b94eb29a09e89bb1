"""`output links`: the link graph as JSON lines in `saveDir/links.jsonl` (larbin's LINKS_INFO).

One line per fetched page: url, final url, status, depth (remaining depth budget, larbin's
meaning), content type, bytes, fetch time (seconds), fetch date, out-links and the URL's tag
(larbin's URL_TAGS; 0 when it was submitted without one).
"""

from __future__ import annotations

import json
from pathlib import Path

from larbinpy.config import Config
from larbinpy.outputs.files import AppendFile, fsync_path
from larbinpy.records import Page


def make(cfg: Config) -> LinksOutput:
    """The output for `output links`."""
    return LinksOutput(cfg.save_dir)


class LinksOutput:
    """Appends one JSON object per page."""

    name = "links"

    def __init__(self, save_dir: str) -> None:
        self.path = Path(save_dir) / "links.jsonl"
        self.file: AppendFile | None = None  # opened on the first page
        self.created = False

    def write(self, page: Page) -> None:
        """One line for one page (2xx pages only, whatever other outputs keep)."""
        if not 200 <= page.status < 300:
            return
        record = {
            "url": page.job.url,
            "final_url": page.url,
            "status": page.status,
            "depth": page.job.depth,
            "content_type": page.content_type,
            "bytes": len(page.body),
            "fetch_time": round(page.elapsed, 4),
            "fetched_at": round(page.fetched_at, 3),
            "links": page.links,
            "tag": page.job.tag,
        }
        if self.file is None:
            self.created = not self.path.exists()  # its folder entry needs an fsync too
            self.file = AppendFile(self.path)
        self.file.append((json.dumps(record, separators=(",", ":")) + "\n").encode())

    def flush(self) -> None:
        """Make the lines written so far durable (nothing is buffered)."""
        if self.file is not None:
            self.file.sync()
        if self.created:
            fsync_path(self.path.parent)
            self.created = False

    def close(self) -> None:
        """Close the file."""
        if self.file is not None:
            self.file.close()
            self.file = None
