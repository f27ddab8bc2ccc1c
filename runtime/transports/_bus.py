"""Event buses: where events come from and decisions go.

An :class:`EventBus` yields validated events, publishes each decision, and reports events it
could not decide (malformed, expired). :class:`InProcessBus` serves producers in the same
process; :class:`~forethought.runtime.MqttBus` serves a broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

from forethought.policies import InvalidEvent, NotStarted

from .._decision import Decision
from .._event import Arrival, Event, EventPayload, parse_payload
from ._drop_oldest import DropOldestQueue

__all__ = ["BusStats", "EventBus", "InProcessBus", "QueuedBus"]


@dataclass(slots=True)
class BusStats:
    """The counters every network bus keeps; each bus's own stats add theirs.

    Mirrors :class:`~forethought.runtime.BusSection`, the health report's view of them.
    """

    received: int = 0
    malformed: int = 0
    dropped_full: int = 0
    expired: int = 0
    warnings: int = 0
    """Warnings beside a decision (an event outside the event space) on the errors topic."""
    published: int = 0
    publish_failures: int = 0


@runtime_checkable
class EventBus(Protocol):
    """A source of events and a sink of decisions."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def run(self) -> None:
        """Keep the bus working (a connection, say) until cancelled; may return at once.

        The agent runs it as one of the named tasks of its TaskGroup.
        """
        ...

    def events(self) -> AsyncIterator[Event]:
        """Validated events, in arrival order."""
        ...

    async def publish(self, event: Event, decision: Decision) -> None:
        """Send ``decision`` for ``event``."""
        ...

    async def reject(self, event: Event | None, reason: str, raw: bytes | None = None) -> None:
        """Report an event that will not be decided (malformed, expired)."""
        ...

    async def warn(self, event: Event, reason: str) -> None:
        """Report something about a decided event (out of the event space) beside its decision."""
        ...


@runtime_checkable
class QueuedBus(Protocol):
    """A bus whose waiting events the serve loop may take from its bounded queue directly.

    Every runtime bus is one: the serve loop then chooses the next event (newest first for a
    ``latest_only`` type) in the bus's own queue, so one bounded queue lies between a
    transport and the executor, and no task copies events from one queue to another. A bus
    that is not one is read through :meth:`EventBus.events` (into a queue of the loop's own).
    """

    @property
    def waiting(self) -> DropOldestQueue[Event]:
        """The bus's bounded queue of events waiting to be decided (once the bus is entered)."""
        ...


class InProcessBus:
    """A bus inside one process: :meth:`send` an event, get its decision back.

    The queue is bounded: when it is full the oldest waiting event is dropped (stale events
    are worth least), and its sender gets an :class:`InvalidEvent` saying so.
    """

    def __init__(self, *, max_queue: int = 1024, max_payload_bytes: int = 65_536) -> None:
        self._max = max_queue
        self._max_bytes = max_payload_bytes
        self._queue: DropOldestQueue[Event] | None = None
        self._waiting: dict[str, asyncio.Future[Decision]] = {}
        self.rejected = 0
        self.warnings = 0

    @property
    def dropped(self) -> int:
        """Events pushed out of the full queue (their senders got InvalidEvent)."""
        return 0 if self._queue is None else self._queue.dropped

    @property
    def waiting(self) -> DropOldestQueue[Event]:
        """The events waiting to be decided (the serve loop takes from it)."""
        if self._queue is None:
            raise NotStarted("InProcessBus")
        return self._queue

    async def __aenter__(self) -> Self:
        self._queue = DropOldestQueue(self._max)
        return self

    async def run(self) -> None:
        """Nothing to keep alive in-process: returns at once."""

    async def __aexit__(self, *exc_info: object) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.cancel()
        self._waiting.clear()

    async def send(self, payload: EventPayload | dict[str, Any] | bytes | str) -> Decision:
        """Submit an event and wait for its decision; InvalidEvent if it cannot be decided."""
        if self._queue is None:
            raise NotStarted("InProcessBus")
        if not isinstance(payload, EventPayload):
            payload = parse_payload(payload, max_bytes=self._max_bytes)
        loop = asyncio.get_running_loop()
        event = Event.from_payload(payload, arrival=Arrival.now(), in_process=True)
        fut = self._waiting.get(event.id)
        if fut is None:
            fut = loop.create_future()
            self._waiting[event.id] = fut
            oldest = self._queue.put(event)
            if oldest is not None:
                await self.reject(oldest, "queue full: dropped as the oldest waiting event")
        return await asyncio.shield(fut)

    async def events(self) -> AsyncIterator[Event]:
        """Events as they were sent."""
        assert self._queue is not None
        while True:
            yield await self._queue.get()

    async def publish(self, event: Event, decision: Decision) -> None:
        """Hand the decision to whoever sent the event."""
        fut = self._waiting.pop(event.id, None)
        if fut is not None and not fut.done():
            fut.set_result(decision)

    async def warn(self, event: Event, reason: str) -> None:
        """Count it: the decision went back to the sender, which reads ``out_of_space``."""
        self.warnings += 1

    async def reject(self, event: Event | None, reason: str, raw: bytes | None = None) -> None:
        """Fail the sender's wait with InvalidEvent."""
        self.rejected += 1
        if event is None:
            return
        fut = self._waiting.pop(event.id, None)
        if fut is not None and not fut.done():
            fut.set_exception(InvalidEvent("event", event.id, reason))
