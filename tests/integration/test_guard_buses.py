"""10,000 events over a real bus, every answer the model offers forbidden (issue 47).

The tree holds a forbidden branch for every key; the live tier's model writes only
``{door: close, speed: fast}``, which one guard forbids always (a pattern over two fields: it
cannot narrow the grammar, so the model's answer reaches the executor and is refused there)
and another forbids while someone is in the doorway (compiled: the narrowed grammar refuses
the model's answer). The state flips every 500 events so both paths run. Over Mosquitto and
over Zenoh (real brokers and sessions, started here): every event is answered, in time, by
the default, and no forbidden action is published. The model is scripted: the property is the
executor's and the bus's, whatever the model writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiomqtt
import orjson
import pytest

from forethought import Agent, AgentConfig, AgentSpec
from forethought.models import ScriptedBackend
from forethought.planner import PlannerConfig
from forethought.policies import PolicyNode
from forethought.runtime import ExecutorConfig, MqttBus, ZenohBus, stamp_event, zenoh_config
from forethought.runtime.transports._mqtt import payload_bytes
from forethought.testing import MosquittoBroker, free_port, until_holds

pytestmark = pytest.mark.broker

EVENTS = 10_000
WINDOW = 64  # events in flight at most: the bus's queue never drops one
FORBIDDEN = {"door": "close", "speed": "fast"}
DEFAULT = {"door": "hold", "speed": "slow"}
SPEC = AgentSpec.from_data(
    {
        "name": "guarded-door",
        "description": "You control a lab door.",
        "action": {
            "type": "object",
            "properties": {
                "door": {"enum": ["open", "close", "hold"]},
                "speed": {"enum": ["slow", "fast"]},
            },
            "required": ["door", "speed"],
        },
        "default_action": DEFAULT,
        "state": {"person_in_doorway": True},
        "events": [
            {
                "type": "reading",
                "params": {"n": {"min": 0, "max": 99, "step": 1}},
                "deadline_ms": 2000,
            },
        ],
        "guards": [
            {
                "name": "doorway-clear",
                "when": {"state.person_in_doorway": True},
                "forbid": [{"door": "close"}],
            },
            {"name": "no-fast-close", "forbid": [{"door": "close", "speed": "fast"}]},
        ],
    }
)


def _agent(bus: MqttBus | ZenohBus) -> Agent:
    backend = ScriptedBackend(
        score_s=0.0005, live_s=0.0005, prefill_s=0.0001, step_s=0.00001, action=FORBIDDEN
    )
    config = AgentConfig.defaults(
        planner=PlannerConfig(enabled=False),
        executor=ExecutorConfig(use_score=False, keep_answers=False),
    )
    return Agent(SPEC, backend=backend, bus=bus, config=config)


def _plant_forbidden_tree(agent: Agent) -> None:
    """A branch for every key in both states, each the forbidden action (as if the model had
    written them before the guards were set): the tree tier offers only forbidden answers."""
    space = SPEC.event_space()
    for present in (True, False):
        state = SPEC.initial_state().patched({"person_in_doorway": present})
        for key in space:
            agent.tree.insert(
                PolicyNode(
                    state.fingerprint_for(key.type), key, dict(FORBIDDEN), "", 1.0, "t", 0, 0, 0
                )
            )


def _event(i: int) -> bytes:
    return orjson.dumps(stamp_event({"id": f"g{i}", "type": "reading", "params": {"n": i % 100}}))


async def _drive(
    agent: Agent, publish: Callable[[bytes], Awaitable[None]], answered: Callable[[], int]
) -> None:
    """Publish every event, at most ``WINDOW`` unanswered; flip the state every 500."""
    for i in range(EVENTS):
        if i % 500 == 0:
            agent.update_state({"person_in_doorway": (i // 500) % 2 == 0})
        # Polled: Zenoh's channel is read by polling, so both buses are counted the same way.
        await until_holds(
            lambda i=i: i - answered() < WINDOW, 30, "room in the window", every_s=0.001
        )
        await publish(_event(i))
    await until_holds(lambda: answered() >= EVENTS, 60, "every event answered", every_s=0.01)


def _check(agent: Agent, actions: list[dict[str, Any]]) -> None:
    ids = [a["id"] for a in actions]
    assert len(ids) == EVENTS
    assert len(set(ids)) == EVENTS
    assert [a for a in actions if a["action"] == FORBIDDEN or a["action"]["door"] == "close"] == []
    assert {orjson.dumps(a["action"]) for a in actions} == {orjson.dumps(DEFAULT)}
    assert all(a["met"] for a in actions)
    assert all(a["tier"] == "default" for a in actions)
    # Every tree answer was refused, by the guard that applied; live answers the narrowed
    # grammar let through (the uncompilable guard's) were refused by the executor.
    guards = agent.health().counters.guards
    assert sum(guards.refused["tree"].values()) == EVENTS
    assert guards.refused["tree"]["doorway-clear"] > 0
    assert guards.refused["tree"]["no-fast-close"] > 0
    assert guards.refused["live"]["no-fast-close"] > 0
    assert all(a.get("guarded") for a in actions)


async def test_mqtt_publishes_no_forbidden_action_in_10000_events(
    broker: MosquittoBroker, agent_id: str
) -> None:
    bus = MqttBus(url=broker.url, agent_id=agent_id, reconnect_min_s=0.05, reconnect_max_s=0.2)
    agent = _agent(bus)
    actions: list[dict[str, Any]] = []
    async with aiomqtt.Client(
        "127.0.0.1", broker.port, protocol=aiomqtt.ProtocolVersion.V5, identifier=f"{agent_id}-t"
    ) as client:
        await client.subscribe(f"forethought/{agent_id}/actions", qos=1)

        async def pump() -> None:
            async for m in client.messages:
                actions.append(orjson.loads(payload_bytes(m)))  # noqa: PERF401 - counted as they come

        async with asyncio.TaskGroup() as tg:
            reader = tg.create_task(pump(), name="test.pump")
            async with agent:
                await bus.wait_connected(10)
                _plant_forbidden_tree(agent)

                async def publish(body: bytes) -> None:
                    await client.publish(f"forethought/{agent_id}/events/reading", body, qos=1)

                await _drive(agent, publish, lambda: len(actions))
                _check(agent, actions)
            reader.cancel()


async def test_zenoh_publishes_no_forbidden_action_in_10000_events() -> None:
    zenoh = pytest.importorskip("zenoh")
    endpoint = f"tcp/127.0.0.1:{free_port()}"
    bus = ZenohBus(agent_id="gz", listen=[endpoint])
    agent = _agent(bus)
    actions: list[dict[str, Any]] = []
    async with agent:
        _plant_forbidden_tree(agent)
        session = zenoh.open(zenoh_config(connect=[endpoint]))
        try:
            sub = session.declare_subscriber(
                "forethought/gz/actions", zenoh.handlers.FifoChannel(EVENTS + 100)
            )
            events = session.declare_publisher(
                "forethought/gz/events/reading", congestion_control=zenoh.CongestionControl.BLOCK
            )
            # The link is up and the agent's subscription known here; this side's, declared
            # before, went over the link first, ahead of any event.
            await until_holds(
                lambda: events.matching_status.matching, 10, "the agent's subscription"
            )

            def answered() -> int:
                while (got := sub.try_recv()) is not None:
                    actions.append(orjson.loads(got.payload.to_bytes()))
                return len(actions)

            async def publish(body: bytes) -> None:
                events.put(body)

            await _drive(agent, publish, answered)
            _check(agent, actions)
        finally:
            session.close()
