"""The scoreboard: grading rules, honest metrics, and the charged model time, exactly."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from forethought.models import (
    CancelSignal,
    DecodeOptions,
    GenerationStatus,
    LatencyModel,
    LatencyProfile,
    ScriptedBackend,
    TransformersBackend,
)
from forethought.models._prompt import Prompt
from forethought.policies import ActionSchema, ConfigError
from forethought.sims import load_scenario, metrics, replay
from forethought.sims._charged import ChargedClock
from forethought.sims._vloop import run_virtual

BASE: dict[str, Any] = {
    "name": "score",
    "description": "A test robot.",
    "action": {
        "type": "object",
        "properties": {"a": {"enum": ["stop", "slow", "go"]}, "v": {"type": "number"}},
        "required": ["a"],
    },
    "default_action": {"a": "stop"},
    "state": {"zone": "aisle", "armed": True},
    "events": [
        {
            "type": "person",
            "deadline_ms": 500,
            "params": {"side": ["left", "right", "front"], "d": {"min": 0, "max": 3, "step": 1}},
            "accept": [
                {"when": {"d": {"max": 1.5}}, "then": [{"a": "stop"}]},
                {"when": {"side": ["left", "right"]}, "then": [{"a": "slow"}, {"a": "stop"}]},
                {"then": [{"a": "stop"}, {"a": "slow", "v": {"max": 0.5}}]},
            ],
        },
        {"type": "clear", "deadline_ms": 800, "accept": [{"a": "go"}]},
    ],
    "trace": [{"at_ms": 0, "type": "clear"}],
}


def scenario_file(tmp_path: Path, **change: Any) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({**BASE, **change}))
    return path


def test_rules_grade_params_as_received_state_and_ranges(tmp_path: Path) -> None:
    sc = load_scenario(scenario_file(tmp_path))
    trace = sc.events()
    person = trace[0].model_copy(update={"type": "person", "params": {"side": "front", "d": 1.2}})
    state = {"zone": "aisle", "armed": True}
    assert sc.grade(person, {"a": "stop"}, state) is True
    assert sc.grade(person, {"a": "slow"}, state) is False  # 1.2 <= 1.5: only stop
    left = person.model_copy(update={"params": {"side": "left", "d": 2.6}})  # off the grid
    assert sc.grade(left, {"a": "slow"}, state) is True
    front = person.model_copy(update={"params": {"side": "front", "d": 2.6}})
    assert sc.grade(front, {"a": "slow", "v": 0.4}, state) is True  # the catch-all's range
    assert sc.grade(front, {"a": "slow", "v": 0.9}, state) is False
    assert sc.grade(front, {"a": "slow"}, state) is False  # a named field must be there
    assert sc.grade(trace[0], {"a": "go"}, state) is True


def test_a_trace_events_accept_overrides_its_types_and_state_conditions(tmp_path: Path) -> None:
    trace = [
        {
            "at_ms": 0,
            "type": "clear",
            "accept": [{"when": {"state.armed": True}, "then": [{"a": "slow"}]}],
        },
        {"at_ms": 1, "type": "teleport", "accept": [{"a": "stop"}]},  # out of space, graded
    ]
    sc = load_scenario(scenario_file(tmp_path, trace=trace))
    first, second = sc.events()
    assert sc.grade(first, {"a": "slow"}, {"armed": True}) is True
    assert sc.grade(first, {"a": "go"}, {"armed": True}) is False  # the type's rule is overridden
    assert sc.grade(first, {"a": "slow"}, {"armed": 1}) is None  # true is never 1: no rule applies
    assert sc.grade(second, {"a": "stop"}, {}) is True


@pytest.mark.parametrize(
    ("events_accept", "path", "problem"),
    [
        ([{"b": "stop"}], "events[1].accept", "unknown action fields ['b']"),
        (
            [{"when": {"speed": 3}, "then": [{"a": "go"}]}],
            "events[1].accept[0].when.speed",
            "not a declared parameter",
        ),
        (
            [{"when": [1], "then": [{"a": "go"}]}],
            "events[1].accept[0].when",
            "mapping of conditions",
        ),
        (
            [{"when": {"state.nope": 1}, "then": [{"a": "go"}]}],
            "events[1].accept[0].when.state.nope",
            "no field 'nope'",
        ),
        ([{"then": []}], "events[1].accept[0].then", "non-empty list"),
        ([], "events[1].accept", "non-empty list"),
        ([{"a": "fly"}], "events[1].accept[0]", "cannot match any valid action"),
    ],
)
def test_bad_rules_fail_to_load_naming_file_path_and_problem(
    tmp_path: Path, events_accept: Any, path: str, problem: str
) -> None:
    events = [BASE["events"][0], {**BASE["events"][1], "accept": events_accept}]
    file = scenario_file(tmp_path, events=events)
    with pytest.raises(ConfigError) as info:
        load_scenario(file)
    text = str(info.value)
    assert str(file) in text
    assert path in text
    assert problem in text


def test_the_cli_prints_one_error_line_for_a_bad_rule(tmp_path: Path) -> None:
    events = [
        BASE["events"][0],
        {**BASE["events"][1], "accept": [{"when": {"x": 1}, "then": [{"a": "go"}]}]},
    ]
    file = scenario_file(tmp_path, events=events)
    done = subprocess.run(
        [sys.executable, "-m", "forethought", "sim", str(file)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert str(file) in lines[0]
    assert "events[1].accept[0].when.x" in lines[0]
    assert "Traceback" not in done.stderr


def test_a_backend_that_always_fails_scores_no_hit(tmp_path: Path) -> None:
    trace = [
        {"at_ms": 1000 * i, "type": "person", "params": {"side": "front", "d": 1}}
        for i in range(1, 6)
    ]
    sc = load_scenario(scenario_file(tmp_path, trace=trace))
    runs = replay(
        sc,
        lambda: ScriptedBackend(score_mode="raise", live_mode="raise", action={"a": "stop"}),
        strategies=("live", "tree", "hybrid"),
    )
    for name in ("live", "tree", "hybrid"):
        m = metrics(runs[name])
        assert m["answered_in_time"] == 0.0, name
        assert m["fallback_rate"] == 1.0, name
        assert m["correct_in_time"] == 0.0, name
        assert m["deadline_hit_rate"] == 1.0, name  # every fallback was on time
        assert m["correct"] == 1.0, name  # the default (stop) happens to be right: not a hit
    assert runs["tree"].planner["errors"]["BackendError"] >= 1


def test_fallbacks_are_not_hits_but_model_answers_are(tmp_path: Path) -> None:
    trace = [{"at_ms": 1000 * i, "type": "clear"} for i in range(1, 5)]
    sc = load_scenario(scenario_file(tmp_path, trace=trace))
    runs = replay(
        sc, lambda: ScriptedBackend(live_s=0.05, action={"a": "go"}), strategies=("tree",)
    )
    m = metrics(runs["tree"])
    assert m["answered_in_time"] == 1.0  # planned before each event arrived
    assert m["correct_in_time"] == 1.0
    assert m["fallback_rate"] == 0.0
    assert m["graded"] == 4


PROFILE = LatencyProfile(
    prefill_base_s=0.010,
    prefill_per_token_s=0.0001,
    step_base_s=0.020,
    step_per_row_s=0.001,
    spread95=1.0,
)


@pytest.mark.model
def test_the_charged_time_of_a_known_call_sequence(tiny_backend: TransformersBackend) -> None:
    schema = ActionSchema.from_json_schema(
        {"type": "object", "properties": {"t": {"type": "string"}}}
    )
    prefix, own = tiny_backend.prompts.encode(Prompt("ctx", "ev"), schema)

    def prefill(n: int) -> float:
        return 0.010 + 0.0001 * n

    step = 0.020  # one row, one token per pass
    head, body = prefill(len(prefix)), prefill(len(own))

    async def sequence() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        clock = ChargedClock(loop, PROFILE)
        backend = tiny_backend.sharing(
            clock=clock,
            latency=LatencyModel(PROFILE, fixed=True),
            options=DecodeOptions(constrained=False),
        )
        out: dict[str, Any] = {}
        async with backend:

            async def call(deadline: float = math.inf, cancel: CancelSignal | None = None) -> Any:
                (g,) = await backend.generate(
                    "ctx", ["ev"], schema, deadline=deadline, cancel=cancel, max_new_tokens=6
                )
                return g

            t0 = loop.time()
            first = await call()  # prefix missed: two prefills, then 5 decode passes
            out["first"] = (first.status, loop.time() - t0)
            t0 = loop.time()
            cached = await call()  # the prefix is cached: one prefill
            out["cached"] = (cached.status, loop.time() - t0)
            t0 = loop.time()
            refused = await call(deadline=t0 + body - 1e-4)  # the prefill cannot fit
            out["not_started"] = (refused.status, loop.time() - t0)
            # Cut: the call is admitted while prefill + 8 typical steps fit, then stops before
            # the pass that would overshoot (max_new_tokens 20 leaves room for more).
            t0 = loop.time()
            (cut,) = await backend.generate(
                "ctx", ["ev"], schema, deadline=t0 + body + 9.5 * step, max_new_tokens=20
            )
            out["cut"] = (cut.status, loop.time() - t0)
            # Cancel at 2.5 passes: the pass under way ends, then the call stops.
            t0 = loop.time()
            signal = CancelSignal()
            loop.call_at(t0 + body + 2.5 * step, signal.cancel)
            (stopped,) = await backend.generate(
                "ctx", ["ev"], schema, deadline=math.inf, cancel=signal, max_new_tokens=20
            )
            out["cancel"] = (stopped.status, loop.time() - t0)
            # Two callers at once: one device, so the second starts when the first ends.
            t0 = loop.time()
            a, b = await asyncio.gather(call(), call())
            out["queue"] = (a.finished_at - t0, b.started_at - t0, b.finished_at - t0)
        out["charged"] = clock.charged_s
        return out

    got = run_virtual(sequence())
    us = 1e-6
    assert got["first"][0] is GenerationStatus.LENGTH
    assert got["first"][1] == pytest.approx(head + body + 5 * step, abs=us)
    assert got["cached"][1] == pytest.approx(body + 5 * step, abs=us)
    assert got["not_started"] == (GenerationStatus.NOT_STARTED, 0.0)
    assert got["cut"][0] is GenerationStatus.DEADLINE
    assert got["cut"][1] == pytest.approx(body + 9 * step, abs=us)
    assert got["cancel"][0] is GenerationStatus.CANCELLED
    assert got["cancel"][1] == pytest.approx(body + 3 * step, abs=us)
    one = body + 5 * step
    assert got["queue"] == pytest.approx((one, one, 2 * one), abs=us)
    total = head + body + 5 * step + one + 0.0 + body + 9 * step + body + 3 * step + 2 * one
    assert got["charged"] == pytest.approx(total, abs=us)
