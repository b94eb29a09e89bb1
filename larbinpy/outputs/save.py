"""`output save`, larbin's SIMPLE_SAVE: bodies in `saveDir/dNNNNN/fNNNNN`, an index per folder.

Each folder holds at most `FILES_PER_DIR` pages and an `index` file of lines `fNNNNN URL`.
A restarted crawl continues after the last folder instead of overwriting it.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from ..records import Page

FILES_PER_DIR = 2000  # larbin's filesPerDir


class SaveOutput:
    """Numbered files, numbered folders."""

    def __init__(self, save_dir: str) -> None:
        self.root = Path(save_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self.dir_no = self._last_dir() + 1
        self.file_no = 0
        self.index: IO[str] | None = None

    def _last_dir(self) -> int:
        """Number of the highest existing dNNNNN folder (-1 if none)."""
        numbers = [int(p.name[1:]) for p in self.root.glob("d[0-9][0-9][0-9][0-9][0-9]")]
        return max(numbers, default=-1)

    def _folder(self) -> Path:
        """The current folder, opening a new one (and its index) when the last is full."""
        folder = self.root / f"d{self.dir_no:05d}"
        if self.index is None or self.file_no >= FILES_PER_DIR:
            if self.index is not None:
                self.index.close()
                self.dir_no += 1
                self.file_no = 0
                folder = self.root / f"d{self.dir_no:05d}"
            folder.mkdir(parents=True, exist_ok=True)
            self.index = open(folder / "index", "a", encoding="utf-8")  # noqa: SIM115
        return folder

    def write(self, page: Page) -> None:
        """Write the body to the next fNNNNN and index it (2xx pages only)."""
        if not 200 <= page.status < 300:
            return
        folder = self._folder()
        name = f"f{self.file_no:05d}"
        (folder / name).write_bytes(page.body)
        assert self.index is not None
        self.index.write(f"{name} {page.url}\n")
        self.file_no += 1

    def flush(self) -> None:
        """Flush the index."""
        if self.index is not None:
            self.index.flush()

    def close(self) -> None:
        """Close the index."""
        if self.index is not None:
            self.index.close()
            self.index = None
