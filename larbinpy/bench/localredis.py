"""A throwaway `redis-server` on loopback: for the cluster tests and `larbinpy bench --nodes`.

Not used by a crawl. The server gets its own free port and directory, persistence off, and is
stopped (SIGTERM, then SIGKILL) when the context ends.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

START_TIMEOUT = 10.0


def redis_server_path() -> str | None:
    """The redis-server binary, or None when it is not installed."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


def _free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _ping(port: int) -> bool:
    """Does a Redis server answer PING on this port?"""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class LocalRedis:
    """`redis-server` as a child process; a context manager giving its URL."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis://127.0.0.1:PORT/0"""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> LocalRedis:
        """Start the server and wait until it answers PING (RuntimeError if it does not)."""
        binary = redis_server_path()
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        log = open(self.dir / "redis.log", "wb")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self.proc.returncode}: "
                                   + (self.dir / "redis.log").read_text()[-500:])
            if _ping(self.port):
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not answer PING")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> LocalRedis:
        """Start."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop."""
        self.stop()
