"""`larbinpy submit`: the input port's client — send seed URLs to a running crawler.

It reads the crawler's larbin.conf (`-c`, else ./larbin.conf when there is one) for the input
port, the address and the token, and splits a long list into requests within the crawler's
`inputMaxUrls` and `inputMaxBody`, sent as they are read (`-`: stdin, streamed), so a list
of millions costs the memory of one request; a rejected URL is named with its line of stdin
(or its argument). The token may come from the environment (LARBINPY_TOKEN) so
that it is not on the command line, where `ps` shows it.

Exit code 0 when every URL was accepted, 1 when some were rejected or the crawler could not
be reached, 2 when the request itself was refused (bad arguments, a bad larbin.conf, 4xx).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from larbinpy.config import Config, load_config

TOKEN_ENV = "LARBINPY_TOKEN"
DEFAULT_PORT = 1976  # larbin's input port
BODY_MARGIN = 256  # bytes of the JSON body that are not URLs (fields, brackets)


def parser() -> argparse.ArgumentParser:
    """Command-line arguments."""
    p = argparse.ArgumentParser(prog="larbinpy submit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("urls", nargs="+", help="URLs to crawl; '-' reads them from stdin")
    p.add_argument("-c", "--config", default=None,
                   help="the crawler's larbin.conf, for its inputPort, httpHost, inputToken "
                   "and limits [./larbin.conf if present]")
    p.add_argument("--host", default=None, help="crawler address [httpHost, else 127.0.0.1]")
    p.add_argument("--port", type=int, default=None, help=f"its inputPort [{DEFAULT_PORT}]")
    p.add_argument("--priority", type=int, default=0, help="FIFO priority, higher first [0]")
    p.add_argument("--depth", type=int, default=None, help="depth budget [depthInSite]")
    p.add_argument("--force", action="store_true", help="crawl again even if already seen")
    p.add_argument("--token", default=None,
                   help=f"the crawler's inputToken [${TOKEN_ENV}, else larbin.conf's]")
    p.add_argument("--tag", type=int, default=None,
                   help="an integer kept with these URLs into the outputs (larbin's URL_TAGS)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait for each request's answer [30]")
    return p


@dataclass
class Target:
    """Where and how to send: the input port, its token and its limits."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    max_urls: int = 10_000
    max_body: int = 2**20
    off: str | None = None  # why the config gives no port


def target(args: argparse.Namespace) -> Target:
    """The crawler to send to: larbin.conf's settings, overridden by the options."""
    path = args.config or ("larbin.conf" if Path("larbin.conf").is_file() else None)
    t = Target() if path is None else _from_config(load_config(path))
    if args.host is not None:
        t.host = args.host
    if args.port is not None:
        t.port, t.off = args.port, None
    t.token = args.token or os.environ.get(TOKEN_ENV) or t.token
    return t


def _from_config(cfg: Config) -> Target:
    """A crawler's input port as its larbin.conf sets it."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(cfg.http_host,
                                                                      cfg.http_host)
    off = None if cfg.input_port else f"{cfg.path} sets inputPort 0 (the port is off)"
    return Target(host, cfg.input_port or DEFAULT_PORT, cfg.input_token, cfg.input_max_urls,
                  cfg.input_max_body, off)


def given_urls(args: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(where, URL) of each URL named on the command line, '-' standing for stdin's lines,
    read as they are sent (a list of millions is never held whole); `where` names the line
    or the argument, for the rejected ones."""
    for n, a in enumerate(args, 1):
        if a != "-":
            yield f"argument {n}", a
            continue
        for number, line in enumerate(sys.stdin, 1):
            url = line.strip()
            if url:
                yield f"stdin line {number}", url


def batches(urls: Iterable[tuple[str, str]], max_urls: int, max_body: int,
            ) -> Iterator[list[tuple[str, str]]]:
    """The (where, URL) pairs in runs that each fit one request: at most `max_urls` URLs, a
    JSON body within `max_body` bytes."""
    run: list[tuple[str, str]] = []
    size = BODY_MARGIN
    for item in urls:
        cost = len(json.dumps(item[1]).encode()) + 2  # the string and its ", "
        if run and (len(run) >= max_urls or size + cost > max_body):
            yield run
            run, size = [], BODY_MARGIN
        run.append(item)
        size += cost
    if run:
        yield run


def send(t: Target, body: dict[str, object], timeout: float) -> dict[str, object]:
    """POST one JSON body; the crawler's answer (HTTPError, URLError, OSError otherwise)."""
    host = f"[{t.host}]" if ":" in t.host else t.host
    req = urllib.request.Request(
        f"http://{host}:{t.port}/urls", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    if t.token:
        req.add_header("Authorization", f"Bearer {t.token}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer: dict[str, object] = json.load(resp)
    return answer


def main(argv: Sequence[str], config: str | None = None) -> int:
    """Send the URLs in batches; report what the crawler accepted. `config`: the global `-c`."""
    args = parser().parse_args(argv)
    args.config = args.config or config
    t = target(args)
    if t.off:
        print(f"larbinpy submit: {t.off}; give --port", file=sys.stderr)
        return 2
    fields: dict[str, object] = {"priority": args.priority, "force": args.force}
    if args.depth is not None:
        fields["depth"] = args.depth
    if args.tag is not None:
        fields["tag"] = args.tag
    accepted, rejected = 0, 0
    for run in batches(given_urls(args.urls), t.max_urls, t.max_body):
        try:
            answer = send(t, {"urls": [url for _, url in run], **fields}, args.timeout)
        except urllib.error.HTTPError as exc:
            print(f"larbinpy submit: refused ({exc.code}): "
                  f"{exc.read().decode(errors='replace')}", file=sys.stderr)
            return 2
        except (urllib.error.URLError, OSError) as exc:
            print(f"larbinpy submit: cannot reach {t.host}:{t.port}: {exc}", file=sys.stderr)
            return 1
        refused = answer["rejected"]
        assert isinstance(refused, list) and isinstance(answer["accepted"], int)
        where = {url: w for w, url in reversed(run)}  # the first place each URL was given
        for r in refused:
            print(f"rejected {where.get(r['url'], '?')}: {r['url']}: {r['reason']}",
                  file=sys.stderr)
        accepted, rejected = accepted + answer["accepted"], rejected + len(refused)
    print(f"accepted {accepted}, rejected {rejected}")
    return 0 if not rejected else 1
