"""Stage 7, after the reader: the pages read in one loop turn, parsed back to back.

The reader hands over every 2xx page it read (`take`), and the exchanges only archives keep
(`pass_on`: error pages, noDup revisits, sitemaps). At the end of the event loop's turn
(`turn.py`), in its `PARSE` phase, this stage takes them one after the other, in the order
read: extracts an HTML page's links (`extract.py`) and queues them (input, one hop deeper);
then, in the `OUTPUTS` phase, it hands the turn's pages to the outputs, in the same order.

Why at the end of the turn, not as each page arrives: a busy crawl finishes many pages a
turn, and parsing them back to back keeps lexbor's memory and the link caches in the CPU's
caches instead of evicting them with a page's worth of networking in between; the same holds
for the file system's when `output save` creates the turn's files back to back. The batch is
bounded by what one turn can finish, at most `pagesConnexions` pages, and by `MAX_PAGES`.

The document memory a body took while read (`net/docmemory.py`) is given back at the end of
the turn, once it is parsed and passed on (`hold`): pages, and the sitemaps the reader parsed
in the same turn.

Pages taken and not parsed yet are work in progress: `pending` keeps the crawl from being
done (`Crawler.idle`), and a checkpoint calls `flush()` first, so a page's links are never
between two stages when the checkpoint records what memory holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from larbinpy.config import Config
from larbinpy.links.extract import extract, extract_links
from larbinpy.links.requisites import css_urls
from larbinpy.links.urls import Normalizer
from larbinpy.net.body import html_for_links
from larbinpy.net.docmemory import Reservation
from larbinpy.outputs import Outputs, Step
from larbinpy.records import JobKind, Page
from larbinpy.stages.input import Input
from larbinpy.stats import Outcome, Stats
from larbinpy.turn import Phase, TurnEnd

log = logging.getLogger("larbinpy.parser")

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
CSS_TYPE = "text/css"
MAX_PAGES = 1024  # pages held for the end of the turn, at most


class Parser:
    """Link extraction for a loop turn's pages, then on to the outputs and input."""

    def __init__(
        self, cfg: Config, stats: Stats, normalizer: Normalizer, input_stage: Input,
        outputs: Outputs, turn: TurnEnd, on_parsed: Callable[[], None] = lambda: None,
    ) -> None:
        self.stats, self.normalizer = stats, normalizer
        self.input, self.outputs = input_stage, outputs
        self.follow_images = cfg.follow_images
        self.requisites = cfg.wants_requisites()
        self.max_links = cfg.max_links_per_page
        self.on_parsed = on_parsed  # the crawl re-checks whether it is done
        # (page, the Outputs method it goes to; None: a page to parse, then `Outputs.write`)
        self.batch: list[tuple[Page, Step | None]] = []
        self._parsed = 0  # the pages of `batch` before this one are parsed
        self.held: list[Reservation] = []  # the turn's bodies' memory, given back by flush()
        self.turn = turn
        turn.on(Phase.PARSE, self.parse)
        turn.on(Phase.OUTPUTS, self.pass_on_parsed)

    @property
    def pending(self) -> int:
        """Pages taken and not passed on yet."""
        return len(self.batch)

    def take(self, page: Page) -> None:
        """A 2xx page the reader read: parsed at the end of this turn (at once without a loop
        or when the batch is full)."""
        self._hold(page, None)

    def pass_on(self, step: Step, page: Page) -> None:
        """An exchange only for the outputs, `step` one of `Outputs`' methods (`write` for an
        archived error page, `record_duplicate`, `record_robots`): kept in line with the turn's
        pages, so that an archive sees a revisit after the page it repeats and exchanges in the
        order read."""
        self._hold(page, step)

    def _hold(self, page: Page, step: Step | None) -> None:
        """Keep it for the end of this turn."""
        self.batch.append((page, step))
        if len(self.batch) >= MAX_PAGES:
            self.flush()
        else:
            self.turn.due()

    def hold(self, memory: Reservation) -> None:
        """A body read this turn: its document memory is given back at the end of the turn,
        after the turn's pages are parsed and passed on."""
        self.held.append(memory)
        self.turn.due()

    def flush(self) -> None:
        """Both phases now: parse every page taken, then pass everything on (a checkpoint, a
        full batch, a stop); never raises."""
        self.parse()
        self.pass_on_parsed()

    def parse(self) -> None:
        """The `PARSE` phase: extract and queue the links of every page taken and not parsed
        yet, in the order read; never raises."""
        batch = self.batch
        for i in range(self._parsed, len(batch)):
            page, step = batch[i]
            if step is None:
                _guarded(self._parse, page)
        self._parsed = len(batch)

    def pass_on_parsed(self) -> None:
        """The `OUTPUTS` phase: every page parsed, and the exchanges among them, to the
        outputs in the order read; then their document memory back; never raises."""
        if not self._parsed:
            if not self.batch:
                self._give_back()
            return
        batch = self.batch[:self._parsed]
        del self.batch[:self._parsed]
        self._parsed = 0
        # The outputs after all the parsing, not page by page: the turn's files are created
        # back to back, which costs the kernel less per file than between pages of crawling.
        write = self.outputs.write
        for page, step in batch:
            _guarded(step or write, page)
        del batch, page  # the bodies go before their memory does
        if not self.batch:  # (memory of pages still to parse stays held)
            self._give_back()
        self.on_parsed()

    def _give_back(self) -> None:
        """The document memory of the bodies parsed and passed on, back to the pool."""
        held, self.held = self.held, []
        for memory in held:
            memory.release()

    def _parse(self, page: Page) -> None:
        """One page: its links, queued; with requisites, what it needs to render too."""
        job = page.job
        if job.kind is JobKind.REQUISITE:
            if page.content_type == CSS_TYPE:
                self._parse_stylesheet(page)
            return  # not a page of the crawl: no links
        requisites: list[str] = []
        if page.content_type in HTML_TYPES:
            try:
                # the header, not page.content_type: its charset parameter counts
                text = html_for_links(page.body, page.headers.get("Content-Type", ""))
                if self.requisites:
                    found = extract(
                        text, job.url, self.normalizer,
                        follow_images=self.follow_images, max_links=self.max_links,
                        on_too_long=self._too_long, requisites=True,
                    )
                    page.links, dropped, requisites, cut = found
                    self.stats.requisites_cut += cut
                else:
                    page.links, dropped = extract_links(
                        text, job.url, self.normalizer,
                        follow_images=self.follow_images, max_links=self.max_links,
                        on_too_long=self._too_long,
                    )
                self.stats.links_dropped += dropped
            except Exception:  # a parser bug: the page is still output, without links
                log.exception("could not extract the links of %s", job.url)
        self.input.add_links(job, job.url, page.links)  # may raise (stateDir full)
        if requisites:
            self.input.add_requisites(job, job.url, requisites)

    def _parse_stylesheet(self, page: Page) -> None:
        """A stylesheet fetched as a requisite: its url()s and @imports, requisites in turn
        (resolved against the stylesheet's URL)."""
        url = page.job.url
        try:
            hrefs, cut = css_urls(page.body.decode("utf-8", "replace"), self.max_links + 1)
            urls, left = self.normalizer.resolve_upto(url, hrefs, self.max_links)
        except Exception:  # a parser bug: the stylesheet is still output
            log.exception("could not read the stylesheet %s", url)
            return
        self.stats.requisites_cut += cut or left > 0
        self.input.add_requisites(page.job, url, urls)

    def _too_long(self, n: int) -> None:
        """Links over the normalizer's hard limit (crawler.URL_HARD_LIMIT): traps, counted."""
        self.stats.count(Outcome.trap, n)


def _guarded(step: Step, page: Page) -> None:
    """One step for one page; a failure (e.g. stateDir full) is logged, the turn goes on."""
    try:
        step(page)
    except Exception:
        log.exception("could not pass on %s", page.job.url)
