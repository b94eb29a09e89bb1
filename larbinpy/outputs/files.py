"""Appending to output files so that a failed write never leaves half a record behind.

Outputs write whole records (a JSON line, an index line, a WARC request/response pair) with
one call. `AppendFile` writes unbuffered and, when the write fails part-way (disk full), cuts
the file back to where the record began, so the same record can be written again once there
is space and the file stays well-formed.

Durability: nothing is fsynced on the hot path. `Unsynced` remembers which files and folders
were written since the last checkpoint, and its `sync()` (an output's `flush()`, called by the
checkpoint before it records positions past those pages) fsyncs each file, then each folder
once, so a power loss cannot take a page the checkpoint says was done.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeGuard

# Errors that mean "the storage cannot take writes right now" (full, read-only, not
# writable, not there, or the process is out of descriptors or memory): the crawl pauses and
# retries, instead of dropping pages.
STORAGE_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
    errno.ENOTDIR, errno.ENOENT, errno.EFBIG, errno.EMFILE, errno.ENFILE, errno.ENOMEM,
})


def is_storage_error(exc: BaseException) -> TypeGuard[OSError]:
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


SYNCFS_FILES = 32  # from this many files on one file system, one syncfs() replaces their fsyncs


@functools.cache
def _load_syncfs() -> Callable[[int], int] | None:
    """Linux's syncfs(2) from the C library, or None (looked up at the first checkpoint:
    ctypes is not worth loading at every start)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


def syncfs(path: str | Path) -> bool:
    """Flush the whole file system holding `path` (one journal commit instead of one per
    file; it also writes other processes' data); False where syncfs(2) is missing."""
    call = _load_syncfs()
    if call is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if call(fd) != 0:  # since Linux 5.8 it reports write-back errors
            import ctypes

            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(path))
    finally:
        os.close(fd)
    return True


def fsync_path(path: str | Path) -> None:
    """Fsync a file or folder by name (a file already closed, a folder's entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Unsynced:
    """Files and folders written since the last `sync()`: what a checkpoint must make durable."""

    def __init__(self) -> None:
        self.files: dict[str, set[str]] = {}  # folder -> names written in it
        self.folders: set[str] = set()  # folders whose entries changed (created, renamed)

    def wrote(self, folder: str | Path, *names: str) -> None:
        """Files `names` in `folder` were created or written (their folder's entries too)."""
        key = str(folder)
        known = self.files.get(key)
        if known is None:
            known = self.files[key] = set()
        known.update(names)
        self.folders.add(key)

    def changed(self, folder: str | Path) -> None:
        """An entry of `folder` was created, renamed or removed."""
        self.folders.add(str(folder))

    def __bool__(self) -> bool:
        return bool(self.files or self.folders)

    def _syncfs_all(self) -> bool:
        """syncfs() once per file system concerned; False where syncfs(2) is missing."""
        devices: dict[int, str] = {}
        for folder in [*self.files, *self.folders]:
            with contextlib.suppress(FileNotFoundError):
                devices.setdefault(os.stat(folder).st_dev, folder)
        for folder in devices.values():
            if not syncfs(folder):
                return False
        self.files, self.folders = {}, set()
        return True

    def take(self) -> Unsynced:
        """Hand over everything recorded so far (to sync in a worker thread); start empty."""
        taken = Unsynced()
        taken.files, taken.folders = self.files, self.folders
        self.files, self.folders = {}, set()
        return taken

    def copy(self) -> Unsynced:
        """An independent copy."""
        other = Unsynced()
        other.files = {k: set(v) for k, v in self.files.items()}
        other.folders = set(self.folders)
        return other

    def merge(self, other: Unsynced) -> None:
        """Record again what `other` holds (a taken set whose sync did not complete)."""
        for folder, names in other.files.items():
            self.files.setdefault(folder, set()).update(names)
        self.folders |= other.folders

    def sync(self) -> None:
        """Fsync every file, then every folder once; what succeeded is forgotten, so after an
        OSError the next call does the rest. Many files: one syncfs() does it all."""
        if sum(map(len, self.files.values())) >= SYNCFS_FILES and self._syncfs_all():
            return
        for folder in list(self.files):
            names = self.files[folder]
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                while names:
                    name = next(iter(names))
                    try:
                        fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
                    except FileNotFoundError:  # renamed or removed since: nothing to keep
                        names.discard(name)
                        continue
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    names.discard(name)
            finally:
                os.close(dir_fd)
            del self.files[folder]
        while self.folders:
            folder = next(iter(self.folders))
            with contextlib.suppress(FileNotFoundError):
                fsync_path(folder)
            self.folders.discard(folder)


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

    def sync(self) -> None:
        """Make the records written so far durable."""
        os.fsync(self.file.fileno())

    def close(self) -> None:
        """Close the file (idempotent)."""
        with contextlib.suppress(OSError):
            self.file.close()
