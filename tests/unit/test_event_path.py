"""One event's straight walk: one bounded queue, the id checked once, an answer validated once.

The serve loop chooses the next event in the bus's own queue (no task copies it into a second
queue); the executor's one id check answers the agent too; a model tier's answer kept in the
tree is not validated there a second time; the superseded count is Freshness's to change.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import fields
from typing import Any, Self

import pytest

from forethought import Agent, AgentConfig, AgentSpec, InProcessBus
from forethought.models import ScriptedBackend
from forethought.planner import PlannerConfig
from forethought.policies import InvalidAction
from forethought.policies._events import EventKey
from forethought.policies._tree import PolicyNode, PolicyTree
from forethought.runtime import Decision, Event, EventPayload, EventsConfig
from forethought.runtime._age import AgeSource
from forethought.runtime._backlog import Backlog
from forethought.runtime._event import Arrival, ReplyTo, with_deadline
from forethought.runtime._freshness import Freshness
from forethought.runtime.transports._bus import QueuedBus
from forethought.runtime.transports._drop_oldest import DropOldestQueue

SPEC: dict[str, Any] = {
    "name": "path",
    "description": "A test robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "state": {"mode": "idle"},
    "events": [
        {"type": "ping", "params": {"n": {"min": 0, "max": 9, "step": 1}}, "deadline_ms": 5000}
    ],
}


def _agent(bus: Any) -> Agent:
    config = AgentConfig.defaults(planner=PlannerConfig(enabled=False))
    return Agent(
        AgentSpec.from_data(SPEC),
        backend=ScriptedBackend(score_s=0.0, prefill_s=0.001, step_s=0.0001),
        bus=bus,
        config=config,
    )


def _event(ident: str, kind: str = "pose") -> Event:
    loop = asyncio.get_running_loop().time()
    body = EventPayload(id=ident, type=kind)
    return Event.from_payload(body, arrival=Arrival(at=loop, wall_offset_s=0.0), in_process=True)


async def test_take_all_takes_the_wanted_in_order_and_frees_room() -> None:
    q: DropOldestQueue[int] = DropOldestQueue(4)
    for i in range(4):
        q.put(i)
    room = asyncio.create_task(q.wait_for_room())
    await asyncio.sleep(0)
    assert not room.done()
    assert q.peek() == 0
    assert q.take_all(lambda i: i % 2 == 1) == [1, 3]
    await asyncio.wait_for(room, 1)
    assert [q.take(), q.take()] == [0, 2]
    assert q.take_all(lambda i: True) == []
    with pytest.raises(IndexError):
        q.take()


async def test_a_backlog_chooses_in_the_bus_queue_itself() -> None:
    queue: DropOldestQueue[Event] = DropOldestQueue(8)
    backlog = Backlog(frozenset({"pose"}), queue=queue)
    for ident, kind in [("p0", "pose"), ("n1", "ping"), ("p2", "pose")]:
        queue.put(_event(ident, kind))
    head, superseded = await backlog.take()
    assert (head.id, [e.id for e in superseded]) == ("p2", ["p0"])
    assert [e.id for e in (queue.take(),)] == ["n1"]  # the rest stayed in the bus's queue
    assert len(backlog) == 0
    with pytest.raises(ValueError, match="capacity"):
        Backlog(frozenset())


def test_freshness_counts_a_superseded_event_and_says_why() -> None:
    async def both() -> tuple[Event, Event]:
        return _event("old"), _event("new")

    old, new = asyncio.run(both())
    freshness = Freshness(EventsConfig())
    why = freshness.superseded(old, by=new)
    assert why == "superseded: a newer 'pose' event (new) is decided instead"
    assert freshness.stats.superseded == 1


async def test_a_served_event_waits_in_the_bus_queue_only() -> None:
    """No task copies events from the bus into a second queue; the events are decided."""
    bus = InProcessBus()
    async with bus, _agent(bus):
        assert isinstance(bus, QueuedBus)
        decision = await bus.send({"id": "s1", "type": "ping", "params": {"n": 1}})
        names = {t.get_name() for t in asyncio.all_tasks()}
    assert decision.met
    assert "forethought.backlog" not in names
    assert any(n.endswith(".serve") for n in names)


class _EventsOnly:
    """A bus that offers only ``events()``: the serve loop reads it into a queue of its own."""

    def __init__(self) -> None:
        self.inner = InProcessBus()

    async def __aenter__(self) -> Self:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.inner.__aexit__(*exc_info)

    async def run(self) -> None:
        await self.inner.run()

    def events(self) -> AsyncIterator[Event]:
        return self.inner.events()

    async def publish(self, event: Event, decision: Decision) -> None:
        await self.inner.publish(event, decision)

    async def reject(self, event: Event | None, reason: str, raw: bytes | None = None) -> None:
        await self.inner.reject(event, reason, raw)

    async def warn(self, event: Event, reason: str) -> None:
        await self.inner.warn(event, reason)


async def test_a_bus_without_a_queue_is_still_served() -> None:
    bus = _EventsOnly()
    assert not isinstance(bus, QueuedBus)
    async with bus, _agent(bus):
        decision = await bus.inner.send({"id": "s2", "type": "ping", "params": {"n": 2}})
        names = {t.get_name() for t in asyncio.all_tasks()}
    assert decision.met
    assert "forethought.backlog" in names


async def test_a_repeated_id_is_checked_once_and_changes_nothing() -> None:
    """The agent asks the executor's one window; the repeat gets the first decision back,
    its state patch is not applied, and it is counted once as a duplicate."""
    async with _agent(None) as agent:
        assert agent.executor is not None
        first = await agent.decide({"id": "r1", "type": "ping", "params": {"n": 1}})
        again = await agent.decide(
            {"id": "r1", "type": "ping", "params": {"n": 1}, "state": {"mode": "busy"}}
        )
        assert again is first
        assert agent.state.data["mode"] == "idle"
        assert agent.executor.stats.duplicates == 1
        assert agent.executor.stats.decisions == 1
        assert agent.executor.earlier("r2") is None  # a new id: nothing counted
        assert agent.executor.stats.duplicates == 1


def test_the_tree_does_not_check_again_what_its_own_check_passed() -> None:
    seen: list[dict[str, Any]] = []

    def check(action: dict[str, Any]) -> None:
        seen.append(action)
        if action.get("a") not in ("stop", "go"):
            raise InvalidAction(str(action), "a: not stop or go")

    def other(action: dict[str, Any]) -> None:
        """Not the tree's check: passing it proves nothing to the tree."""

    tree = PolicyTree(check=check)

    def node(i: int, action: dict[str, Any]) -> PolicyNode:
        return PolicyNode(
            fingerprint="f",
            key=EventKey("ping", (("n", i),)),
            action=action,
            compact="{}",
            probability=0.5,
            model_id="m",
            tokens=1,
            gen_seconds=0.0,
            created_at=0.0,
        )

    tree.insert(node(1, {"a": "go"}), checked_by=check)
    assert seen == []
    tree.insert(node(2, {"a": "go"}))
    tree.insert(node(3, {"a": "go"}), checked_by=other)
    assert len(seen) == 2
    with pytest.raises(InvalidAction):
        tree.insert(node(4, {"a": "fly"}), checked_by=other)
    assert len(tree) == 3


def test_resolving_the_deadline_keeps_every_other_field() -> None:
    """``Event.resolved`` builds the event field by field: a field it forgot would be lost."""
    full = Event(
        id="e1",
        type="obstacle",
        params={"side": "left"},
        arrived_at=10.0,
        deadline_ms=250.0,
        state={"zone": "dock"},
        reply=ReplyTo("replies/1", b"c"),
        sent_at=9.5,
        age=AgeSource.SENT_AT_NS,
        expires_at=20.0,
        wall_offset_s=-3.0,
        default_only=True,
    )
    unset = Event("e0", "clear", {}, arrived_at=0.0)
    # Every field but the deadline differs from its default here: none can pass unnoticed.
    for f in fields(Event):
        if f.name != "deadline":
            assert getattr(full, f.name) != getattr(unset, f.name), f.name
    got = full.resolved(11.0)
    assert got.deadline == 11.0
    assert {f.name: getattr(got, f.name) for f in fields(Event) if f.name != "deadline"} == {
        f.name: getattr(full, f.name) for f in fields(Event) if f.name != "deadline"
    }
    assert with_deadline(full, 600.0).deadline == 9.5 + 0.25
