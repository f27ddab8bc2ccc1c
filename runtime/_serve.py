"""The serve loop: events from a bus, decided with bounded concurrency, decisions back to it.

One event's walk, each step in one place::

    bus's queue        an Event with its arrival time and age (transports/_mqtt, _age), in the
                       bus's bounded queue: the only queue between the transport and the executor
    Backlog.take()     the next one, chosen in that queue; newest first for latest_only types
    agent.arrive()     its absolute deadline, resolved once, from when it was sent
    Freshness.judge()  expired, unknown-age and from-the-future ones are refused here
    agent.decide()     its id checked once, state patch, executor (tree, score, live, default),
                       effects, planner; an action leaves the executor validated, once
    Freshness.at_send() the deadline read again, at the last moment: a decision past it is not sent
    bus.publish()      the decision (or bus.reject() with why it was not decided)

At most ``max_concurrent`` events are being decided at once. Past that the loop stops taking
events from the bus's queue, so it fills: the queue is the back-pressure (an MQTT QoS 1 event
then waits at the broker; others push out the oldest, counted where they go).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from forethought.policies import InputError

from ._backlog import Backlog
from .transports._bus import QueuedBus

if TYPE_CHECKING:
    from forethought.policies import EventSpace

    from ._decision import Decision
    from ._event import Event
    from ._freshness import Freshness
    from .transports._bus import EventBus

__all__ = ["Served", "serve"]


class Served(Protocol):
    """What the serve loop needs of an agent (the Agent is one).

    A protocol, so the loop does not import the agent that runs it.
    """

    def refused(self) -> None:
        """An event was refused, not decided (reported on the bus): count it."""
        ...

    @property
    def latest_only(self) -> frozenset[str]:
        """Event types of which only the newest waiting one is decided."""
        ...

    @property
    def freshness(self) -> Freshness:
        """Judges each event's age."""
        ...

    @property
    def space(self) -> EventSpace:
        """The declared event space (for the warning beside an out-of-space decision)."""
        ...

    def arrive(self, event: Event) -> Event:
        """``event`` with its absolute deadline, resolved once."""
        ...

    async def decide(self, event: Event) -> Decision:
        """The decision for ``event``."""
        ...

    def not_sent(self, decision: Decision) -> None:
        """``decision`` was not sent (late at sending): its counters say it missed."""
        ...


log = logging.getLogger("forethought.serve")


async def serve(
    agent: Served, bus: EventBus, tg: asyncio.TaskGroup, *, max_concurrent: int
) -> None:
    """Decide every event ``bus`` yields, in tasks of ``tg``; runs until cancelled."""
    slots = asyncio.Semaphore(max_concurrent)
    loop = asyncio.get_running_loop()
    if isinstance(bus, QueuedBus):  # every runtime bus: chosen in its queue, no copy task
        backlog = Backlog(agent.latest_only, queue=bus.waiting)
    else:
        backlog = Backlog(agent.latest_only, capacity=max_concurrent)
        tg.create_task(backlog.fill(bus.events()), name="forethought.backlog")

    def refuse(event: Event, reason: str) -> None:
        # In a task holding a slot, as a decision does: a backlog of stale events is refused
        # at the rate the bus can report, not one broker round trip after another.
        agent.refused()
        task = tg.create_task(bus.reject(event, reason), name=f"forethought.refuse[{event.id}]")
        task.add_done_callback(lambda _: slots.release())

    while True:
        await slots.acquire()  # a slot first: the freshest event is chosen when one is free
        incoming, superseded = await backlog.take()
        for old in superseded:
            refuse(old, agent.freshness.superseded(old, by=incoming))
            await slots.acquire()  # its slot went to the refusal: one for ``incoming``
        verdict = agent.freshness.judge(agent.arrive(incoming), loop.time())
        if verdict.refusal is not None:
            refuse(verdict.event, verdict.refusal)
            continue
        event = verdict.event
        task = tg.create_task(_handle(agent, bus, event), name=f"forethought.event[{event.id}]")
        task.add_done_callback(lambda _: slots.release())


async def _handle(agent: Served, bus: EventBus, event: Event) -> None:
    try:
        decision = await agent.decide(event)
    except InputError as exc:
        agent.refused()
        await bus.reject(event, str(exc)[:300])
        return
    except Exception as exc:
        # Deciding never fails by design (the default answers); if it does, the event is
        # reported, and the loop and every other event go on.
        log.exception("deciding %s failed", event.id)
        await bus.reject(event, f"not decided: {exc!r}"[:300])
        return
    # Nothing awaits between this check and the hand-over to the bus (each bus's publish
    # queues the message before its first await): a starved CPU can make any tier, the
    # default included, finish past the deadline, and such an action is never sent.
    # The watchdog's default went out through on_stall before the deadline: the bus reports
    # what was acted on.
    late = (
        None
        if decision.by_watchdog
        else agent.freshness.at_send(event, decision.decided_at, asyncio.get_running_loop().time())
    )
    if late is not None:
        agent.refused()
        agent.not_sent(decision)
        await bus.reject(event, late)
        return
    await bus.publish(event, decision)
    if decision.out_of_space:
        await bus.warn(event, _out_of_space(agent, event, decision))


def _out_of_space(agent: Served, event: Event, decision: Decision) -> str:
    """The warning beside a decision for an event the spec does not declare."""
    declared = agent.space.types.get(event.type)
    answer = f"answered by the {decision.tier.value} tier, {decision.action}"
    if declared is None:
        known = ", ".join(sorted(agent.space.types))
        return f"unknown event type {event.type!r} (declared: {known}): {answer}"
    domains = {k: v if isinstance(v, list) else v.model_dump() for k, v in declared.params.items()}
    return (
        f"parameters {event.params} outside the event space of {event.type!r} ({domains}): {answer}"
    )
