"""The events waiting to be decided, taken newest-first where only the latest matters.

After an outage (a restart, a lost connection) the broker hands over its whole backlog at
once. For an event type declared ``latest_only`` (a pose, a distance reading), deciding the
old readings first would send the actuator through worlds that are gone: the newest waiting
event of that type is taken first, and the older ones are handed back as superseded (the
serve loop refuses them, counted). Other types are taken oldest first. A backlog arrives a
message at a time: its ``latest_only`` head waits up to ``SETTLE_S`` for the rest.

Bounded: :meth:`Backlog.fill` waits for room, so the bus's own bounded queue fills behind it
(an MQTT QoS 1 event then waits at the broker): the back-pressure is unchanged.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from ._event import Event

__all__ = ["QUEUED_S", "SETTLE_S", "Backlog"]

QUEUED_S = 0.05
"""An event sent this long before it arrived waited in a queue: it belongs to a backlog."""
SETTLE_S = 0.02
"""The most a backlog's newest ``latest_only`` event is waited for."""
_STEP_S = 0.002


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
        """The next event to decide, and the older ones of its type it supersedes.

        A ``latest_only`` event that waited before it arrived (sent over ``QUEUED_S`` before)
        is the head of a backlog that the bus hands over a message at a time: the rest of it
        gets up to ``SETTLE_S`` to arrive, while it keeps coming, so that the newest is chosen.
        """
        while not self._items:
            self._arrived.clear()
            await self._arrived.wait()
        head = self._items[0]
        if head.type in self._latest_only and head.arrived_at - head.counted_from > QUEUED_S:
            for _ in range(round(SETTLE_S / _STEP_S)):
                before = len(self._items)
                await asyncio.sleep(_STEP_S)
                if len(self._items) == before:
                    break
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
