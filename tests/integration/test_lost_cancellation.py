"""An agent on a real Mosquitto stops even when aiomqtt swallows its cancellation.

On Python 3.11 ``asyncio.wait_for`` -- which aiomqtt awaits on every call -- returns the
answer instead of raising when a cancellation lands in the step the answer does
(cpython#86296). A task of the agent's cancelled at that moment went on, and the agent's
exit waited for it for ever (a CI run hung 80 minutes that way). Here the swallow is made
certain: the library call is replaced by one that takes the cancel and returns, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiomqtt
import pytest

from forethought import Agent, AgentConfig, AgentSpec
from forethought.models import ScriptedBackend
from forethought.runtime import HealthConfig, HealthReport, MqttBus
from forethought.testing import MosquittoBroker as Broker

pytestmark = pytest.mark.broker

SPEC = AgentSpec.from_data(
    {
        "name": "lost-cancel",
        "description": "A test robot.",
        "action": {
            "type": "object",
            "properties": {"a": {"enum": ["stop", "go"]}},
            "required": ["a"],
        },
        "default_action": {"a": "stop"},
        "events": [{"type": "ping", "deadline_ms": 2000}],
    }
)


class SwallowOnce:
    """Blocks until cancelled, then returns as if the answer had come, the first time only."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.swallowed = 0

    async def __call__(self, real: Callable[[], Awaitable[object]]) -> object:
        if self.swallowed:
            return await real()
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.swallowed += 1
        return None


def _agent(broker: Broker, agent_id: str, **health: Any) -> tuple[Agent, MqttBus]:
    bus = MqttBus(url=broker.url, agent_id=agent_id, keepalive=2)
    backend = ScriptedBackend(score_s=0.001, live_s=0.001, action={"a": "go"})
    config = AgentConfig(health=HealthConfig(**health))
    return Agent(SPEC, backend=backend, bus=bus, config=config), bus


async def _stops_within(agent: Agent, seconds: float) -> None:
    # A task and asyncio.wait, not a timeout around the exit: a timeout is a cancellation,
    # and what is under test is one that goes missing.
    stopping = asyncio.create_task(agent.__aexit__(None, None, None), name="test.stop")
    done, _ = await asyncio.wait([stopping], timeout=seconds)
    if not done:
        pytest.fail(f"the agent did not stop within {seconds:g} s of its exit")
    stopping.result()


async def test_an_agent_stops_though_a_status_refresh_swallowed_the_cancel(
    broker: Broker, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    swallow = SwallowOnce()
    real = MqttBus.publish_status

    async def publish_status(self: MqttBus, report: HealthReport) -> None:
        await swallow(lambda: real(self, report))

    monkeypatch.setattr(MqttBus, "publish_status", publish_status)
    agent, bus = _agent(broker, agent_id, interval_s=0.05)
    await agent.__aenter__()
    await bus.wait_connected(10)
    await swallow.entered.wait()
    await _stops_within(agent, 10)
    assert swallow.swallowed == 1


async def test_an_agent_stops_though_its_connection_swallowed_the_cancel(
    broker: Broker, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bus's "online" status publish on connecting takes the cancel: the bus went on to
    # call itself connected and wait for messages that never end.
    swallow = SwallowOnce()
    real = aiomqtt.Client.publish

    async def publish(self: aiomqtt.Client, topic: str, payload: Any = None, **kw: Any) -> None:
        if payload == b'{"online":true}':
            await swallow(lambda: real(self, topic, payload, **kw))
        else:
            await real(self, topic, payload, **kw)

    monkeypatch.setattr(aiomqtt.Client, "publish", publish)
    agent, bus = _agent(broker, agent_id, interval_s=0.0)
    await agent.__aenter__()
    await swallow.entered.wait()
    await _stops_within(agent, 10)
    assert swallow.swallowed == 1
    assert not bus.connected
