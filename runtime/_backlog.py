"""The events waiting to be decided, taken newest-first where only the latest matters.

After an outage (a restart, a lost connection) the broker hands over its whole backlog at
once. For an event type declared ``latest_only`` (a pose, a distance reading), deciding the
old readings first would send the actuator through worlds that are gone: the newest waiting
event of that type is taken first, and the older ones are handed back as superseded (the
serve loop refuses them, counted). Other types are taken oldest first.

Bounded: :meth:`Backlog.fill` waits for room, so the bus's own bounded queue fills behind it
(an MQTT QoS 1 event then waits at the broker): the back-pressure is unchanged.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from ._event import Event

__all__ = ["Backlog"]


class Backlog:
    """A bounded queue of events that supersedes older ``latest_only`` ones.

    Args:
        latest_only: the event types of which only the newest waiting one is decided.
        capacity: the most events held here (beyond it, they wait in the bus).

    """

    def __init__(self, latest_only: frozenset[str], capacity: int) -> None:
        self._latest_only = latest_only
        self._capacity = capacity
        self._items: deque[Event] = deque()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, event: Event) -> None:
        """Add an event (callers keep to the capacity through :meth:`fill`)."""
        self._items.append(event)
        self._arrived.set()

    async def fill(self, events: AsyncIterator[Event]) -> None:
        """Move ``events`` (a bus's) in, waiting for room; runs until cancelled."""
        async for event in events:
            self.put(event)
            while len(self._items) >= self._capacity:
                self._room.clear()
                await self._room.wait()

    async def take(self) -> tuple[Event, list[Event]]:
        """The next event to decide, and the older ones of its type it supersedes."""
        while not self._items:
            self._arrived.clear()
            await self._arrived.wait()
        return self.take_now()

    def take_now(self) -> tuple[Event, list[Event]]:
        """:meth:`take` when the backlog is not empty."""
        head = self._items.popleft()
        superseded: list[Event] = []
        if head.type in self._latest_only:
            same = [e for e in self._items if e.type == head.type]
            if same:
                superseded = [head, *same[:-1]]
                head = same[-1]
                self._items = deque(e for e in self._items if e.type != head.type)
        self._room.set()
        return head, superseded
