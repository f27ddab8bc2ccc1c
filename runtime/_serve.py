"""The serve loop: events from a bus, decided with bounded concurrency, decisions back to it.

One event's walk, each step in one place::

    bus.events()       an Event with its arrival time (runtime/_mqtt, runtime/_bus)
    agent.arrive()     its absolute deadline, resolved once; expired ones are refused here
    agent.decide()     state patch, executor (tree, score, live, default), effects, planner
    bus.publish()      the decision (or bus.reject() with why it was not decided)

At most ``max_concurrent`` events are being decided at once. Past that the loop stops taking
events from the bus, so the bus's bounded queue fills: the queue is the back-pressure (an
MQTT QoS 1 event then waits at the broker; others push out the oldest, counted where they go).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from forethought.policies import InputError

if TYPE_CHECKING:
    from ._agent import Agent
    from ._bus import EventBus
    from ._event import Event

__all__ = ["serve"]

log = logging.getLogger("forethought.serve")


async def serve(agent: Agent, bus: EventBus, tg: asyncio.TaskGroup, *, max_concurrent: int) -> None:
    """Decide every event ``bus`` yields, in tasks of ``tg``; runs until cancelled."""
    slots = asyncio.Semaphore(max_concurrent)
    loop = asyncio.get_running_loop()
    async for incoming in bus.events():
        event = agent.arrive(incoming)
        assert event.deadline is not None
        if loop.time() > event.deadline:
            agent.rejected += 1
            await bus.reject(event, "expired: its deadline passed before it was decided")
            continue
        await slots.acquire()
        task = tg.create_task(_handle(agent, bus, event), name=f"forethought.event[{event.id}]")
        task.add_done_callback(lambda _: slots.release())


async def _handle(agent: Agent, bus: EventBus, event: Event) -> None:
    try:
        decision = await agent.decide(event)
    except InputError as exc:
        agent.rejected += 1
        await bus.reject(event, str(exc)[:300])
        return
    except Exception as exc:
        # Deciding never fails by design (the default answers); if it does, the event is
        # reported, and the loop and every other event go on.
        log.exception("deciding %s failed", event.id)
        await bus.reject(event, f"not decided: {exc!r}"[:300])
        return
    await bus.publish(event, decision)
