"""The opener's ready queue: first in, first out, to the longest-waiting worker, and nothing
lost when a worker is cancelled as an entry reaches it (a crawl stopping)."""

from __future__ import annotations

import asyncio

from larbinpy.stages.opener import ReadyQueue


async def test_entries_go_in_order_to_the_workers_in_the_order_they_waited() -> None:
    loop = asyncio.get_running_loop()
    queue: ReadyQueue[int] = ReadyQueue()
    got: list[tuple[str, int]] = []

    async def worker(name: str) -> None:
        got.append((name, await queue.get(loop)))

    first = asyncio.ensure_future(worker("first"))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(worker("second"))
    await asyncio.sleep(0)
    for item in (1, 2, 3):
        queue.put(item)
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert got == [("first", 1), ("second", 2)]
    assert len(queue) == 1 and await queue.get(loop) == 3


async def test_an_entry_handed_to_a_cancelled_worker_goes_to_the_next_one() -> None:
    loop = asyncio.get_running_loop()
    queue: ReadyQueue[str] = ReadyQueue()
    doomed = asyncio.ensure_future(queue.get(loop))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(queue.get(loop))
    await asyncio.sleep(0)
    gone.cancel()  # cancelled while it waits: skipped
    queue.put("site")  # handed to `doomed`...
    doomed.cancel()  # ...which is cancelled before it runs: the entry stays queued
    await asyncio.gather(doomed, gone, return_exceptions=True)
    assert doomed.cancelled() and gone.cancelled()
    assert len(queue) == 1
    assert await asyncio.wait_for(queue.get(loop), 5) == "site"
