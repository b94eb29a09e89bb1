"""What every `larbinpy bench` mode shares: the synthetic web run as a child process, and the
hash-set settings of the crawls measured.

The synthetic web (`larbinpy.bench.synth`) runs in its own process so that serving it costs
the measuring process nothing: the CPU figures are the crawler's (or the bare fetch loop's).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

READY_TIMEOUT = 30.0  # seconds for the synthetic web to listen, plus READY_PER_HOST a host
READY_PER_HOST = 1e-4  # building a million hosts' records takes a minute on a loaded machine
READY_PER_PAGE = 1e-3  # the synthetic web renders its pages before it is ready (synth.prerender)
STOP_TIMEOUT = 5.0
# larbin's one-function bitmap, as configured by default: n URLs lose about n^2 / (2 * bits)
# to false positives (a warning says so when it happens). A larger bitmap would cost RSS (every
# seen URL touches a page of the mapped file); two functions cost a second hash and a second
# page touch per link.
HASH_BITS = 1 << 28
HASH_FUNCTIONS = 1


class ChildServer:
    """A loopback web served by `python -m MODULE serve ...` in a child process, which writes
    `HTTP_PORT DNS_PORT` to a ready file once listening; a context manager."""

    def __init__(self, module: str, args: list[str], workdir: Path,
                 name: str = "web", host_count: int = 0, set_up: float = 0.0) -> None:
        """`host_count`: how many hosts it serves (the ready wait grows with them); `set_up`:
        seconds more it may take to get ready (rendering pages first)."""
        self.module, self.args, self.name = module, args, name
        self.host_count, self.set_up = host_count, set_up
        self.ready_file = workdir / f"{name}.ready"
        self.proc: subprocess.Popen[bytes] | None = None
        self.http_port = self.dns_port = 0

    def __enter__(self) -> Self:
        """Start the server and wait until it listens (RuntimeError if it does not)."""
        cmd = [sys.executable, "-m", self.module, "serve", *self.args,
               "--ready-file", str(self.ready_file)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Always stop the server."""
        self.stop()

    def _wait_ready(self) -> None:
        """Poll the ready file for `HTTP_PORT DNS_PORT`, bounded by READY_TIMEOUT."""
        assert self.proc is not None
        wait = READY_TIMEOUT + READY_PER_HOST * self.host_count + self.set_up
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}")
            if self.ready_file.exists():
                http_port, dns_port = self.ready_file.read_text().split()
                self.http_port, self.dns_port = int(http_port), int(dns_port)
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready after {wait:.0f} s")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit within STOP_TIMEOUT."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class SynthServer(ChildServer):
    """`python -m larbinpy.bench.synth serve` as a child process; a context manager."""

    def __init__(self, hosts: int, pages: int, workdir: Path, *, page_bytes: int = 15000,
                 links: int = 40, shape: str = "plain", images: int = 0,
                 serve_args: tuple[str, ...] = ()) -> None:
        self.hosts, self.pages = hosts, pages
        self.page_bytes, self.links, self.shape = page_bytes, links, shape
        # serve_args: more options of `synth serve` (e.g. --max-ips 1)
        super().__init__("larbinpy.bench.synth",
                         ["--hosts", str(hosts), "--pages", str(pages),
                          "--page-bytes", str(page_bytes), "--links", str(links),
                          "--page-shape", shape, "--http-port", "0", "--dns-port", "0",
                          "--images", str(images), *serve_args], workdir, "synthetic web", hosts,
                         READY_PER_PAGE * hosts * pages)
        self.ready_file = workdir / "synth.ready"
