"""Closed-loop replay: the world receives what took effect, and what follows depends on it.

The model is a scripted backend: these tests prove the replay's bookkeeping (which action
reaches the world, when, what follows, errors), not the model's answers; the real model plays
the shipped worlds in tests/model/test_closed_loop_cli.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from forethought.commands._sim_closed_loop import open_loop_only, refuse_open_loop_options
from forethought.models import ScriptedBackend
from forethought.policies import ConfigError
from forethought.sims import (
    Applied,
    Emission,
    Outcome,
    WorldStep,
    closed_loop_replay,
    closed_loop_score,
    closed_loop_table,
    load_scenario,
    scenario_world,
    write_closed_loop,
)
from forethought.sims._closed_loop_report import closed_loop_json
from forethought.sims._scenario_check import check_scenario

SPEC: dict[str, Any] = {
    "name": "t",
    "description": "A test robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "events": [
        {
            "type": "ping",
            "deadline_ms": 1000,
            "params": {"d": {"min": 0, "max": 3, "step": 0.5}},
            "accept": [
                {"then": [{"a": "stop"}], "when": {"d": {"max": 1}}},
                {"then": [{"a": "go"}]},
            ],
        }
    ],
}


def scenario_file(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "scenario.yaml"
    # a trace, unused by a world in code (a scenario needs events or a world block)
    trace = [{"at_ms": 0, "type": "ping", "params": {"d": 1.0}}]
    path.write_text(yaml.safe_dump({**SPEC, "trace": trace, **extra}))
    return path


class Echo:
    """Answers `go` with a nearer ping and `stop` with a farther one; ends after ``acts``."""

    tick_ms: float | None = None

    def __init__(self, name: str = "echo", acts: int = 4) -> None:
        self.name = name
        self.acts = acts
        self.received: list[Applied] = []

    def reset(self, seed: int) -> WorldStep:
        self.received = []
        return WorldStep(events=(Emission(100.0, "ping", {"d": 2.0}),))

    def tick(self, now_ms: float) -> WorldStep:
        return WorldStep()

    def act(self, applied: Applied) -> WorldStep:
        self.received.append(applied)
        if len(self.received) >= self.acts:
            return WorldStep(outcome=Outcome("done", 1.0, success=True))
        d = applied.event.params["d"] + (-0.5 if applied.action["a"] == "go" else 0.5)
        return WorldStep(events=(Emission(200.0, "ping", {"d": d}),), reward=0.25)


def test_what_follows_depends_on_the_action(tmp_path: Path) -> None:
    scenario = load_scenario(scenario_file(tmp_path))
    seen: dict[str, list[float]] = {}
    for said in ("go", "stop"):
        world = Echo()
        runs = closed_loop_replay(
            scenario,
            lambda said=said: ScriptedBackend(live_s=0.05, action={"a": said}),
            lambda world=world: world,
            strategies=("live-naive",),
            episodes=1,
        )
        ep = runs["live-naive"].episodes[0]
        assert ep.error is None
        assert [a.action for a in world.received] == [{"a": said}] * 4
        assert not any(a.defaulted for a in world.received)
        seen[said] = [r.params["d"] for r in ep.run.records]
        assert ep.outcome == Outcome("done", 1.0, success=True)
        assert ep.score == pytest.approx(3 * 0.25 + 1.0)
    # the world's answers follow the agent's actions: nearer after go, farther after stop
    assert seen["go"] == [2.0, 1.5, 1.0, 0.5]
    assert seen["stop"] == [2.0, 2.5, 3.0, 3.5]


def test_a_miss_delivers_the_default_at_the_deadline(tmp_path: Path) -> None:
    spec = {**SPEC, "events": [{**SPEC["events"][0], "deadline_ms": 150}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**spec, "trace": [{"at_ms": 0, "type": "ping"}]}))
    scenario = load_scenario(path)
    world = Echo(acts=2)
    runs = closed_loop_replay(
        scenario,
        lambda: ScriptedBackend(live_s=0.4, action={"a": "go"}),
        lambda: world,
        strategies=("live-naive",),
        episodes=1,
    )
    ep = runs["live-naive"].episodes[0]
    first = world.received[0]
    assert first.action == {"a": "stop"}  # the spec's default, not the late "go"
    assert first.defaulted
    assert first.late
    assert first.at_ms == pytest.approx(100.0 + 150.0)  # emitted at 100 ms, deadline 150 ms
    rec = ep.run.records[0]
    assert rec.action == {"a": "go"}
    assert not rec.met
    assert [m.defaulted for m in ep.timeline if m.kind == "action"] == [True, True]
    # the second call queued behind the first and the episode ended (600 ms) before it came:
    # the event still counts, unanswered
    assert len(ep.run.records) == 2
    second = ep.run.records[1]
    assert second.tier == "default"
    assert not second.met
    assert second.skipped == ("episode ended before a decision",)
    assert closed_loop_score(runs["live-naive"]).defaults_received == 1.0


def test_same_seed_same_bytes_and_another_seed_differs(tmp_path: Path) -> None:
    data = {
        "trace": [{"at_ms": 50, "type": "ping", "params": {"d": 2.0}}],
        "generate": {"seed": 1, "count": 4, "mean_gap_ms": 400},
        "world": {
            "episodes": 2,
            "episode_ms": 3000,
            "outcomes": {"crash": {"score": -5, "failure": True}},
            "reactions": [
                {"event": "ping", "when": {"d": {"max": 1.0}}, "action": [{"a": "go"}],
                 "then": [{"after_ms": 100, "outcome": "crash"}]},
                {"event": "ping", "action": [{"a": "go"}],
                 "then": [{"after_ms": 150, "jitter_ms": 50, "type": "ping",
                           "params": {"d": {"from": "d", "add": -0.5, "min": 0}}}]},
            ],
        },
    }  # fmt: skip
    scenario = load_scenario(scenario_file(tmp_path, **data))

    def played(seed: int) -> bytes:
        runs = closed_loop_replay(
            scenario,
            lambda: ScriptedBackend(live_s=0.05, action={"a": "go"}),
            scenario_world(scenario),
            strategies=("live-naive", "live"),
            episodes=2,
            seed=seed,
        )
        return orjson.dumps(closed_loop_json(scenario, runs))

    first, again, other = played(3), played(3), played(4)
    assert first == again
    assert first != other
    report = orjson.loads(first)
    naive = report["strategies"]["live-naive"]["episodes"][0]
    assert naive["outcome"] == "crash"
    assert naive["failure"]
    # a reaction's event names the event whose action caused it
    assert any(m["kind"] == "event" and m["cause"] is not None for m in naive["timeline"])


class Boom(Echo):
    def act(self, applied: Applied) -> WorldStep:
        if len(self.received) == 1:
            raise RuntimeError("lost its map")
        return super().act(applied)


class Undeclared(Echo):
    def act(self, applied: Applied) -> WorldStep:
        return WorldStep(events=(Emission(10.0, "pong", {}),))


class Endless(Echo):
    tick_ms: float | None = 100.0

    def act(self, applied: Applied) -> WorldStep:
        return WorldStep()

    def tick(self, now_ms: float) -> WorldStep:
        return WorldStep(events=(Emission(0.0, "ping", {"d": 1.0}),))


class Quiet(Echo):
    def act(self, applied: Applied) -> WorldStep:
        return WorldStep()


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (Boom("boom"), "world 'boom', step 3 (act on event 1 (ping) at 400 ms): raised "
                       "RuntimeError: lost its map"),
        (Undeclared("stray"), "world 'stray', step 2 (act on event 0 (ping) at 150 ms): "
                              "emitted an undeclared event type 'pong'"),
        (Endless("endless"), "world 'endless', step 41 (tick at 2000 ms): never ended: 40 "
                             "steps without an outcome"),
        (Quiet("quiet"), "world 'quiet', step 2 ((waiting) at 150 ms): went quiet"),
    ],
)  # fmt: skip
def test_a_bad_world_is_named_with_its_step_and_the_others_report(
    tmp_path: Path, bad: Echo, needle: str
) -> None:
    scenario = load_scenario(scenario_file(tmp_path))
    worlds = [bad, Echo()]
    runs = closed_loop_replay(
        scenario,
        lambda: ScriptedBackend(live_s=0.05, action={"a": "go"}),
        lambda: worlds.pop(0),
        strategies=("live-naive", "live"),
        episodes=2,
        max_steps=40,
    )
    for ep in runs["live-naive"].episodes:
        assert ep.error is not None
        assert needle in ep.error
        assert ep.outcome is None
    good = runs["live"]
    assert [e.error for e in good.episodes] == [None, None]
    assert all(e.success for e in good.episodes)
    s = closed_loop_score(good)
    assert s.success_rate == 1.0
    assert s.score_mean == pytest.approx(1.75)
    text = closed_loop_table(scenario, runs)
    assert f"error: live-naive, seed 0: {runs['live-naive'].episodes[0].error}" in text
    assert closed_loop_score(runs["live-naive"]).errors == 2


def test_the_real_clock_plays_the_same_loop(tmp_path: Path) -> None:
    scenario = load_scenario(scenario_file(tmp_path))
    world = Echo(acts=3)
    runs = closed_loop_replay(
        scenario,
        lambda: ScriptedBackend(live_s=0.02, action={"a": "go"}),
        lambda: world,
        strategies=("live",),
        episodes=1,
        clock="real",
    )
    ep = runs["live"].episodes[0]
    assert ep.error is None
    assert ep.success
    assert [a.action for a in world.received] == [{"a": "go"}] * 3
    assert 500.0 <= ep.duration_ms < 5000.0  # 100 + 2 x 200 ms of world delays, for real


@pytest.mark.parametrize(
    ("world", "needle"),
    [
        ({"episode_ms": 100, "reactions": [{"event": "pong", "then": []}]},
         "world.reactions[0].event: not a declared event type"),
        ({"episode_ms": 100, "reactions": [{"event": "ping", "then": [{"type": "ping",
          "params": {"x": 1}}]}]}, "world.reactions[0].then[0].params: not a parameter of ping"),
        ({"episode_ms": 100, "reactions": [{"event": "ping", "then": [{"outcome": "win"}]}]},
         "world.reactions[0].then[0].outcome: not in outcomes"),
        ({"episode_ms": 100, "reactions": [{"event": "ping", "action": [{"b": 1}],
          "then": []}]}, "world.reactions[0].action[0]: unknown action fields"),
        ({"reactions": []}, "needs `episode_ms`"),
        ({"episode_ms": 100, "reactions": [{"event": "ping", "then": [{"type": "ping",
          "params": {"d": {"add": 1}}}]}]},
         "world.reactions[0].then[0].params.d: a computed parameter needs `from: <param>`"),
    ],
)  # fmt: skip
def test_bad_reactions_fail_at_load_naming_the_path(
    tmp_path: Path, world: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigError, match=r".*") as err:
        load_scenario(scenario_file(tmp_path, world=world))
    assert needle in str(err.value)


def test_check_reports_a_bad_world_with_its_path(tmp_path: Path) -> None:
    world = {"episode_ms": 100, "reactions": [{"event": "ping", "then": [{"type": "pong"}]}]}
    data = yaml.safe_load(scenario_file(tmp_path, world=world).read_text())
    problems = [p for p in check_scenario(data) if p.severity == "error"]
    assert [(p.path, p.value) for p in problems] == [("world.reactions[0].then[0].type", "pong")]


@pytest.mark.parametrize(
    ("given", "option"),
    [
        ({"mqtt": "mqtt://localhost"}, "--mqtt"),
        ({"planner": "http://localhost:8080"}, "--planner"),
        ({"record": Path("run.mcap")}, "--record"),
        ({"engine": "llama-server"}, "--engine"),
        ({"clock": "both"}, "--clock"),
    ],
)
def test_open_loop_options_are_refused_by_name(given: dict[str, Any], option: str) -> None:
    args: dict[str, Any] = {
        "mqtt": None, "planner": None, "record": None, "engine": "torch", "clock": "virtual",
    }  # fmt: skip
    refuse_open_loop_options(**args)  # the defaults pass
    with pytest.raises(ConfigError) as err:
        refuse_open_loop_options(**{**args, **given})
    assert err.value.field == option


def test_the_report_timeline_names_what_caused_each_event(tmp_path: Path) -> None:
    scenario = load_scenario(scenario_file(tmp_path))
    runs = closed_loop_replay(
        scenario,
        lambda: ScriptedBackend(live_s=0.05, action={"a": "go"}),
        Echo,
        strategies=("live-naive",),
        episodes=1,
    )
    page = write_closed_loop(tmp_path / "report", scenario, runs).read_text()
    assert "<td>event #0</td><td>ping d=2.0</td><td>the world, on its own</td>" in page
    assert "<td>event #1</td><td>ping d=1.5</td><td>the action on #0</td>" in page
    assert "<td>action on #0</td><td>a=go (live, in time)</td>" in page
    assert "done (success, score 1)" in page
    saved = orjson.loads((tmp_path / "report" / "closed_loop.json").read_bytes())
    assert saved["strategies"]["live-naive"]["score"]["success_rate"] == 1.0


def _guide_blocks() -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "docs/guides/simulator.md").read_text()
    section = text[text.index("## Closed loop") :]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_the_guides_world_in_code_runs_as_written(tmp_path: Path) -> None:
    doorway, _, _ = _guide_blocks()
    space: dict[str, Any] = {}
    exec(compile(doorway, "simulator.md", "exec"), space)
    scenario = load_scenario(scenario_file(tmp_path))
    for said, outcome in (("go", "collision"), ("stop", "clear")):
        runs = closed_loop_replay(
            scenario,
            lambda said=said: ScriptedBackend(live_s=0.05, action={"a": said}),
            space["Doorway"],
            strategies=("live-naive",),
            episodes=1,
        )
        (episode,) = runs["live-naive"].episodes
        assert episode.outcome is not None
        assert episode.outcome.name == outcome


def test_the_guides_gym_world_runs_as_written() -> None:
    _, _, gym = _guide_blocks()
    space: dict[str, Any] = {}
    exec(compile(gym, "simulator.md", "exec"), space)
    world = space["world"]
    first = world.reset(0)
    (event,) = first.events
    assert event.type == "view"
    assert set(event.params) == {"ahead", "goal"}
    assert world.tick(500.0).reward == 0.0  # a step with the default: wait


def test_a_python_world_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    for python, needle in (
        ("forethought.sims:no_such_world", "cannot import it"),
        ("forethought.sims:minigrid_world", "choose env, max_steps, period_ms, start_ms"),
    ):
        scenario = load_scenario(
            scenario_file(tmp_path, world={"python": python, "options": {"colour": "red"}})
        )
        with pytest.raises(ConfigError) as err:
            scenario_world(scenario)()
        assert err.value.field.startswith("world.")
        assert needle in str(err.value)


def test_open_loop_commands_refuse_a_closed_loop_scenario(tmp_path: Path) -> None:
    world = {"episode_ms": 100, "reactions": []}
    closed = load_scenario(scenario_file(tmp_path, world=world))
    with pytest.raises(ConfigError) as err:
        open_loop_only(closed, "--matrix")
    assert err.value.field == "--matrix"
    plain = load_scenario(scenario_file(tmp_path))
    assert open_loop_only(plain, "--matrix") is plain
