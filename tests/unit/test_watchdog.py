"""R9 (issue 12): a stalled event loop still answers with the safe default, in time.

A blocking call stops the loop for 600 ms while an event with a 300 ms deadline is being
decided (its model call takes 400 ms). The watchdog's thread sees the missing heartbeat, and
before the deadline hands the default decision to ``on_stall``; when the loop runs again that
decision is the event's one decision. The model here is a scripted backend: the property is
the runtime's, whatever the model.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from robot_spec import robot_spec

from forethought.models import ScriptedBackend
from forethought.planner import PlannerConfig
from forethought.policies import AgentSpec, ConfigError
from forethought.runtime import Agent, AgentConfig, Decision, InProcessBus, Tier
from forethought.runtime._watchdog import StallWatchdog
from forethought.testing import until_holds

SPEC = robot_spec(
    "stall",
    events=[{"type": "obstacle", "params": {"side": ["left", "right"]}, "deadline_ms": 300}],
)


def _backend() -> ScriptedBackend:
    return ScriptedBackend(score_s=0.4, live_s=0.4, prefill_s=0.01, step_s=0.001)


def _agent(on_stall: object, backend: ScriptedBackend | None = None) -> Agent:
    backend = backend or _backend()
    config = AgentConfig.defaults(
        planner=PlannerConfig(enabled=False),
        watchdog={"enabled": True, "stall_ms": 100, "guard_ms": 30},
    )
    return Agent(
        AgentSpec.model_validate(SPEC),
        backend=backend,
        config=config,
        on_stall=on_stall,  # type: ignore[arg-type]
    )


def _stall(seconds: float) -> None:
    """A blocking call on the event loop: what the watchdog is for."""
    time.sleep(seconds)


async def test_a_stalled_loop_gets_the_default_before_the_deadline() -> None:
    emitted: list[tuple[Decision, float]] = []

    def on_stall(d: Decision) -> None:  # the watchdog's thread
        emitted.append((d, time.monotonic()))

    backend = _backend()
    async with _agent(on_stall, backend) as agent:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        payload = {"id": "s1", "type": "obstacle", "params": {"side": "left"}}
        task = asyncio.create_task(agent.decide(payload))
        await until_holds(lambda: "score" in backend.calls, 5, "the executor in its model call")
        _stall(0.6)
        decision = await task
        again = await agent.decide(payload)
        assert agent.watchdog is not None
        stats = agent.watchdog.stats
        assert agent.stats()["watchdog"]["stalls"] == 1
    assert len(emitted) == 1
    sent, at = emitted[0]
    assert at <= t0 + 0.3  # before the deadline, while the loop was still stuck
    assert sent.tier is Tier.DEFAULT
    assert sent.action == {"a": "stop"}
    assert sent.met
    assert sent.skipped == (("loop", "stalled: the watchdog answered"),)
    # One decision for the event: what went out during the stall, also after it.
    assert decision == sent
    assert again == sent
    assert stats.stalls == 1
    assert stats.defaults_emitted == 1
    assert 100 <= stats.detected_after_ms[0] < 600
    assert stats.stall_ms[0] >= 550


async def test_without_on_stall_stalls_are_counted_and_decisions_stand() -> None:
    backend = _backend()
    async with _agent(None, backend) as agent:
        payload = {"id": "s2", "type": "obstacle", "params": {"side": "right"}}
        task = asyncio.create_task(agent.decide(payload))
        await until_holds(lambda: "score" in backend.calls, 5, "the executor in its model call")
        _stall(0.3)
        decision = await task
        assert agent.watchdog is not None
        assert agent.watchdog.stats.stalls == 1
        assert agent.watchdog.stats.defaults_emitted == 0
    assert ("loop", "stalled: the watchdog answered") not in decision.skipped


async def test_no_stall_no_default() -> None:
    calls: list[Decision] = []
    async with _agent(calls.append) as agent:
        d = await agent.decide({"id": "n1", "type": "obstacle", "params": {"side": "left"}})
        watchdog = agent.watchdog
        assert watchdog is not None
        # The thread looks every tick (2 ms): 150 looks span three stall thresholds (100 ms)
        # with the loop free, and none sees a stall.
        await until_holds(lambda: watchdog.stats.looks >= 150, 10.0, "150 looks")
        assert watchdog.stats.stalls == 0
    assert calls == []
    assert ("loop", "stalled: the watchdog answered") not in d.skipped


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="stall_ms"):
        StallWatchdog(default_action={"a": "stop"}, emit=None, stall_s=0.005, beat_s=0.01)


async def test_a_stalled_event_gets_its_types_own_default_and_the_bus_publishes_it() -> None:
    """The watchdog answers with the event type's own default (as the executor would), and the
    serve loop publishes what was acted on: the check at sending, which refuses a decision past
    its deadline, does not refuse a default the watchdog sent in time during the stall."""
    spec = robot_spec(
        "stall-type-default",
        events=[
            {
                "type": "obstacle",
                "params": {"side": ["left", "right"]},
                "deadline_ms": 300,
                "default_action": {"a": "slow"},
            }
        ],
    )
    emitted: list[Decision] = []
    backend = _backend()
    bus = InProcessBus()
    config = AgentConfig.defaults(
        planner=PlannerConfig(enabled=False),
        watchdog={"enabled": True, "stall_ms": 100, "guard_ms": 30},
    )
    agent = Agent(
        AgentSpec.model_validate(spec), backend=backend, bus=bus, config=config,
        on_stall=emitted.append,
    )  # fmt: skip
    async with bus, agent:
        payload = {"id": "t1", "type": "obstacle", "params": {"side": "left"}}
        task = asyncio.create_task(bus.send(payload), name="test.send")
        await until_holds(lambda: "score" in backend.calls, 5, "the executor in its model call")
        _stall(0.6)  # past the 300 ms deadline: the loop resumes after it
        published = await task
    assert len(emitted) == 1
    assert emitted[0].action == {"a": "slow"}  # the type's own default, not the spec's "stop"
    assert emitted[0].by_watchdog
    assert published == emitted[0]
    assert agent.freshness.stats.late == 0
    assert bus.rejected == 0
