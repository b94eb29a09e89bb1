"""The recrawl's policy: what a fetch observed, and what it means for the page's next visit.

Pure: no clock, no files, no stage; the recrawl stage (`stages/revisits.py`) gives it the
page's history, the answer and the site's state, and writes what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from larbinpy.frontier.schedule import Visit


@dataclass(slots=True)
class Answer:
    """What one fetch observed, from the reader to the scheduler (through the crawl log)."""

    prior: Visit | None  # the page's history before this fetch (a revisit's)
    conditional: bool = False  # validators were sent
    audit: bool = False  # an unconditional check of a 304
    status: int = 0
    etag: str | None = None
    last_modified: str | None = None
    date: str | None = None  # the answer's Date header
    digest: bytes = b""  # SHA-1 of the payload, when a body was read
    elapsed: float = 0.0  # seconds the fetch took
