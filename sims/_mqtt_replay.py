"""Replay through a broker: events to a running agent, decisions timed end to end.

``forethought sim SCENARIO --clock real --mqtt URL --agent-id ID`` publishes each event at its
(scaled) time to ``forethought/<ID>/events/<type>`` with an MQTT 5 response topic, and times
publish -> decision received. The agent is whatever is running there (``forethought run``).
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiomqtt
import orjson
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from forethought.runtime import Topics, expiry_properties, stamp_event
from forethought.runtime.internals import parse_mqtt_url, payload_bytes

from ._records import Record, StrategyRun
from ._scenario import Scenario

__all__ = ["replay_over_mqtt"]


async def replay_over_mqtt(
    scenario: Scenario,
    *,
    url: str,
    agent_id: str,
    speed: float = 1.0,
    progress: Callable[[], None] = lambda: None,
    grace_s: float = 5.0,
) -> StrategyRun:
    """Send the scenario's events to the agent ``agent_id`` and time each decision.

    (One function on purpose: the publisher, the receiver and their shared timing tables
    live and die with one broker connection.)
    """
    host, port = parse_mqtt_url(url)
    events = scenario.events()
    run = StrategyRun("agent")
    tag = uuid.uuid4().hex[:8]
    topics = Topics(agent_id)
    reply_topic = topics.reply(f"sim-{tag}")
    sent: dict[int, float] = {}
    got: dict[int, tuple[float, dict[str, Any]]] = {}
    done = asyncio.Event()
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    t_start = time.perf_counter()
    async with aiomqtt.Client(
        host,
        port,
        protocol=aiomqtt.ProtocolVersion.V5,
        identifier=f"forethought-sim-{tag}",
        socket_options=nodelay,
    ) as client:
        await client.subscribe(reply_topic, qos=1)

        async def receive() -> None:
            async for m in client.messages:
                now = time.perf_counter()
                body = orjson.loads(payload_bytes(m))
                index = int(str(body.get("id", "")).rsplit("-", 1)[-1])
                if index in sent and index not in got:
                    got[index] = (now - sent[index], body)
                    progress()
                if len(got) == len(events):
                    done.set()

        async with asyncio.TaskGroup() as tg:
            receiver = tg.create_task(receive(), name="sim.mqtt.receive")
            t0 = time.perf_counter()
            for i, ev in enumerate(events):
                delay = t0 + ev.at_ms / 1e3 / speed - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                body: dict[str, Any] = {
                    "id": f"sim-{tag}-{i}",
                    "type": ev.type,
                    "params": ev.params,
                }
                if ev.deadline_ms is not None:
                    body["deadline_ms"] = ev.deadline_ms
                if ev.state:
                    body["state"] = ev.state
                props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
                props.ResponseTopic = reply_topic
                props.CorrelationData = str(i).encode()
                sent[i] = time.perf_counter()
                # When it was sent, and an expiry at the broker: its deadline counts from here.
                await client.publish(
                    topics.event(ev.type),
                    orjson.dumps(stamp_event(body)),
                    qos=1,
                    properties=expiry_properties(scenario.deadline_ms(ev), props),
                )
            longest = max((scenario.deadline_ms(e) for e in events), default=0.0)
            try:
                async with asyncio.timeout(longest / 1e3 + grace_s):
                    await done.wait()
            except TimeoutError:
                pass
            receiver.cancel()
    run.records = _records(scenario, events, got)
    run.wall_s = time.perf_counter() - t_start
    return run


def _records(
    scenario: Scenario, events: list[Any], got: dict[int, tuple[float, dict[str, Any]]]
) -> list[Record]:
    default = scenario.spec.default_action
    state = scenario.spec.state
    out: list[Record] = []
    for i, ev in enumerate(events):
        dl = scenario.deadline_ms(ev)
        state = {**state, **(ev.state or {})}
        if i in got:
            latency, body = got[i]
            action = body.get("action", {})
            out.append(
                Record(
                    "agent",
                    i,
                    ev.type,
                    ev.params,
                    ev.at_ms,
                    dl,
                    latency * 1e3,
                    str(body.get("tier")),
                    action,
                    latency * 1e3 <= dl,
                    bool(body.get("approximate")),
                    bool(body.get("out_of_space")),
                    scenario.grade(ev, action, state),
                )
            )
        else:  # no decision came back: a miss, and the robot fell back to its own default
            out.append(
                Record(
                    "agent",
                    i,
                    ev.type,
                    ev.params,
                    ev.at_ms,
                    dl,
                    float("inf"),
                    "none",
                    default,
                    False,
                )
            )
    return out
