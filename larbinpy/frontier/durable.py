"""What a checkpoint makes durable: every store of the crawl, behind one small Protocol.

A store is anything that holds crawl state in files: the outputs, the priority FIFOs, the
site spill, the seen-sets, the robots.txt verdicts, the site records, the recrawl schedule
and its sites' states, the done-record. Each implements `Durable` and is registered once in
the crawl's `Stores` when it is opened (`Stores.add`); the checkpoint, the commit after it and
the close at the end iterate over the registry in the order of registration, so adding a store
is one `add`, and forgetting it is caught by `tests/test_durable.py` (it fails on a store the
crawler holds that is not registered).

The order is important: stores are registered in the order their durability must follow, and
the crawler's registration states it: the outputs first (a page's files before the URLs that
say it is done), the FIFOs and the spill before the seen-sets (a URL is never durably seen
before it is durably queued), the done-record last (a job finishing after its position is
taken is not covered by the checkpoint).

A checkpoint (`snapshot`, then `commit`):
1. every store is flushed (to the kernel: survives `kill -9`) and synced (fsync: survives
   power loss), in order;
2. every store's position (where a restart resumes it: FIFO cursors, the schedule's oldest
   visit in flight, the done-record's length) is taken, with nothing run in between;
3. the checkpoint naming them is written (`StateDir.write_checkpoint`);
4. only then is each store told to `release` what lies before its position.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable


@runtime_checkable
class Durable(Protocol):
    """A store of crawl state, as a checkpoint sees it."""

    def flush(self) -> None:
        """Hand what is written so far to the kernel (it survives `kill -9`)."""
        ...

    def sync(self) -> None:
        """Make what is flushed durable against power loss (fsync)."""
        ...

    def position(self) -> Any:
        """Where a restart resumes this store, as the checkpoint saves it (JSON); None: the
        store has no position (its files are all current)."""
        ...

    def release(self, position: Any) -> None:
        """A checkpoint naming `position` is durable: forget what lies before it."""
        ...

    def close(self) -> None:
        """Write what is pending and release the files."""
        ...


class Store:
    """The defaults of a store with no position: synced by its own `flush` or not at all,
    nothing to release (inherit, and override what the store does)."""

    def sync(self) -> None:
        """Nothing more than `flush`."""

    def position(self) -> Any:
        """No position."""
        return None

    def release(self, position: Any) -> None:
        """Nothing to forget."""


D = TypeVar("D", bound=Durable)


class Stores:
    """The crawl's stores, in the order their durability follows (see the module)."""

    def __init__(self) -> None:
        self._stores: dict[str, Durable] = {}

    def add(self, name: str, store: D) -> D:
        """Register a store under `name` (the key of its position in the checkpoint); returns
        it, so a store is registered where it is opened."""
        if name in self._stores:
            raise ValueError(f"a store named {name} is registered already")
        self._stores[name] = store
        return store

    def __contains__(self, store: object) -> bool:
        return any(s is store for s in self._stores.values())

    def names(self) -> list[str]:
        """The stores' names, in order."""
        return list(self._stores)

    def snapshot(self) -> dict[str, Any]:
        """Flush and sync every store, then take every position (nothing runs in between)."""
        for store in self._stores.values():
            store.flush()
            store.sync()
        return {name: store.position() for name, store in self._stores.items()}

    def release(self, positions: dict[str, Any]) -> None:
        """The checkpoint naming `positions` is durable: each store forgets what lies before
        its own."""
        for name, store in self._stores.items():
            if positions.get(name) is not None:
                store.release(positions[name])

    def close(self) -> None:
        """Close every store, in order; an error in one does not keep the others open."""
        failed: BaseException | None = None
        for store in self._stores.values():
            try:
                store.close()
            except BaseException as exc:  # noqa: BLE001 - raised once all are closed
                failed = failed or exc
        if failed is not None:
            raise failed
