"""`output mirror`, larbin's MIRROR_SAVE: each page at `saveDir/host[:port]/path`.

URL to file name (`mirror_parts`): the URL text of each path segment (the last one with
`?query` when there is a query) becomes one file name, with `%` and every character a file
system dislikes (`/ \\ : * ? " < > |`, controls, space, non-ASCII) percent-encoded, so
`unquote(name)` gives the URL text back; a folder URL is saved as `index.html`; `.` and `..`
become `%2E` and `%2E%2E`, an empty segment `%`; names longer than NAME_MAX bytes are cut and
end with a hash of the whole name. The port is kept only when not the scheme's default.

Security: nothing is ever written outside saveDir. Names never contain a separator and are
never `.` or `..`; every folder below saveDir is opened relative to its parent with
O_NOFOLLOW, so a symbolic link planted in saveDir is refused, not followed; files are written
to a temporary name and renamed into place (a crash never leaves half a page under the real
name). A refused page is logged and counted (`UnsafePath`), and the crawl goes on.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from pathlib import Path
from urllib.parse import urlsplit

from larbinpy.config import Config
from larbinpy.outputs.files import Unsynced, write_file
from larbinpy.records import Page

NAME_MAX = 240  # bytes per name: under the usual 255, with room for the temporary suffix
PATH_MAX = 3000  # bytes below saveDir before the whole path is replaced by a hash
TMP_SUFFIX = "%tmp"  # never produced by the encoding: `%` is always followed by 2 hex digits
INDEX = "index.html"
DEFAULT_PORTS = {"http": 80, "https": 443}
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC

# `%`, separators, Windows' reserved characters, controls, space, DEL and non-ASCII
_UNSAFE = re.compile(r'[%/\\:*?"<>|\x00-\x20\x7f-\U0010ffff]')


class UnsafePath(ValueError):
    """A page whose file would be outside saveDir or behind a symbolic link: not written."""


def make(cfg: Config) -> MirrorOutput:
    """The output for `output mirror`."""
    return MirrorOutput(cfg.save_dir)


def encode_name(text: str) -> str:
    """One URL segment (or segment?query) as a safe, reversible file name."""
    if text == "":
        return "%"
    if text in (".", ".."):
        return "%2E" * len(text)
    name = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), text)
    if len(name) > NAME_MAX:  # names are ASCII: characters are bytes
        digest = hashlib.sha256(name.encode()).hexdigest()[:20]
        name = name[: NAME_MAX - 21] + "~" + digest
    return name


def host_dir(url: str) -> str:
    """`host` or `host:port` (port only when not the default), as a safe name."""
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafePath(f"no host in {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise UnsafePath(f"bad port in {url!r}") from None
    name = encode_name(host)
    if name in ("%", "%2E", "%2E%2E"):
        raise UnsafePath(f"bad host in {url!r}")
    if port is not None and port != DEFAULT_PORTS.get(parts.scheme):
        name += f":{port}"
    return name


def mirror_parts(url: str) -> list[str]:
    """The file of `url` below saveDir, as a list of names: [host, folders..., file]."""
    parts = urlsplit(url)
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    segments = path.split("/")  # "//x" keeps its empty first segment: no two URLs collide
    if segments[-1] == "":
        segments[-1] = INDEX
    if parts.query or url.split("#", 1)[0].endswith("?"):
        segments[-1] += "?" + parts.query
    names = [host_dir(url), *(encode_name(s) for s in segments)]
    if sum(len(n) + 1 for n in names) > PATH_MAX:
        names = [names[0], "%long", hashlib.sha256(url.encode()).hexdigest()]
    return names


class MirrorOutput:
    """Files in a tree shaped like the sites."""

    name = "mirror"

    def __init__(self, save_dir: str) -> None:
        self.root = Path(save_dir)
        self.files = 0
        self.unsynced = Unsynced()  # made durable by flush(), at each checkpoint

    def write(self, page: Page) -> None:
        """Save the decoded body of a 2xx page at its place in the tree."""
        if not 200 <= page.status < 300:
            return
        self.save(page.url, page.body)

    def save(self, url: str, body: bytes) -> None:
        """Write `body` as the file of `url`; UnsafePath if it cannot be done safely."""
        names = mirror_parts(url)
        self.root.mkdir(parents=True, exist_ok=True)
        fds = [os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        try:
            for depth, name in enumerate(names[:-1]):
                fds.append(self._folder(fds[-1], name, movable=depth > 0))
            written = self._file(fds[-1], names[-1], body)
        finally:
            for fd in fds:
                os.close(fd)
        self.files += 1
        where = self.root.joinpath(*names[:-1])
        self.unsynced.wrote(where, written)
        if written != names[-1]:  # it went into a folder of that name
            self.unsynced.changed(where / names[-1])
        for depth in range(len(names)):  # folders created or changed on the way
            self.unsynced.changed(self.root.joinpath(*names[:depth]))
        self.unsynced.changed(self.root.parent)

    def _folder(self, parent: int, name: str, movable: bool) -> int:
        """Open (creating it if needed) folder `name` in `parent`, never through a symlink."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            raise UnsafePath(f"{name} in saveDir is a symbolic link: not followed")
        if not (movable and stat.S_ISREG(mode)):
            raise UnsafePath(f"{name} in saveDir is not a folder")
        # /a was saved as a file, now /a/b needs a folder: /a becomes a/index.html
        os.rename(name, name + TMP_SUFFIX, src_dir_fd=parent, dst_dir_fd=parent)
        os.mkdir(name, 0o755, dir_fd=parent)
        folder = os.open(name, DIR_FLAGS, dir_fd=parent)
        os.rename(name + TMP_SUFFIX, INDEX, src_dir_fd=parent, dst_dir_fd=folder)
        return folder

    def _file(self, folder: int, name: str, body: bytes) -> str:
        """Write `body` to a temporary file, then rename it to `name` (or name/index.html);
        the name it got, relative to `folder`."""
        tmp = name + TMP_SUFFIX
        try:
            write_file(folder, tmp, body, FILE_FLAGS)
            return self._rename(folder, tmp, name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise

    def _rename(self, folder: int, tmp: str, name: str) -> str:
        """Move the written file into place; a folder of that name gets it as index.html."""
        try:
            os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
            return name
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise
        sub = self._folder(folder, name, movable=False)
        try:
            os.rename(tmp, INDEX, src_dir_fd=folder, dst_dir_fd=sub)
        finally:
            os.close(sub)
        return f"{name}/{INDEX}"

    def flush(self) -> None:
        """Make the files written since the last call durable, then their folders."""
        self.unsynced.sync()

    def close(self) -> None:
        """Nothing to release."""
