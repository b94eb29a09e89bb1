"""`larbinpy submit`: the input port's client — send seed URLs to a running crawler.

Exit code 0 when every URL was accepted, 1 when some were rejected or the crawler could not
be reached, 2 when the request itself was refused (bad arguments, 4xx).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence


def parser() -> argparse.ArgumentParser:
    """Command-line arguments."""
    p = argparse.ArgumentParser(prog="larbinpy submit", description=__doc__)
    p.add_argument("urls", nargs="+", help="URLs to crawl; '-' reads them from stdin")
    p.add_argument("--host", default="127.0.0.1", help="crawler address [127.0.0.1]")
    p.add_argument("--port", type=int, default=1976, help="its inputPort [1976]")
    p.add_argument("--priority", type=int, default=0, help="FIFO priority, higher first [0]")
    p.add_argument("--depth", type=int, default=None, help="depth budget [depthInSite]")
    p.add_argument("--force", action="store_true", help="crawl again even if already seen")
    p.add_argument("--token", default=None, help="the crawler's inputToken")
    p.add_argument("--tag", type=int, default=None,
                   help="an integer kept with these URLs into the outputs (larbin's URL_TAGS)")
    p.add_argument("--timeout", type=float, default=30.0)
    return p


def collect_urls(args: Sequence[str]) -> list[str]:
    """The URLs named on the command line, with '-' replaced by stdin's lines."""
    urls: list[str] = []
    for a in args:
        if a == "-":
            urls.extend(line.strip() for line in sys.stdin if line.strip())
        else:
            urls.append(a)
    return urls


def main(argv: Sequence[str]) -> int:
    """Send the URLs; report what the crawler accepted."""
    args = parser().parse_args(argv)
    body: dict[str, object] = {"urls": collect_urls(args.urls), "priority": args.priority,
                               "force": args.force}
    if args.depth is not None:
        body["depth"] = args.depth
    if args.tag is not None:
        body["tag"] = args.tag
    host = f"[{args.host}]" if ":" in args.host else args.host
    req = urllib.request.Request(
        f"http://{host}:{args.port}/urls", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    if args.token:
        req.add_header("Authorization", f"Bearer {args.token}")
    try:
        with urllib.request.urlopen(req, timeout=args.timeout) as resp:
            answer = json.load(resp)
    except urllib.error.HTTPError as exc:
        print(f"larbinpy submit: refused ({exc.code}): {exc.read().decode(errors='replace')}",
              file=sys.stderr)
        return 2
    except (urllib.error.URLError, OSError) as exc:
        print(f"larbinpy submit: cannot reach {host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    for r in answer["rejected"]:
        print(f"rejected {r['url']}: {r['reason']}", file=sys.stderr)
    print(f"accepted {answer['accepted']}, rejected {len(answer['rejected'])}")
    return 0 if not answer["rejected"] else 1
