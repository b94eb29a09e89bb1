"""Where fetched pages go: the outputs named by `output` lines in larbin.conf.

Each output is a small module with one class behind the `Output` interface; `Outputs` fans a
page out to every configured one, applies `specificSearch` / `contentTypes` (larbin's
SPECIFICSEARCH: output only these) and the `userOutput` hook, and counts failures instead of
letting one stop the crawl.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Protocol

from ..config import Config
from ..records import Page
from ..scope import url_extension
from ..stats import Stats

log = logging.getLogger("larbinpy.outputs")


class Output(Protocol):
    """One destination for fetched pages."""

    def write(self, page: Page) -> None:
        """Store one response (every status; most outputs keep only 2xx pages)."""
        ...

    def flush(self) -> None:
        """Push buffered data to the operating system (called at each checkpoint)."""
        ...

    def close(self) -> None:
        """Flush and release files."""
        ...


def make_output(name: str, cfg: Config) -> Output:
    """The output called `name` (`save` or `links`)."""
    if name == "save":
        from .save import SaveOutput

        return SaveOutput(cfg.save_dir)
    if name == "links":
        from .links import LinksOutput

        return LinksOutput(cfg.save_dir)
    raise ValueError(f"output {name} is not available")


def load_hook(spec: str) -> Callable[[Page], object]:
    """The `userOutput module:callable` hook."""
    module, _, attr = spec.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"userOutput {spec} is not callable")
    return obj


class Outputs:
    """Every configured output, behind the filters."""

    def __init__(self, cfg: Config, stats: Stats) -> None:
        self.stats = stats
        self.outputs = [make_output(name, cfg) for name in cfg.effective_outputs()]
        self.hook = load_hook(cfg.user_output) if cfg.user_output else None
        self.extensions = frozenset(cfg.specific_search)
        self.types = frozenset(cfg.content_types)
        # archival outputs want every exchange as received, raw body included
        self.keep_raw = any(getattr(o, "archival", False) for o in self.outputs)

    def wanted(self, page: Page) -> bool:
        """SPECIFICSEARCH: with specificSearch/contentTypes set, output only those pages."""
        if not (self.extensions or self.types):
            return True
        return page.content_type in self.types or url_extension(page.url) in self.extensions

    def write(self, page: Page) -> None:
        """Hand a page to every output and the hook; a failure is logged and counted."""
        if not self.wanted(page):
            return
        for out in self.outputs:
            try:
                out.write(page)
            except OSError as exc:
                self.stats.output_errors += 1
                log.error("output %s failed for %s: %s", type(out).__name__, page.url, exc)
        if self.hook is not None:
            try:
                self.hook(page)
            except Exception:  # a user's hook must never kill the crawl
                self.stats.output_errors += 1
                log.exception("userOutput hook failed for %s", page.url)

    def flush(self) -> None:
        """Flush every output."""
        for out in self.outputs:
            out.flush()

    def close(self) -> None:
        """Close every output."""
        for out in self.outputs:
            out.close()
