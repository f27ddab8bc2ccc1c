"""Readiness, public and typed: until_covered, covers, and the typed health report.

A real model (the tiny random Llama) plans into a real tree; ``covers`` is checked against what
``decide`` then does for every key of the space, and the health report's sections are read as
attributes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from forethought import Agent, AgentConfig, AgentSpec, ConfigError, NotStarted, Tier
from forethought.commands._run import log_coverage
from forethought.models import TransformersBackend
from forethought.planner import PlannerConfig
from forethought.runtime import CountersSection, HealthReport, ModelSection, TreeSection
from forethought.testing import until_holds

pytestmark = pytest.mark.model

SPEC = AgentSpec.from_data(
    {
        "name": "door",
        "description": "You control a sliding door. Open for people, stop for obstacles.",
        "action": {
            "type": "object",
            "properties": {"door": {"enum": ["open", "close", "hold"]}},
            "required": ["door"],
        },
        "default_action": {"door": "hold"},
        "state": {"mode": "normal"},
        "events": [
            {"type": "person", "params": {"side": ["inside", "outside"]}, "deadline_ms": 800},
            {
                "type": "obstacle",
                "params": {"distance_m": {"min": 0, "max": 2, "step": 0.5}},
                "tolerance": {"distance_m": 0.5},  # a neighbour's answer may serve
                "deadline_ms": 800,
                "weight": 2,
            },
            {"type": "alarm", "deadline_ms": 1500},
        ],
    }
)


def _config(**planner: Any) -> AgentConfig:
    settings: dict[str, Any] = {
        "batch_size": 4, "horizon": 1, "min_rate": 0.0, "cost_weight": 0.0, "learn": False,
        "method": "generate", "max_new_tokens": 16,
    }  # fmt: skip
    return AgentConfig.defaults(planner=PlannerConfig(**{**settings, **planner}))


def _events() -> list[dict[str, Any]]:
    return [
        {"id": f"e{i}", "type": key.type, "params": dict(key.params)}
        for i, key in enumerate(SPEC.event_space().keys())
    ]


async def test_until_covered_waits_for_the_tree_and_covers_says_what_decide_does(
    tiny_backend: TransformersBackend,
) -> None:
    async with Agent(SPEC, backend=tiny_backend, config=_config()) as agent:
        answerable = await agent.until_covered(min_coverage=1.0, timeout=120)
        report = agent.health()
        assert isinstance(report, HealthReport)
        assert isinstance(report.tree, TreeSection)
        assert answerable == pytest.approx(1.0)
        assert report.tree.answerable == answerable
        # Exact branches only: at most what the tree answers with borrowed ones.
        assert report.tree.coverage is not None
        assert 0.0 < report.tree.coverage <= answerable
        assert report.tree.nodes == len(agent.tree) >= 4

        events = _events()
        assert len(events) == 8  # person x 2 sides, obstacle x 5 distances, alarm
        for event in events:
            assert agent.covers(event)
            assert (await agent.decide(event)).tier is Tier.TREE

        # Not covered: a value outside the declared grid, and a state no branch was written in
        # (a patch that covers() applies to a copy, and decide() to the agent's state).
        outside = {"id": "x1", "type": "person", "params": {"side": "roof"}}
        assert not agent.covers(outside)
        assert (await agent.decide(outside)).tier is not Tier.TREE
        elsewhere = {**events[0], "id": "x2", "state": {"mode": "evacuate"}}
        assert not agent.covers(elsewhere)
        assert agent.state.data["mode"] == "normal"  # covers() changed nothing
        assert (await agent.decide(elsewhere)).tier is not Tier.TREE

        after = agent.health()
        assert isinstance(after.counters, CountersSection)
        assert isinstance(after.model, ModelSection)
        assert after.counters.tiers["tree"] == 8
        assert after.counters.decisions == 10
        assert after.model.live_call_p95_ms > 0


async def test_until_covered_times_out_saying_how_far_it_got(
    tiny_backend: TransformersBackend,
) -> None:
    async with Agent(SPEC, backend=tiny_backend, config=_config()) as agent:
        with pytest.raises(TimeoutError, match=r"the tree answers \d+\.\d% .* short of the 100"):
            await agent.until_covered(min_coverage=1.0, timeout=0.001)


async def test_until_covered_returns_below_the_target_when_nothing_is_worth_writing(
    tiny_backend: TransformersBackend,
) -> None:
    # A floor no key reaches: the planner goes to sleep at once, with nothing written.
    async with Agent(SPEC, backend=tiny_backend, config=_config(min_rate=1.0)) as agent:
        answerable = await agent.until_covered(min_coverage=0.9, timeout=60)
        assert answerable == 0.0
        assert agent.planner is not None
        assert agent.planner.sleeping
        assert agent.health().tree.answerable == 0.0
        assert agent.health().tree.coverage == 0.0
        assert not agent.covers({"id": "p", "type": "alarm"})


async def test_readiness_refuses_what_it_cannot_do(tiny_backend: TransformersBackend) -> None:
    idle = Agent(SPEC, backend=tiny_backend, config=_config())
    with pytest.raises(NotStarted):
        await idle.until_covered(0.5)
    with pytest.raises(NotStarted):
        idle.covers({"id": "p", "type": "alarm"})
    async with idle as agent:
        with pytest.raises(ConfigError, match="min_coverage") as info:
            await agent.until_covered(min_coverage=90)
        assert "between 0 and 1" in str(info.value)
    cfg = _config().model_copy(update={"planner": PlannerConfig(enabled=False)})
    async with Agent(SPEC, backend=tiny_backend, config=cfg) as agent:
        with pytest.raises(ConfigError, match=r"planner\.enabled"):
            await agent.until_covered(0.5)


async def test_run_logs_coverage_while_planning(
    tiny_backend: TransformersBackend, capsys: pytest.CaptureFixture[str]
) -> None:
    async with Agent(SPEC, backend=tiny_backend, config=_config()) as agent:
        logger = asyncio.create_task(log_coverage(agent, every_s=0.01))
        await agent.until_covered(min_coverage=1.0, timeout=120)
        assert agent.planner is not None
        planner = agent.planner
        await until_holds(lambda: planner.sleeping, 30, "the planner asleep")
        err: list[str] = []

        def idle_said() -> bool:
            err.append(capsys.readouterr().err)
            return "forethought: planner idle" in "".join(err)

        await until_holds(idle_said, 30, "the logger's line for the planner asleep")
        logger.cancel()
        with pytest.raises(asyncio.CancelledError):
            await logger
        nodes = len(agent.tree)
    err.append(capsys.readouterr().err)
    lines = [line for line in "".join(err).splitlines() if "the tree answers" in line]
    assert lines[0].startswith("forethought: planning: the tree answers ")
    assert lines[-1] == (
        "forethought: planner idle, nothing left worth writing: the tree answers 100.0% of the "
        f"next event ({nodes} branches)"
    )
    assert len(lines) == len(set(lines))  # a line only when the figure moved
