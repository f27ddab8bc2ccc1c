"""DropOldestQueue: the bounded queue every bus keeps its waiting events in.

When the queue is full, a new event pushes out the oldest waiting one: a stale event is worth
least, and a producer faster than the decisions must not grow memory without bound. What was
pushed out goes back to the caller (each bus reports it its own way) and is counted here. A
producer that may not drop (MQTT's QoS 1 events, which the broker holds for us) waits for room
instead.

One consumer takes from it, on the event loop's thread: the agent's serve loop, which reads a
runtime bus's queue directly (its backlog, ``runtime/_backlog.py``, picks the next event
here, so an event waits in this one bounded queue between the transport and the executor), or
whoever reads the bus's ``events()``. Nothing here is thread-safe, and nothing needs to be.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["DropOldestQueue"]

T = TypeVar("T")


class DropOldestQueue(Generic[T]):
    """A FIFO of at most ``maxsize`` items; a put on a full queue drops the oldest.

    Args:
        maxsize: the most items waiting (at least 1).

    """

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize!r}")
        self.maxsize = maxsize
        self.dropped = 0
        """Items pushed out of a full queue, all told."""
        self._items: deque[T] = deque()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def full(self) -> bool:
        """Whether a put now would drop the oldest item."""
        return len(self._items) >= self.maxsize

    def put(self, item: T) -> T | None:
        """Append ``item``; if the queue was full, the oldest item, dropped (else None)."""
        dropped = None
        if self.full():
            dropped = self._items.popleft()
            self.dropped += 1
        self._items.append(item)
        self._arrived.set()
        return dropped

    async def wait_for_room(self) -> None:
        """Return once a put would not drop anything (at once if there is room)."""
        while self.full():
            self._room.clear()
            await self._room.wait()

    async def wait(self) -> None:
        """Return once an item is waiting (at once if one is)."""
        while not self._items:
            self._arrived.clear()
            await self._arrived.wait()

    def peek(self) -> T:
        """The oldest item, left in place (IndexError when empty)."""
        return self._items[0]

    def take(self) -> T:
        """The oldest item, taken now (IndexError when empty)."""
        item = self._items.popleft()
        self._room.set()
        return item

    def take_all(self, wanted: Callable[[T], bool]) -> list[T]:
        """Take every waiting item ``wanted`` accepts, oldest first; the rest keep their order."""
        taken = [item for item in self._items if wanted(item)]
        if taken:
            self._items = deque(item for item in self._items if not wanted(item))
            self._room.set()
        return taken

    async def get(self) -> T:
        """The oldest item, waiting for one if none is there."""
        await self.wait()
        return self.take()
