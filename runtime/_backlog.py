"""The events waiting to be decided, taken newest-first where only the latest matters.

After an outage (a restart, a lost connection) the broker hands over its whole backlog at
once. For an event type declared ``latest_only`` (a pose, a distance reading), deciding the
old readings first would send the actuator through worlds that are gone: the newest waiting
event of that type is taken first, and the older ones are handed back as superseded (the
serve loop refuses them, counted). Other types are taken oldest first. A backlog arrives a
message at a time: its ``latest_only`` head waits up to ``SETTLE_S`` for the rest.

One bounded queue: the backlog chooses in the bus's own queue (a runtime bus is a
``QueuedBus``), so an event waits in one place between the transport and the executor and no
task copies it from queue to queue. The bus's queue stays the back-pressure: the serve loop
takes an event only when it has a slot, and past that the queue fills (an MQTT QoS 1 event
then waits at the broker; others push out the oldest, counted where they go). A bus that only
offers ``events()`` is read by :meth:`Backlog.fill` into a queue of ``capacity`` of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from ._event import Event
from .transports._drop_oldest import DropOldestQueue

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
        capacity: the most events held in a queue of the backlog's own (beyond it, they wait
            in the bus); unused with ``queue``.
        queue: the bus's own queue to choose in (none: a queue of ``capacity`` is made).

    """

    def __init__(
        self,
        latest_only: frozenset[str],
        capacity: int | None = None,
        *,
        queue: DropOldestQueue[Event] | None = None,
    ) -> None:
        if queue is None:
            if capacity is None:
                raise ValueError("give a capacity, or the bus's queue")
            queue = DropOldestQueue(capacity)
        self._latest_only = latest_only
        self._queue = queue

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, event: Event) -> None:
        """Add an event (callers keep to the capacity through :meth:`fill`)."""
        self._queue.put(event)

    async def fill(self, events: AsyncIterator[Event]) -> None:
        """Move ``events`` (a bus's) in, waiting for room; runs until cancelled."""
        async for event in events:
            self.put(event)
            await self._queue.wait_for_room()

    async def take(self) -> tuple[Event, list[Event]]:
        """The next event to decide, and the older ones of its type it supersedes.

        A ``latest_only`` event that waited before it arrived (sent over ``QUEUED_S`` before)
        is the head of a backlog that the bus hands over a message at a time: the rest of it
        gets up to ``SETTLE_S`` to arrive, while it keeps coming, so that the newest is chosen.
        """
        queue = self._queue
        await queue.wait()
        head = queue.peek()
        if head.type in self._latest_only and head.arrived_at - head.counted_from > QUEUED_S:
            for _ in range(round(SETTLE_S / _STEP_S)):
                before = len(queue)
                await asyncio.sleep(_STEP_S)
                if len(queue) == before:
                    break
        return self.take_now()

    def take_now(self) -> tuple[Event, list[Event]]:
        """:meth:`take` when the backlog is not empty."""
        head = self._queue.take()
        superseded: list[Event] = []
        if head.type in self._latest_only:
            same = self._queue.take_all(lambda e: e.type == head.type)
            if same:
                superseded = [head, *same[:-1]]
                head = same[-1]
        return head, superseded
