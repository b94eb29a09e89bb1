"""pywb, the web-archive replay tool, as a test harness: index WARC files, replay captures.

pywb pins redis 2.10 (and brings brotlipy, which shadows the `brotli` module), so it cannot share
larbinpy's venv (redis >= 5 for the cluster): it lives in its own, `.venv-pywb` in the checkout
(`make .venv-pywb`), or where LARBINPY_PYWB names (a directory holding `wb-manager` and
`wayback`). A `Pywb` puts the WARC files in a collection (`wb-manager init` / `add`), serves
it with `wayback` on loopback in a child process, and answers through pywb's own HTTP API:
the CDX index of a URL's captures (`/coll/cdx`), and the body pywb replays for a capture
(`/coll/{timestamp}id_/{url}`: the `id_` form serves the archived payload unchanged).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0  # wayback's first start imports gevent and builds its templates
COLLECTION = "larbinpy"


def pywb_bin() -> Path | None:
    """The directory of pywb's commands, or None when pywb is not installed."""
    where = os.environ.get("LARBINPY_PYWB")
    for d in ([Path(where)] if where else []) + [CHECKOUT / ".venv-pywb" / "bin"]:
        if (d / "wb-manager").exists() and (d / "wayback").exists():
            return d
    found = shutil.which("wb-manager")
    return Path(found).parent if found else None


@dataclass(frozen=True)
class Capture:
    """One line of pywb's CDX index for a URL."""

    timestamp: str  # 14 digits, UTC
    mime: str  # "warc/revisit" for a revisit record
    status: str  # the HTTP status recorded ("-" for a revisit)
    digest: str


class Pywb:
    """A pywb collection of WARC files, replayed by `wayback` on 127.0.0.1; a context manager."""

    def __init__(self, warcs: list[Path], workdir: Path) -> None:
        bin_dir = pywb_bin()
        if bin_dir is None:
            raise RuntimeError("pywb is not installed: make .venv-pywb")
        self.bin, self.workdir, self.warcs = bin_dir, workdir, warcs
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def _run(self, *args: str) -> None:
        """A wb-manager command in the work directory (it must succeed)."""
        subprocess.run([str(self.bin / "wb-manager"), *args], cwd=self.workdir, check=True,
                       capture_output=True, timeout=120)

    def __enter__(self) -> Pywb:
        """Index the WARCs, start wayback and wait until it answers."""
        self._run("init", COLLECTION)
        for warc in self.warcs:
            self._run("add", COLLECTION, str(warc))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        log = open(self.workdir / "wayback.log", "wb")  # noqa: SIM115 (the child writes it)
        self.proc = subprocess.Popen(
            [str(self.bin / "wayback"), "-b", "127.0.0.1", "-p", str(self.port)],
            cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Always stop wayback."""
        self.stop()

    def _wait_ready(self) -> None:
        """Poll the collection's page until wayback answers, bounded by START_TIMEOUT."""
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("wayback exited: "
                                   + (self.workdir / "wayback.log").read_text()[-2000:])
            try:
                self._get(f"/{COLLECTION}/cdx?url=example.com")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"wayback not answering after {START_TIMEOUT:.0f} s")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit within 5 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _get(self, path: str) -> tuple[int, bytes]:
        """GET from wayback: (status, body), an HTTP error status included."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def captures(self, url: str) -> list[Capture]:
        """Every capture of `url` pywb indexed, oldest first."""
        status, body = self._get(f"/{COLLECTION}/cdx?"
                                 + urllib.parse.urlencode({"url": url, "output": "json"}))
        assert status == 200, (status, body[:300])
        rows = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        return [Capture(r["timestamp"], r.get("mime", ""), r.get("status", "-"),
                        r.get("digest", "")) for r in rows]

    def replay(self, url: str, timestamp: str) -> tuple[int, bytes]:
        """(status, body) pywb serves for the capture of `url` at `timestamp`."""
        return self._get(f"/{COLLECTION}/{timestamp}id_/{url}")

    def replay_all(self, url: str) -> list[tuple[Capture, int, bytes]]:
        """Every capture of `url` with the status and body pywb replays for it."""
        return [(c, *self.replay(url, c.timestamp)) for c in self.captures(url)]


class ProxyPywb(Pywb):
    """pywb in proxy mode: a browser pointed at it (`--proxy-server`, or a DevTools browser
    context's proxyServer) asks for the original URLs and gets the collection's latest
    capture of each, or pywb's "not in archive" page (a 404). Content is rewritten only to
    insert pywb's own scripts (its `bn_` mode); the banner is off, so the page looks as it was
    archived."""

    def __enter__(self) -> ProxyPywb:
        """Write pywb's config.yaml, then index and start as `Pywb` does."""
        (self.workdir / "config.yaml").write_text(
            f"proxy:\n  coll: {COLLECTION}\n  recording: false\n  enable_banner: false\n")
        super().__enter__()
        return self

    @property
    def proxy(self) -> str:
        """host:port to give a browser as its HTTP proxy."""
        return f"127.0.0.1:{self.port}"
