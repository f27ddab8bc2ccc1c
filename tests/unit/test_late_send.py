"""An action is never sent after its deadline, whichever tier made it.

Under CPU starvation (the R11 run on a loaded two-core machine) an event judged fresh when it
was taken can be decided past its deadline: the tiers, the default included, run on a loop
that got no CPU for a while. The serve loop checks the deadline again at the last moment
before handing the decision to the bus; a late one is reported (``late: not sent ...``) and
counted, never sent.
"""

from __future__ import annotations

from typing import Any

import pytest
from starved_backend import StarvedBackend

from forethought import Agent, AgentConfig, AgentSpec, InProcessBus
from forethought.models import ScriptedBackend
from forethought.planner import PlannerConfig
from forethought.policies import InvalidEvent
from forethought.runtime import Event, EventPayload, EventsConfig
from forethought.runtime._event import Arrival, with_deadline
from forethought.runtime._freshness import Freshness

SPEC: dict[str, Any] = {
    "name": "late-send",
    "description": "A test robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "events": [
        {"type": "ping", "params": {"n": {"min": 0, "max": 9, "step": 1}}, "deadline_ms": 100}
    ],
}


def starved_agent(bus: InProcessBus) -> Agent:
    backend = StarvedBackend(score_s=0.0, prefill_s=0.001, step_s=0.0001)
    config = AgentConfig.defaults(planner=PlannerConfig(enabled=False), max_concurrent=1)
    return Agent(AgentSpec.from_data(SPEC), backend=backend, bus=bus, config=config)


async def test_a_decision_past_its_deadline_is_reported_and_counted_not_sent() -> None:
    """Checked to fail without the check at sending: the sender got the decision, ``met``
    false, after its deadline."""
    bus = InProcessBus()
    async with bus, starved_agent(bus) as agent:
        with pytest.raises(InvalidEvent, match=r"late: not sent, [0-9.]+ ms past its deadline"):
            await bus.send({"id": "s1", "type": "ping", "params": {"n": 1}, "deadline_ms": 100})
        assert agent.executor is not None
        assert agent.executor.stats.decisions == 1  # decided, then held back
        assert agent.executor.stats.met == 0  # not sent: never counted on time
        assert agent.executor.stats.missed == 1
        report = agent.health()
    assert agent.freshness.stats.late == 1
    assert report.counters.age.late == 1
    assert bus.rejected == 1


async def test_a_decision_in_time_is_sent() -> None:
    """The same agent, a backend that keeps its word: the decision goes out, nothing counted."""
    bus = InProcessBus()
    backend = ScriptedBackend(score_s=0.0, prefill_s=0.001, step_s=0.0001)
    config = AgentConfig.defaults(planner=PlannerConfig(enabled=False))
    async with bus, Agent(AgentSpec.from_data(SPEC), backend=backend, bus=bus, config=config) as a:
        decision = await bus.send(
            {"id": "s2", "type": "ping", "params": {"n": 1}, "deadline_ms": 5000}
        )
    assert decision.met
    assert a.freshness.stats.late == 0
    assert bus.rejected == 0


def _event(deadline_ms: float) -> Event:
    body = EventPayload.model_validate(
        {"id": "e", "type": "ping", "params": {"n": 1}, "deadline_ms": deadline_ms}
    )
    raw = Event.from_payload(body, arrival=Arrival(at=100.0, wall_offset_s=0.0), in_process=True)
    return with_deadline(raw, 1000.0)  # as the agent resolves it at arrival: the sender's


def test_at_send_passes_up_to_the_deadline_and_refuses_after() -> None:
    freshness = Freshness(EventsConfig())
    event = freshness.judge(_event(200), now=100.0).event
    assert event.deadline == pytest.approx(100.2)
    assert freshness.at_send(event, decided_at=100.1, now=100.2) is None  # at it: still in time
    assert freshness.stats.late == 0
    why = freshness.at_send(event, decided_at=100.15, now=100.25)
    assert why is not None
    assert why.startswith("late: not sent, 50.0 ms past its deadline at sending"), why
    assert "decided 150.0 ms after arrival, 100.0 ms before sending" in why
    assert freshness.stats.late == 1


async def test_a_decision_made_in_time_but_not_sent_counts_as_missed() -> None:
    """The executor counted a decision met when it made it; the serve loop then held it back
    at sending. Its counters (the health report's) must not keep it as on time."""
    bus = InProcessBus()
    backend = ScriptedBackend(score_s=0.0, prefill_s=0.001, step_s=0.0001)
    config = AgentConfig.defaults(planner=PlannerConfig(enabled=False))
    async with bus, Agent(AgentSpec.from_data(SPEC), backend=backend, bus=bus, config=config) as a:
        decision = await bus.send(
            {"id": "s3", "type": "ping", "params": {"n": 1}, "deadline_ms": 5000}
        )
        assert decision.met
        assert a.executor is not None
        assert (a.executor.stats.met, a.executor.stats.missed) == (1, 0)
        a.not_sent(decision)
        assert (a.executor.stats.met, a.executor.stats.missed) == (0, 1)
