"""Cookies (`cookies`, larbin's COOKIES), used by the reader: kept per site, sent back, bounded.

A `Set-Cookie` answer is kept for its site (scheme+host+port, the record politeness uses too:
a cookie never travels to another site, whatever its `Domain` says) and sent back with every
later request of that site whose path is under the cookie's `Path`. `Max-Age` <= 0 or a past
`Expires` deletes; `Secure` cookies only go back over HTTPS. Memory is bounded: a cookie over
MAX_COOKIE_BYTES is ignored, a site keeps at most MAX_PER_SITE (oldest dropped first), and at
most MAX_SITES sites keep cookies (least recently used dropped first).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

MAX_COOKIE_BYTES = 4096  # RFC 6265's minimum a browser must keep; beyond, a trap or a mistake
MAX_PER_SITE = 50
MAX_SITES = 10_000
MAX_HEADER = 8192  # bytes of Cookie header sent, at most


@dataclass(slots=True)
class Cookie:
    """One kept cookie."""

    value: str
    path: str
    secure: bool
    expires: float | None  # wall-clock time, None for a session cookie


class CookieJar:
    """Cookies of every site, bounded."""

    def __init__(self) -> None:
        self.sites: OrderedDict[str, OrderedDict[str, Cookie]] = OrderedDict()

    def header(self, site_key: str, path: str) -> str | None:
        """The Cookie header for a request to `path` on a site (None: nothing to send)."""
        jar = self.sites.get(site_key)
        if not jar:
            return None
        self.sites.move_to_end(site_key)
        now, https = time.time(), site_key.startswith("https:")
        parts: list[str] = []
        size = 0
        for name, c in list(jar.items()):
            if c.expires is not None and c.expires <= now:
                del jar[name]
                continue
            if (c.secure and not https) or not _path_matches(path, c.path):
                continue
            size += len(name) + len(c.value) + 3
            if size > MAX_HEADER:
                break
            parts.append(f"{name}={c.value}")
        return "; ".join(parts) or None

    def store(self, site_key: str, path: str, set_cookies: list[str]) -> None:
        """Keep the cookies of a response's `Set-Cookie` headers."""
        for line in set_cookies:
            parsed = parse_set_cookie(line, path)
            if parsed is None:
                continue
            name, cookie = parsed
            jar = self.sites.get(site_key)
            if jar is None:
                jar = self.sites[site_key] = OrderedDict()
                if len(self.sites) > MAX_SITES:
                    self.sites.popitem(last=False)
            self.sites.move_to_end(site_key)
            jar.pop(name, None)
            if cookie.expires is not None and cookie.expires <= time.time():
                continue  # an expiry in the past is how a server deletes a cookie
            jar[name] = cookie
            if len(jar) > MAX_PER_SITE:
                jar.popitem(last=False)


def parse_set_cookie(line: str, request_path: str) -> tuple[str, Cookie] | None:
    """(name, cookie) of one Set-Cookie value, None if malformed or too big."""
    if len(line) > MAX_COOKIE_BYTES:
        return None
    pair, *attrs = line.split(";")
    name, eq, value = pair.partition("=")
    name, value = name.strip(), value.strip()
    if not eq or not name or any(c in name for c in " \t,") or "\r" in line or "\n" in line:
        return None
    path, secure, expires = _default_path(request_path), False, None
    for attr in attrs:
        key, _, val = attr.partition("=")
        key, val = key.strip().lower(), val.strip()
        if key == "path" and val.startswith("/"):
            path = val
        elif key == "secure":
            secure = True
        elif key == "max-age" and val.lstrip("-").isdigit():
            expires = time.time() + int(val)  # Max-Age wins over Expires (RFC 6265)
        elif key == "expires" and expires is None:
            expires = _http_date(val)
    return name, Cookie(value, path, secure, expires)


def _http_date(text: str) -> float | None:
    """An Expires date as a timestamp (None if unparsable: kept as a session cookie)."""
    import email.utils  # (here: its import costs a start-up ~10 ms)

    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _default_path(path: str) -> str:
    """RFC 6265's default cookie path: the request path up to its last slash."""
    path = path.split("?", 1)[0]
    if not path.startswith("/") or path.count("/") == 1:
        return "/"
    return path[: path.rfind("/")]


def _path_matches(path: str, cookie_path: str) -> bool:
    """RFC 6265 path-match."""
    if path == cookie_path or cookie_path == "/":
        return True
    return path.startswith(cookie_path) and (
        cookie_path.endswith("/") or path[len(cookie_path)] == "/")
