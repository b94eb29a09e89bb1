"""Stage 7, after the reader: the pages read in one loop turn, parsed back to back.

The reader hands over every 2xx page it read (`take`), and the exchanges only archives keep
(`pass_on`: error pages, noDup revisits, sitemaps). At the end of the event loop's turn, this
stage takes them one after the other, in the order read: extracts an HTML page's links
(`extract.py`), hands the page to the outputs and its links to input (one hop deeper).

Why at the end of the turn, not as each page arrives: a busy crawl finishes 40-55 pages a
turn, and parsing them back to back keeps lexbor's memory and the link caches in the CPU's
caches instead of evicting them with a page's worth of networking in between (`larbinpy
bench --output none`: 0.183-0.192 -> 0.154-0.164 ms CPU a page). The batch is bounded by
what one turn can finish, at most `pagesConnexions` pages, and by `MAX_PAGES`.

Pages taken and not parsed yet are work in progress: `pending` keeps the crawl from being
done (`Crawler.idle`), and a checkpoint calls `flush()` first, so a page's links are never
between two stages when the checkpoint records what memory holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..body import html_for_links
from ..config import Config
from ..extract import extract_links
from ..outputs import Outputs
from ..records import Page
from ..stats import Stats
from ..urls import Normalizer
from .input import Input

log = logging.getLogger("larbinpy.parser")

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
MAX_PAGES = 1024  # pages held for the end of the turn, at most (a turn rarely reaches 64)
_PARSE = "parse"  # a page to parse, as opposed to an Outputs method name


class Parser:
    """Link extraction for a loop turn's pages, then on to the outputs and input."""

    def __init__(
        self, cfg: Config, stats: Stats, normalizer: Normalizer, input_stage: Input,
        outputs: Outputs, on_parsed: Callable[[], None] = lambda: None,
    ) -> None:
        self.stats, self.normalizer = stats, normalizer
        self.input, self.outputs = input_stage, outputs
        self.follow_images = cfg.follow_images
        self.max_links = cfg.max_links_per_page
        self.on_parsed = on_parsed  # the crawl re-checks whether it is done
        # (what to do, page, its Content-Type header): _PARSE, or an Outputs method's name
        self.batch: list[tuple[str, Page, str]] = []
        self._due = False  # a flush() is scheduled for the end of this turn

    @property
    def pending(self) -> int:
        """Pages taken and not passed on yet."""
        return len(self.batch)

    def take(self, page: Page, content_type: str) -> None:
        """A 2xx page the reader read: parsed at the end of this turn (at once without a loop
        or when the batch is full)."""
        self._hold(_PARSE, page, content_type)

    def pass_on(self, method: str, page: Page) -> None:
        """An exchange only for the outputs (`write` for an archived error page,
        `record_duplicate`, `record_robots`): kept in line with the turn's pages, so that an
        archive sees a revisit after the page it repeats and exchanges in the order read."""
        self._hold(method, page, "")

    def _hold(self, method: str, page: Page, content_type: str) -> None:
        """Keep it for the end of this turn."""
        self.batch.append((method, page, content_type))
        if self._due:
            if len(self.batch) >= MAX_PAGES:
                self.flush()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        loop.call_soon(self.flush)
        self._due = True

    def flush(self) -> None:
        """Parse every page taken, in order, and pass everything on; never raises."""
        self._due = False
        if not self.batch:
            return
        batch, self.batch = self.batch, []
        failed = 0
        for method, page, content_type in batch:
            try:
                if method is _PARSE:
                    self._parse(page, content_type)
                else:
                    getattr(self.outputs, method)(page)
            except Exception:  # e.g. stateDir full: the rest of the turn still goes on
                failed += 1
                if failed == 1:
                    log.exception("could not pass on %s", page.job.url)
        if failed > 1:
            log.error("... nor %d more pages of the same turn", failed - 1)
        self.outputs.write_batch()  # the turn's files back to back, while the bodies are warm
        self.on_parsed()

    def _parse(self, page: Page, content_type: str) -> None:
        """One page: its links, then the outputs and input."""
        job = page.job
        if page.content_type in HTML_TYPES:
            try:
                text = html_for_links(page.body, content_type)
                page.links, dropped = extract_links(
                    text, job.url, self.normalizer,
                    follow_images=self.follow_images, max_links=self.max_links,
                )
                self.stats.links_dropped += dropped
            except Exception:  # a parser bug: the page is still output, without links
                log.exception("could not extract the links of %s", job.url)
        self.outputs.write(page)
        self.input.add_links(job, job.url, page.links)  # may raise (stateDir full)
