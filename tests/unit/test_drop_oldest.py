"""DropOldestQueue: the bounded queue of every bus (drops the oldest, counts, waits for room)."""

from __future__ import annotations

import asyncio

import pytest

from forethought.runtime.transports._drop_oldest import DropOldestQueue


async def test_a_full_queue_drops_the_oldest_and_counts_it() -> None:
    q: DropOldestQueue[int] = DropOldestQueue(2)
    assert q.put(1) is None
    assert q.put(2) is None
    assert q.full()
    assert q.put(3) == 1
    assert q.put(4) == 2
    assert q.dropped == 2
    assert len(q) == 2
    assert [await q.get(), await q.get()] == [3, 4]


async def test_get_waits_for_an_item_and_a_producer_can_wait_for_room() -> None:
    q: DropOldestQueue[str] = DropOldestQueue(1)
    getter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not getter.done()
    q.put("a")
    assert await asyncio.wait_for(getter, 1) == "a"
    q.put("b")
    waiter = asyncio.create_task(q.wait_for_room())
    await asyncio.sleep(0)
    assert not waiter.done()
    assert await q.get() == "b"
    await asyncio.wait_for(waiter, 1)
    assert q.put("c") is None
    assert q.dropped == 0


def test_a_queue_holds_at_least_one() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        DropOldestQueue[int](0)
