"""The sites that may be among the top N by a count that only grows (pages fetched, failures):
the per-site view's lists, kept up to date as outcomes come so that showing them walks a
hundred sites, not the whole site table (`Sites.tally` offers each site its new counts).

A site joins the board when its count reaches the board's floor; when the board holds 4N
sites it keeps the 2N largest and the floor rises to the smallest count kept. A count only
grows and the floor only rises, so a site off the board never counts more than one on it
(ties aside): the board's N largest are the table's. A site the table forgot leaves a hole;
when the holes leave fewer than N, `top` says so and the caller walks the table instead.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from larbinpy.records import Site

TOP_SHOWN = 25  # sites in each of the per-site view's lists
BOARD_FACTOR = 4  # the board holds up to this many times N sites before it is cut to 2N


class Leaders:
    """A bounded board of candidates for the top `n` sites by `count`."""

    def __init__(self, n: int, count: Callable[[Site], int]) -> None:
        self.n = n
        self.count = count
        self.board: dict[str, Site] = {}  # site key -> the site record (the latest one)
        self.floor = 1  # a site joins once its count reaches this
        self.cut = False  # the board was cut: sites with counts below the floor were left out

    def offer(self, site: Site, count: int) -> None:
        """The site's count is now `count`."""
        if count < self.floor:
            return
        board = self.board
        board[site.key] = site
        if len(board) > BOARD_FACTOR * self.n:
            kept = heapq.nlargest(2 * self.n, board.values(), key=self.count)
            self.board = {s.key: s for s in kept}
            self.floor = max(self.floor, self.count(kept[-1]))
            self.cut = True

    def top(self, alive: Callable[[Site], bool]) -> list[Site] | None:
        """The `n` largest of the sites still `alive` (in the table), largest first; None when
        sites forgotten since left the board unable to tell (fewer than `n`, after a cut)."""
        sites = [s for s in self.board.values() if alive(s)]
        if len(sites) < self.n and self.cut:
            return None
        return heapq.nlargest(self.n, sites, key=self.count)
