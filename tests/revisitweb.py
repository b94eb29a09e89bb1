"""A loopback web whose pages change when a test says so, behind honest or lying validators.

`RevisitWeb` is `LocalWeb` (larbinpy/demo/web.py: real aiohttp servers on loopback IPs, every
request recorded as a `Hit` with its headers) whose `ChangingPage`s answer conditional GETs
the way their site's `mode` says:

- `honest`: ETag (a quoted version, sent back verbatim or not at all) and Last-Modified (the
  second of the last change); 304 when If-None-Match names the current ETag or, without it,
  when the page did not change after If-Modified-Since;
- `none`: no validators, always 200;
- `lm-now`: Last-Modified is always the time of the answer; 200 always;
- `etag-churn`: a new ETag on every answer; 304 only for the current one (never matches);
- `false-304`: a 304 to every conditional request, changed or not;
- `lm-coarse`: no ETag; Last-Modified has second resolution and 304 is sent when the page's
  last change is not after If-Modified-Since's second.

Every answer is recorded (`Served`: path, status, the page's version, the validators asked)
so a test can check what the crawler was told against what was true.
"""

from __future__ import annotations

import email.utils
import math
import time
from dataclasses import dataclass, field

from aiohttp import web

from larbinpy.demo.web import LocalWeb, Page, Site


@dataclass
class ChangingPage:
    """One page: its version (bumped by `change`) and when it last changed."""

    links: tuple[str, ...] = ()
    version: int = 0
    changed_at: float = field(default_factory=lambda: time.time() - 3600)

    def change(self) -> None:
        """The page changes now."""
        self.version += 1
        self.changed_at = time.time()

    def body(self) -> str:
        """Its HTML: the version and its links."""
        anchors = "".join(f'<a href="{u}">{u}</a>' for u in self.links)
        return f"<html><body><p>version {self.version}</p>{anchors}</body></html>"


@dataclass
class Served:
    """One answer of a changing page."""

    host: str
    path: str
    status: int
    version: int
    if_none_match: str | None
    if_modified_since: str | None
    etag: str | None = None
    at: float = 0.0


def http_date(t: float) -> str:
    """An HTTP date, second resolution."""
    return email.utils.formatdate(math.floor(t), usegmt=True)


class RevisitWeb(LocalWeb):
    """LocalWeb whose sites serve `ChangingPage`s by their `modes` (see the module)."""

    def __init__(self, sites: list[Site], modes: dict[str, str],
                 pages: dict[str, dict[str, ChangingPage]]) -> None:
        super().__init__(sites)
        self.modes = modes  # host -> mode
        self.changing = pages  # host -> path -> page
        self.served: list[Served] = []
        self._churn = 0

    def answers(self, host: str, path: str) -> list[Served]:
        """What one page answered, in order."""
        return [s for s in self.served if s.host == host and s.path == path]

    async def _respond(self, request: web.BaseRequest, page: Page) -> web.StreamResponse:
        """A changing page by its site's mode; anything else as LocalWeb serves it."""
        host = request.host.rsplit(":", 1)[0]
        cp = self.changing.get(host, {}).get(request.raw_path)
        if cp is None:
            return await super()._respond(request, page)
        mode = self.modes[host]
        inm = request.headers.get("If-None-Match")
        ims = request.headers.get("If-Modified-Since")
        now = time.time()
        headers = {"Content-Type": "text/html", "Date": http_date(now)}
        etag = None
        if mode == "honest":
            etag = f'W/"v{cp.version}-x"'
        elif mode == "etag-churn":
            self._churn += 1
            etag = f'"churn-{self._churn}"'
        if etag is not None:
            headers["ETag"] = etag
        if mode in ("honest", "lm-coarse", "false-304"):
            headers["Last-Modified"] = http_date(cp.changed_at)
        elif mode == "lm-now":
            headers["Last-Modified"] = http_date(now)
        status = 200
        since = email.utils.parsedate_to_datetime(ims).timestamp() if ims else None
        if mode == "false-304" and (inm or ims):
            status = 304
        elif mode in ("honest", "etag-churn") and inm is not None:
            status = 304 if inm == etag else 200
        elif mode in ("honest", "lm-coarse") and since is not None:
            status = 304 if math.floor(cp.changed_at) <= since else 200
        self.served.append(Served(host, request.raw_path, status, cp.version, inm, ims, etag,
                                  now))
        body = cp.body().encode() if status == 200 else b""
        resp = web.Response(body=body, status=status, headers=headers)
        await resp.prepare(request)
        await resp.write_eof()
        return resp
