"""The Agent's lifecycle on the tiny model: ready, decide, state, snapshots, no leaked tasks."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from robot_spec import robot_spec

from forethought import Agent, AgentConfig, AgentSpec, InProcessBus, Tier
from forethought.models import ScriptedBackend, TransformersBackend
from forethought.planner import PlannerConfig
from forethought.policies import (
    BackendError,
    ConfigError,
    InvalidEvent,
    InvalidState,
    NotStarted,
)

SPEC = robot_spec(
    "agent-test",
    events=[
        {
            "type": "obstacle",
            "params": {"side": ["left", "right"]},
            "deadline_ms": 800,
            "weight": 3,
            "effects": {"zone": "blocked"},
        },
        {
            "type": "battery_low",
            "params": {"level": [0.1, 0.2]},
            "deadline_ms": 3000,
            "effects": {"battery": "$level"},
        },
        {"type": "clear", "deadline_ms": 1000, "effects": {"zone": "aisle"}},
    ],
    state={"zone": "aisle", "battery": 0.9},
)


@pytest.fixture
def spec() -> AgentSpec:
    return AgentSpec.from_data(SPEC)


def forethought_tasks() -> list[str]:
    return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("forethought")]


@pytest.mark.model
async def test_lifecycle_decide_state_and_snapshot(
    tiny_backend: TransformersBackend, spec: AgentSpec, tmp_path: Path
) -> None:
    snap = tmp_path / "tree.json"
    config = AgentConfig(snapshot=snap, planner=PlannerConfig(horizon=1))
    agent = Agent(spec, backend=tiny_backend, config=config)
    assert not agent.ready.is_set()
    async with agent:
        assert agent.ready.is_set()
        assert sorted(forethought_tasks()) == [
            "forethought[agent-test]",
            "forethought[agent-test].planner",
            "forethought[agent-test].snapshot",  # a snapshot path: saved every interval too
        ]
        assert agent.planner is not None
        await asyncio.wait_for(agent.planner.wait_idle(), 60)
        loop = asyncio.get_running_loop()
        d = await agent.decide({"id": "1", "type": "obstacle", "params": {"side": "left"}})
        assert d.tier is Tier.TREE, (d.skipped, agent.planner.stats)
        assert agent.spec.action_schema().validate(d.action)
        assert d.met
        assert agent.state.get("zone") == "blocked"  # effects applied
        with pytest.raises(InvalidState):
            agent.update_state("not an object")  # type: ignore[arg-type]
        assert agent.state.get("zone") == "blocked"  # the last good state is kept
        agent.update_state({"battery": 0.5})
        assert agent.state.get("battery") == 0.5
        with pytest.raises(InvalidEvent, match="id"):
            await agent.decide({"type": "obstacle"})
        oos = await agent.decide({"id": "2", "type": "teleport", "params": {}, "deadline_ms": 50})
        assert oos.out_of_space
        assert oos.tier is not Tier.TREE
        assert agent.spec.action_schema().validate(oos.action)  # never an invalid action
        assert oos.budget_s == pytest.approx(0.05 - 0.005)  # its own deadline, less the margin
        assert oos.decided_at <= loop.time()
        stats = agent.stats()
        assert stats["executor"]["decisions"] == 2
        assert stats["tree"]["nodes"] > 0
    assert not agent.ready.is_set()
    assert forethought_tasks() == []
    assert snap.exists()
    # A second agent starts warm from the snapshot.
    again = Agent(spec, backend=tiny_backend, config=config)
    async with again:
        assert len(again.tree) > 0
        assert again.snapshot_problem is None


@pytest.mark.model
async def test_snapshot_of_another_model_is_skipped(
    tiny_backend: TransformersBackend, spec: AgentSpec, tmp_path: Path
) -> None:
    from forethought.policies import PolicyTree

    snap = tmp_path / "tree.json"
    PolicyTree().save(snap, schema=spec.action_schema().fingerprint, model_id="other-model")
    agent = Agent(spec, backend=tiny_backend, config=AgentConfig(snapshot=snap))
    async with agent:
        assert agent.snapshot_problem is not None
        assert "other-model" in agent.snapshot_problem


@pytest.mark.model
async def test_in_process_bus(tiny_backend: TransformersBackend, spec: AgentSpec) -> None:
    bus = InProcessBus()
    async with Agent(spec, backend=tiny_backend, bus=bus, config=AgentConfig()) as agent:
        d = await bus.send({"id": "b1", "type": "clear", "params": {}})
        assert d.event_id == "b1"
        again = await bus.send({"id": "b1", "type": "clear", "params": {}})
        assert again == d
        with pytest.raises(InvalidEvent, match="not JSON"):
            await bus.send(b"{oops")
        assert agent.executor.stats.decisions == 1


def test_spec_errors_name_the_field(tmp_path: Path) -> None:
    bad = {**SPEC, "default_action": {"a": "fly"}}
    with pytest.raises(ConfigError, match="default_action"):
        AgentSpec.from_data(bad)
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: x\ndescription: y\naction: {type: object, properties: {a: {enum: [s]}}}"
        "\ndefault_action: {a: s}\nevents:\n  - type: e\n    deadline_ms: -1\n"
    )
    with pytest.raises(ConfigError) as info:
        AgentSpec.from_file(path)
    assert str(path) in str(info.value)
    assert "events[0].deadline_ms" in str(info.value)
    path.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid"):
        AgentSpec.from_file(path)


def test_config_from_toml_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text(
        'model = "smollm2-135m"\ndtype = "float32"\n[planner]\nbatch_size = 3\n'
        '[executor]\nmargin_ms = 12\n[mqtt]\nagent_id = "robot-7"\n'
    )
    cfg = AgentConfig.load(toml)
    assert cfg.dtype == "float32"
    assert cfg.planner.batch_size == 3
    assert cfg.executor.margin_ms == 12
    assert cfg.mqtt.agent_id == "robot-7"
    monkeypatch.setenv("FORETHOUGHT_DTYPE", "bfloat16")
    monkeypatch.setenv("FORETHOUGHT_PLANNER__BATCH_SIZE", "5")
    cfg = AgentConfig.load(toml)
    assert cfg.dtype == "bfloat16"  # the environment wins over the file
    assert cfg.planner.batch_size == 5
    monkeypatch.setenv("FORETHOUGHT_PLANNER__BATCH_SIZE", "0")
    with pytest.raises(ConfigError, match=r"planner\.batch_size"):
        AgentConfig.load(toml)
    with pytest.raises(ConfigError, match="no such TOML"):
        AgentConfig.load(tmp_path / "missing.toml")


# -- bugs found while layering (issue 8): each test failed on the old main ----------------------


def scripted_agent(spec: AgentSpec, **config: Any) -> Agent:
    backend = ScriptedBackend(score_s=0.01, live_s=0.02, prefill_s=0.01, step_s=0.001)
    cfg = AgentConfig.defaults(planner=PlannerConfig(enabled=False), **config)
    return Agent(spec, backend=backend, config=cfg)


async def test_an_absolute_deadline_that_passed_is_not_met(spec: AgentSpec) -> None:
    # Old main built the event without the wall-clock offset: budget ~1.8e9 s, score, met.
    gone = time.time_ns() - 1_000_000_000
    async with scripted_agent(spec) as agent:
        d = await agent.decide({"id": "late", "type": "clear", "params": {}, "deadline_ns": gone})
        assert d.budget_s < 0
        assert not d.met
        assert d.tier is Tier.DEFAULT
        bus = InProcessBus()
    async with scripted_agent(spec, executor={"margin_ms": 5.0}) as agent, bus:
        ahead = time.time_ns() + 2_000_000_000  # 2 s from now, on the sender's wall clock
        d = await agent.decide({"id": "soon", "type": "clear", "params": {}, "deadline_ns": ahead})
        assert 1.9 < d.budget_s < 2.0


async def test_a_repeated_id_changes_nothing(spec: AgentSpec) -> None:
    # Old main re-applied the repeat's state patch and effects and fed it to the forecaster.
    async with scripted_agent(spec) as agent:
        first = await agent.decide(
            {"id": "r", "type": "obstacle", "params": {"side": "left"}, "state": {"battery": 0.5}}
        )
        assert agent.state.get("zone") == "blocked"  # the effect applied once
        agent.update_state({"zone": "aisle"})
        observed = agent.forecaster.observed
        again = await agent.decide(
            {"id": "r", "type": "obstacle", "params": {"side": "left"}, "state": {"battery": 0.1}}
        )
        assert again == first
        assert agent.state.get("battery") == 0.5  # the repeat's patch did not apply
        assert agent.state.get("zone") == "aisle"  # nor its effect
        assert agent.forecaster.observed == observed
        assert agent.executor is not None
        assert agent.executor.stats.decisions == 1


async def test_an_old_id_is_never_decided_afresh(spec: AgentSpec) -> None:
    # Old main forgot ids after 10,000 and decided the 10,001st-ago id again.
    tree_only = {"use_score": False, "use_live": False}  # no model time: 10,001 decisions fast
    async with scripted_agent(spec, executor=tree_only) as agent:
        await agent.decide({"id": "e0", "type": "clear", "params": {}})
        for i in range(1, 10_001):
            await agent.decide({"id": f"e{i}", "type": "clear", "params": {}})
        assert agent.executor is not None
        with pytest.raises(InvalidEvent, match="already decided"):
            await agent.decide({"id": "e0", "type": "clear", "params": {}})
        assert agent.executor.stats.decisions == 10_001


async def test_a_failed_start_unwinds_what_it_started(spec: AgentSpec, tmp_path: Path) -> None:
    class Exploding(ScriptedBackend):
        async def prepare(self, schema: Any) -> None:
            raise BackendError("no grammar for you", retryable=False)

    backend = Exploding()
    bus = InProcessBus()
    agent = Agent(spec, backend=backend, bus=bus, config=AgentConfig.defaults())
    with pytest.raises(BackendError):
        async with agent:
            pass
    assert not agent.ready.is_set()
    assert forethought_tasks() == []
    with pytest.raises(NotStarted):  # the backend was stopped again on the way out
        await backend.generate("ctx", ["x"], spec.action_schema(), deadline=1e9)


def test_construction_reads_nothing(spec: AgentSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORETHOUGHT_PLANNER__BATCH_SIZE", "0")  # would fail if it were read
    agent = Agent(spec)
    assert agent.config.planner.batch_size == 8
    with pytest.raises(NotStarted):
        agent.backend  # noqa: B018 - the default backend is made when the agent starts


async def test_a_bus_event_loop_is_bounded(spec: AgentSpec) -> None:
    # With one event in flight at a time, the rest wait in the bus's bounded queue.
    backend = ScriptedBackend(score_s=0.2, pick=0, prefill_s=0.01, step_s=0.001)
    bus = InProcessBus(max_queue=2)
    cfg = AgentConfig.defaults(max_concurrent=1, planner=PlannerConfig(enabled=False))
    async with Agent(spec, backend=backend, bus=bus, config=cfg):
        sends = [
            asyncio.create_task(bus.send({"id": f"q{i}", "type": "clear", "params": {}}))
            for i in range(5)
        ]
        results = await asyncio.gather(*sends, return_exceptions=True)
    dropped = [r for r in results if isinstance(r, InvalidEvent)]
    decided = [r for r in results if not isinstance(r, BaseException)]
    assert bus.dropped == len(dropped) >= 1
    assert len(decided) + len(dropped) == 5


async def test_from_file_reads_the_spec_the_toml_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    toml = tmp_path / "agent.toml"
    toml.write_text("[planner]\nenabled = false\n[executor]\nmargin_ms = 9\n")
    monkeypatch.setenv("FORETHOUGHT_MAX_CONCURRENT", "3")
    agent = Agent.from_file(spec_path, config=toml, backend=ScriptedBackend())
    assert agent.spec == AgentSpec.from_data(SPEC)
    assert agent.config.executor.margin_ms == 9
    assert agent.config.max_concurrent == 3
    async with agent:
        assert agent.planner is None
        d = await agent.decide({"id": "f1", "type": "clear", "params": {}})
        assert d.budget_s == pytest.approx(1.0 - 0.009)
