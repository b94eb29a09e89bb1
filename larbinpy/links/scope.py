"""What the crawl may fetch: the input stage's scope rules, one check per normalized URL.

Rules from larbin.conf: `limitToDomain`, `forbiddenExtensions`, `excludePatterns` /
`includePatterns`, `cgiLevel`, `maxUrlLength`, and spider-trap heuristics: a path segment
repeated many times or absurdly deep paths (checked only on deep paths), and endless calendars
(a date, as a calendar writes it, whose year is far in the past or future). Session-id
parameters (`stripParams`) are removed by the normalizer, so they end as duplicates. Depth and
`noExternalLinks` depend on where a link was found, so the input stage applies them.
"""

from __future__ import annotations

import re
import time

from larbinpy.config import Config
from larbinpy.links.urls import host_of, path_of
from larbinpy.stats import Outcome

MAX_SEGMENT_REPEATS = 3  # /a/b/a/b/a/b/a is a trap; a real path rarely repeats a segment 4 times
MAX_PATH_SEGMENTS = 40
CALENDAR_MIN_YEAR = 1900
CALENDAR_YEARS_AHEAD = 5  # "next month" links past this are a calendar running away
# Numbers read as years: a calendar steps from today one month at a time, so it runs into
# CALENDAR_MIN_YEAR or today + CALENDAR_YEARS_AHEAD long before leaving this range; a number
# outside it (ISO-8859-1, 3000-2) is not a date a calendar would generate.
_YEAR = r"([12][0-9]{3})"
# A date as a calendar writes it in the path: a year then a month 1-12 (2031/05, 2031-5,
# 2031.05, 2031_05), optionally a day 1-31, starting a path segment or after a non-alphanumeric
# character and not running on into more digits; or a year= / y= parameter.
_DATE = re.compile(
    r"(?<![0-9A-Za-z])" + _YEAR + r"[-/._](?:0?[1-9]|1[0-2])"
    r"(?:[-/._](?:0?[1-9]|[12][0-9]|3[01]))?(?![0-9])"
    r"|[?&;](?:year|yr|y)=" + _YEAR + r"(?![0-9])",
    re.I,
)


REFUSED_MAX = 16_384  # refused URLs remembered (cleared whole when full)


class Scope:
    """The static scope rules of a crawl."""

    def __init__(self, cfg: Config) -> None:
        self.max_length = cfg.max_url_length
        self.domains = tuple(d.lstrip("*") for d in cfg.limit_to_domain)
        self.extensions = frozenset(cfg.forbidden_extensions)
        self.exclude = cfg.exclude_patterns
        self.include = cfg.include_patterns
        self.cgi = cfg.cgi_level >= 1
        self.max_year = time.gmtime().tm_year + CALENDAR_YEARS_AHEAD
        # URLs refused, and why. A URL in scope is checked once (it then joins the seen-set
        # and is not asked again); a refused one never joins it, so the same image or
        # off-site link met on every page of a site would be checked on every page.
        self._refused: dict[str, Outcome] = {}

    def check(self, url: str) -> Outcome | None:
        """Why a normalized URL is out of scope (an outcome kind), or None if it is in."""
        reason = self._refused.get(url)
        if reason is None:
            reason = self._check(url)
            if reason is not None:
                if len(self._refused) >= REFUSED_MAX:
                    self._refused.clear()
                self._refused[url] = reason
        return reason

    def _check(self, url: str) -> Outcome | None:
        """`check` without the memory of refusals: the rules themselves."""
        if len(url) > self.max_length:
            return Outcome.trap
        if self.domains and not self._domain_ok(host_of(url)):
            return Outcome.outOfScope
        path = path_of(url)
        if self.extensions and url_extension(path) in self.extensions:
            return Outcome.outOfScope
        if self.cgi and ("?" in path or "=" in path or "*" in path):
            return Outcome.outOfScope
        if self.exclude and any(p.search(url) for p in self.exclude):
            return Outcome.outOfScope
        if self.include and not any(p.search(url) for p in self.include):
            return Outcome.outOfScope
        if path.count("/") > 4 and is_trap_path(path):
            return Outcome.trap
        if self._calendar(path):
            return Outcome.trap
        return None

    def _calendar(self, path: str) -> bool:
        """Does the URL hold a date whose year no real archive reaches (an endless calendar)?"""
        for m in _DATE.finditer(path):
            year = int(m.group(1) or m.group(2))
            if not CALENDAR_MIN_YEAR <= year <= self.max_year:
                return True
        return False

    def _domain_ok(self, host: str) -> bool:
        """limitToDomain: `.fr` matches hosts ending in .fr; `a.com` matches a.com and x.a.com."""
        for d in self.domains:
            if host == d.lstrip(".") or host.endswith(d if d.startswith(".") else "." + d):
                return True
        return False


def url_extension(url: str) -> str:
    """Lower-case extension of a URL's (or path's) last segment, with its dot ('' if none)."""
    path = url.split("?", 1)[0]
    last = path[path.rfind("/") + 1 :]
    dot = last.rfind(".")
    return last[dot:].lower() if dot >= 0 else ""


def is_trap_path(path: str) -> bool:
    """A path that repeats a segment too often or nests too deep (calendar/relative-link loops)."""
    segments = [s for s in path.split("?", 1)[0].split("/") if s]
    if len(segments) > MAX_PATH_SEGMENTS:
        return True
    counts: dict[str, int] = {}
    for s in segments:
        counts[s] = counts.get(s, 0) + 1
        if counts[s] > MAX_SEGMENT_REPEATS:
            return True
    return False
