"""Counters every stage writes and the status page, progress line and summary read.

Every fetch outcome is counted under exactly one kind: larbin's list, extended
(docs/outcomes.md says what each means).
"""

from __future__ import annotations

import enum
import time
from collections import deque


class Outcome(enum.StrEnum):
    """What happened to one URL: larbin's list of fetch outcomes, extended (docs/outcomes.md).

    Members are named and valued as the status page, the metrics and the docs spell them, so a
    kind is greppable from the page to the code; a misspelt kind is an AttributeError.
    """

    success = "success"
    noDNS = "noDNS"
    noConnection = "noConnection"
    forbiddenRobots = "forbiddenRobots"
    timeout = "timeout"
    badType = "badType"
    tooBig = "tooBig"
    err30X = "err30X"
    err40X = "err40X"
    err50X = "err50X"
    earlyStop = "earlyStop"
    duplicate = "duplicate"
    tooDeep = "tooDeep"
    urlDup = "urlDup"
    outOfScope = "outOfScope"
    trap = "trap"
    tooManyRedirects = "tooManyRedirects"
    badEncoding = "badEncoding"
    deniedNetwork = "deniedNetwork"
    tlsError = "tlsError"
    backedOff = "backedOff"
    badHttp = "badHttp"  # malformed status line, headers or chunking (truncated bodies: earlyStop)
    # recrawl: a revisit that found the page as it was (a changed page is a success)
    notModified = "notModified"  # a 304 to a conditional GET
    unchanged = "unchanged"  # a 200 whose body has the digest of the copy kept
    # requisites: a 2xx page requisite (image, stylesheet, script...), handed to the outputs
    requisite = "requisite"


# The outcomes that are failures to fetch a URL the crawl wanted: the network, the server or
# its answer let it down. `errors` (progress line, status page) counts these only; the rest is
# a page got (success, err30X: a redirect followed, duplicate, badType: an answer of a type
# not wanted), a rule that kept a URL from being fetched (urlDup, outOfScope, trap, tooDeep,
# forbiddenRobots, deniedNetwork) or a retry to come (backedOff). docs/outcomes.md says each.
FETCH_ERRORS = frozenset({
    Outcome.noDNS, Outcome.noConnection, Outcome.timeout, Outcome.tlsError, Outcome.badHttp,
    Outcome.earlyStop, Outcome.tooBig, Outcome.badEncoding, Outcome.err40X, Outcome.err50X,
    Outcome.tooManyRedirects,
})
# the final outcomes the status page and the per-site view list as failures: the fetch
# failures and the refusals of a URL the crawl wanted that the operator may have to act on
# (robots.txt, the network policy); rules the operator set (scope, depth, seen) are not failures
FAILURE_KINDS = FETCH_ERRORS | {Outcome.forbiddenRobots, Outcome.deniedNetwork}


class Stats:
    """Counters and throughput of one crawl."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.outcomes: dict[Outcome, int] = dict.fromkeys(Outcome, 0)
        self.pages = 0  # responses read (any status)
        self.bytes = 0  # body bytes read
        self.urls_seen = 0  # URLs accepted by the hash set
        self.links_dropped = 0  # links over maxLinksPerPage
        # requisites: pages and stylesheets whose requisites were cut (over maxLinksPerPage,
        # or CSS over requisites.CSS_MAX_CHARS)
        self.requisites_cut = 0
        self.dns_queries = 0
        self.robots_fetches = 0
        self.output_errors = 0
        self.resource_waits = 0  # work put off because a file, descriptor or memory was refused
        # (monotonic time, pages, bytes) samples, one a second, for "last 10 s" rates
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=600)

    def count(self, kind: Outcome, n: int = 1) -> None:
        """Count `n` outcomes of one kind."""
        self.outcomes[kind] += n

    def sample(self) -> None:
        """Record a throughput sample (called once a second)."""
        self.samples.append((time.monotonic(), self.pages, self.bytes))

    def rates(self, window: float = 10.0) -> tuple[float, float]:
        """Pages/s and bytes/s over the last `window` seconds."""
        if len(self.samples) < 2:
            return self.overall_rates()
        now, pages, nbytes = self.samples[-1]
        for t, p, b in self.samples:
            if now - t <= window:
                dt = now - t
                return ((pages - p) / dt, (nbytes - b) / dt) if dt > 0 else (0.0, 0.0)
        return (0.0, 0.0)

    def overall_rates(self) -> tuple[float, float]:
        """Pages/s and bytes/s since the start."""
        dt = max(time.monotonic() - self.started, 1e-9)
        return self.pages / dt, self.bytes / dt

    def errors(self) -> int:
        """URLs that failed to be fetched (FETCH_ERRORS), not those a rule left unfetched."""
        return sum(self.outcomes[k] for k in FETCH_ERRORS)


def counted(n: int, noun: str, plural: str = "") -> str:
    """A count and its noun for a human: '1 page', '3 pages' ('2 fetches' given the plural)."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"
