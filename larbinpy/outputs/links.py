"""`output links`: the link graph as JSON lines in `saveDir/links.jsonl` (larbin's LINKS_INFO).

One line per fetched page: url, final url, status, depth (remaining depth budget, larbin's
meaning), content type, bytes, fetch time (seconds) and out-links.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..records import Page


class LinksOutput:
    """Appends one JSON object per page."""

    def __init__(self, save_dir: str) -> None:
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        self.file = open(Path(save_dir) / "links.jsonl", "a", encoding="utf-8")  # noqa: SIM115

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
        }
        self.file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        """Flush buffered lines."""
        self.file.flush()

    def close(self) -> None:
        """Close the file."""
        self.file.close()
