"""The schedule bench's stores (bench/schedstores.py): both keep the schedule's crash contract,
so `--store` compares two correct stores."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from larbinpy.bench.schedbench import T0, _stats_pool, make_page
from larbinpy.bench.schedstores import STORES, SqliteSchedule, kill9_recovery, open_store


def test_sqlite_store_puts_pops_and_forgets_like_ours(tmp_path: Path) -> None:
    """Pops come due-first and once; a put replaces; pending puts are seen; drop forgets."""
    rng = random.Random(3)
    s = SqliteSchedule(tmp_path / "s")
    pages = [make_page(j, 10, T0 + j, rng) for j in range(100)]
    s.put_many(pages)
    assert s.get(pages[5].url) == pages[5]  # pending, not yet written
    s.flush()
    got = s.pop_due(T0 + 49.5, 1000)
    assert [v.url for v in got] == [p.url for p in pages[:50]]
    assert s.pop_due(T0 + 49.5, 1000) == []  # popped once
    s.put(replace(pages[0], due=T0 + 10))  # put again: due again, popped again
    assert [v.url for v in s.pop_due(T0 + 49.5, 1000)] == [pages[0].url]
    assert s.drop(pages[99].url) and not s.drop(pages[99].url)
    assert s.force(pages[98].url, T0 + 49.6)
    assert [v.url for v in s.pop_due(T0 + 49.6, 1000)] == [pages[98].url]
    assert len(s) == 99
    s.close()


@pytest.mark.parametrize("store", STORES)
def test_kill_9_mid_run_brings_back_exactly_the_pages_in_flight(tmp_path: Path,
                                                                 store: str) -> None:
    """A real child popping and putting again, killed by SIGKILL: on reopening, every page
    popped and not put again comes back, none put again comes back as it was, none is lost."""
    rng = random.Random(7)
    pool, n = _stats_pool(rng, 64), 3000
    directory = tmp_path / "store"
    s = open_store(store, directory)
    s.put_many(make_page(j, 30, T0 + rng.uniform(0, 86400.0), rng, pool) for j in range(n))
    pos = s.position()
    s.sync()
    s.close()
    result = kill9_recovery(store, directory, T0, pos, step=600.0, seconds=0.5,
                            checkpoint_every=400)
    assert result["killed_after_batches"] >= 1
    assert result["in_flight"] > 0
    assert result["exact"], result
    assert len(open_store(store, directory)) == n
