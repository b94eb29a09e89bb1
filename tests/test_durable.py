"""The end of a loop turn and the checkpoint's stores: phases in their order, every store
registered.

The crawl's correctness after a `kill -9` rests on two orders stated in one place each: the
phases of a turn's end (`turn.py`) and the stores of a checkpoint (`frontier/durable.py`).
These tests hold the code to them, and fail when a store is added to the crawler without being
registered for durability.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from larbinpy.config import parse_config
from larbinpy.crawler import Crawler
from larbinpy.frontier.durable import Durable, Store, Stores
from larbinpy.turn import Phase, TurnEnd


def test_a_turns_end_runs_its_phases_in_their_order_whatever_the_order_of_registration(
) -> None:
    turn, ran = TurnEnd(), []
    for phase in reversed(Phase):
        turn.on(phase, lambda p=phase: ran.append(p))
    turn.run()
    assert ran == list(Phase)


async def test_a_turns_end_runs_once_after_the_turn_that_asked_and_before_the_next_request(
) -> None:
    """`due` plans one run however often it is asked; `passed` returns once it ran."""
    turn, runs = TurnEnd(), []
    turn.on(Phase.CRAWL_LOG, lambda: runs.append(1))
    for _ in range(5):
        turn.due()
    assert turn.pending and runs == []  # not during the turn that asked
    await turn.passed()
    assert not turn.pending and runs == [1]
    await turn.passed()  # nothing pending: returns at once, runs nothing
    assert runs == [1]


def test_a_failing_step_does_not_keep_the_later_phases_from_running(
        caplog: pytest.LogCaptureFixture) -> None:
    turn, ran = TurnEnd(), []

    def broken() -> None:
        raise RuntimeError("an output's bug")

    turn.on(Phase.OUTPUTS, broken)
    turn.on(Phase.CRAWL_LOG, lambda: ran.append("crawl log"))
    turn.run()
    assert ran == ["crawl log"] and "an output's bug" in caplog.text


class Recorder(Store):
    """A store that says what was asked of it."""

    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    def flush(self) -> None:
        self.calls.append(f"flush {self.name}")

    def sync(self) -> None:
        self.calls.append(f"sync {self.name}")

    def position(self) -> Any:
        self.calls.append(f"position {self.name}")
        return self.name

    def release(self, position: Any) -> None:
        self.calls.append(f"release {self.name} {position}")

    def close(self) -> None:
        self.calls.append(f"close {self.name}")


def test_a_checkpoint_flushes_and_syncs_every_store_in_order_before_any_position() -> None:
    calls: list[str] = []
    stores = Stores()
    for name in ("a", "b"):
        stores.add(name, Recorder(name, calls))
    positions = stores.snapshot()
    assert calls == ["flush a", "sync a", "flush b", "sync b", "position a", "position b"]
    calls.clear()
    stores.release(positions)
    stores.close()
    assert calls == ["release a a", "release b b", "close a", "close b"]
    with pytest.raises(ValueError):
        stores.add("a", Recorder("a", calls))


def reachable(root: object, stores: Stores, depth: int = 3) -> list[tuple[str, object]]:
    """(path, object) of the crawler's attributes and theirs, `depth` levels down, each
    object once (lists and tuples of parts included), not looking inside registered stores
    (their parts are theirs to make durable)."""
    seen: set[int] = {id(root)}
    found: list[tuple[str, object]] = []
    level: list[tuple[str, object]] = [("crawler", root)]
    for _ in range(depth):
        nxt = []
        for path, obj in level:
            for name, value in _attributes(obj):
                items = value if isinstance(value, list | tuple) else [value]
                for item in items:
                    if id(item) in seen or type(item).__module__.split(".")[0] != "larbinpy":
                        continue
                    seen.add(id(item))
                    found.append((f"{path}.{name}", item))
                    if item not in stores:
                        nxt.append((f"{path}.{name}", item))
        level = nxt
    return found


def _attributes(obj: object) -> list[tuple[str, object]]:
    """An object's attributes, from its __dict__ and its slots."""
    names = list(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        names += [n for n in getattr(cls, "__slots__", ()) if n not in names]
    return [(n, getattr(obj, n)) for n in names if hasattr(obj, n)]


@pytest.mark.parametrize("extra", ["", "recrawl on\nnoDup on\n"])
def test_every_store_the_crawler_holds_is_registered_for_its_checkpoints(
        tmp_path: Path, extra: str) -> None:
    """A store (anything that holds crawl state in files: it flushes and closes) reachable
    from the crawler must be in `crawler.stores`, or a checkpoint would not make it durable
    and a stop would not close it."""
    crawler = Crawler(parse_config(f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\n"
                                   f"output save\nhashSize 100000\nstartUrl http://a.test/\n{extra}"))
    try:
        stores = [(path, obj) for path, obj in reachable(crawler, crawler.stores)
                  if isinstance(obj, Durable) or (hasattr(obj, "flush")
                                                  and hasattr(obj, "close"))]
        # not stores: they write nothing of their own a restart needs (the parser's pages
        # are the outputs', its flush is the turn's end) or are parts of a registered store
        not_stores = {"Parser", "LazySession"}
        unregistered = [path for path, obj in stores
                        if obj not in crawler.stores and type(obj).__name__ not in not_stores]
        assert not unregistered, f"stores not registered for durability: {unregistered}"
        names = crawler.stores.names()
        assert names[0] == "outputs" and names[-1] == "done"
        assert names.index("frontier") < names.index("seen")  # queued before seen
        assert names.index("spill") < names.index("seen")
        assert ("schedule" in names) == ("recrawl" in extra)
    finally:
        asyncio.run(_close(crawler))


async def _close(crawler: Crawler) -> None:
    """Release the crawler's files without crawling."""
    crawler._close()
