"""Appending to output files so that a failed write never leaves half a record behind.

Outputs write whole records (a JSON line, an index line, a WARC request/response pair) with
one call. `AppendFile` writes unbuffered and, when the write fails part-way (disk full), cuts
the file back to where the record began, so the same record can be written again once there
is space and the file stays well-formed.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

# Errors that mean "the storage cannot take writes right now" (full, read-only, not
# writable, not there): the crawl pauses and retries, instead of dropping pages.
STORAGE_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
    errno.ENOTDIR, errno.ENOENT, errno.EFBIG,
})


def is_storage_error(exc: BaseException) -> bool:
    """Does this error mean the storage is unusable for now (retry later) rather than bad data?"""
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def write_file(dir_fd: int, name: str, data: bytes,
               flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> None:
    """Create `name` in the open folder `dir_fd` and write all of `data` (plain os calls:
    no path objects, no buffered file layers; a write that fails is redone whole)."""
    fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


class AppendFile:
    """An unbuffered file written one whole record at a time, rolled back on failure."""

    def __init__(self, path: Path, exclusive: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.file = open(path, "xb" if exclusive else "ab", buffering=0)  # noqa: SIM115
        self.size = self.file.seek(0, os.SEEK_END)
        self.damaged = False  # a failed write could not be rolled back

    def append(self, data: bytes) -> None:
        """Write all of `data` or, on failure, none of it (then re-raise)."""
        start = self.size
        view = memoryview(data)
        try:
            while view:
                written = self.file.write(view)
                view = view[written:]
        except OSError:
            try:
                os.ftruncate(self.file.fileno(), start)
                self.file.seek(start)
            except OSError:
                self.damaged = True
            raise
        self.size += len(data)

    def close(self) -> None:
        """Close the file (idempotent)."""
        with contextlib.suppress(OSError):
            self.file.close()
