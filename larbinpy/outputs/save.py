"""`output save`, larbin's SIMPLE_SAVE: bodies in `saveDir/dNNNNN/fNNNNN`, an index per folder.

Each folder holds at most `FILES_PER_DIR` pages and an `index` file of lines `fNNNNN URL`, or
`fNNNNN URL TAG` for a page whose URL was submitted with a tag (larbin's URL_TAGS).
A restarted crawl continues after the last folder instead of overwriting it. Nothing is
created before the first page, so an unwritable saveDir pauses the crawl (see `Outputs`)
instead of stopping it at start.
"""

from __future__ import annotations

import os
from pathlib import Path

from larbinpy.config import Config
from larbinpy.outputs.files import AppendFile, Unsynced, write_file
from larbinpy.records import Page

FILES_PER_DIR = 2000  # larbin's filesPerDir


def make(cfg: Config) -> SaveOutput:
    """The output for `output save`."""
    return SaveOutput(cfg.save_dir)


class SaveOutput:
    """Numbered files, numbered folders."""

    name = "save"

    def __init__(self, save_dir: str) -> None:
        self.root = Path(save_dir)
        self.dir_no = -1  # found on the first write
        self.file_no = 0
        self.index: AppendFile | None = None
        self.dir_fd = -1  # the current folder, open: files are created relative to it
        self.folder = str(self.root)
        self.unsynced = Unsynced()  # made durable by flush(), at each checkpoint

    def _last_dir(self) -> int:
        """Number of the highest existing dNNNNN folder (-1 if none)."""
        numbers = [int(p.name[1:]) for p in self.root.glob("d[0-9][0-9][0-9][0-9][0-9]")]
        return max(numbers, default=-1)

    def _folder(self) -> AppendFile:
        """The current folder's index, opening a new folder when the last is full."""
        if self.index is not None and self.file_no >= FILES_PER_DIR:
            self._close_folder()
            self.dir_no += 1
            self.file_no = 0
        if self.index is None:
            if self.dir_no < 0:
                self.dir_no = self._last_dir() + 1
            folder = self.root / f"d{self.dir_no:05d}"
            folder.mkdir(parents=True, exist_ok=True)
            self.unsynced.changed(self.root)
            self.unsynced.changed(self.root.parent)
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                self.index = AppendFile(folder / "index")
            except OSError:
                os.close(dir_fd)  # the write is retried later: no descriptor left behind
                raise
            self.dir_fd = dir_fd
            self.folder = str(folder)
        return self.index

    def write(self, page: Page) -> None:
        """Write the body to the next fNNNNN and index it (2xx pages only)."""
        if not 200 <= page.status < 300:
            return
        index = self._folder()
        name = f"f{self.file_no:05d}"
        write_file(self.dir_fd, name, page.body)  # relative to the open folder
        tag = page.job.tag
        line = f"{name} {page.url} {tag}\n" if tag else f"{name} {page.url}\n"
        index.append(line.encode())
        self.file_no += 1
        self.unsynced.wrote(self.folder, name, "index")

    def _close_folder(self) -> None:
        """Close the folder's index and descriptor."""
        if self.index is not None:
            self.index.close()
            self.index = None
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def flush(self) -> None:
        """Make the pages written since the last call durable: files, indexes, folders."""
        self.unsynced.sync()

    def close(self) -> None:
        """Close the index."""
        self._close_folder()
