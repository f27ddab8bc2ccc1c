"""``forethought check`` reports every problem of a spec in one run, and prices under its profile.

The kitchen-arm spec below has seven faults of different stages (a grid, a candidate, grading
rules against the action schema and the event's parameters, an effect's kind, a condition no
state reaches); before, they took three runs to find. One run must list them all.
"""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from forethought.commands._check import check_file, run_check
from forethought.policies import ConfigError
from forethought.sims._profiles import profile_list, replay_threads, validate_profiles

KITCHEN: dict[str, Any] = {
    "name": "kitchen-arm",
    "description": "A kitchen robot arm that clears tables and hands over cups.",
    "action": {
        "type": "object",
        "properties": {
            "motion": {"enum": ["reach", "retract", "hold"]},
            "gripper": {"enum": ["open", "closed"]},
            "speed": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["motion", "gripper", "speed"],
    },
    "default_action": {"motion": "hold", "gripper": "closed", "speed": 0},
    "candidates": [{"motion": "reach", "gripper": "open", "speed": 1}],
    "state": {"mode": "serving", "gripper": "closed"},
    "profile": {"step_ms": 8.6, "prefill_us_per_token": 50},
    "events": [
        {
            "type": "cup_seen",
            "params": {
                "distance_m": {"min": 0.2, "max": 1.0, "step": 0.2},
                "side": ["left", "right"],
            },
            "deadline_ms": 400,
            "latest_only": True,
            "accept": [
                {"when": {"side": "left"}, "then": [{"motion": "reach"}]},
                {"then": [{"motion": "hold"}]},
            ],
        },
        {
            "type": "table_done",
            "params": {"table": ["t1", "t2"]},
            "deadline_ms": 1000,
            "effects": {"mode": "serving"},
            "accept": [
                {"when": {"state.mode": "serving"}, "then": [{"motion": "retract"}]},
                {"then": [{"motion": "hold"}]},
            ],
        },
    ],
}


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "kitchen.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _seven_faults() -> dict[str, Any]:
    data = copy.deepcopy(KITCHEN)
    cup, table = data["events"]
    cup["params"]["distance_m"]["step"] = 0.3  # 1. does not divide 0.2..1.0
    data["candidates"][0]["speed"] = 1.5  # 2. out of bounds
    cup["accept"][0]["then"] = [{"motion": "grab"}]  # 3. not in the action's enum
    cup["accept"].insert(1, {"when": {"hand": "near"}, "then": [{"motion": "hold"}]})  # 4.
    table["params"] = {"table": {"min": 1, "max": 4, "step": 1}}
    table["effects"] = {"gripper": "$table"}  # 5. a number into a string field
    table["accept"][0]["when"] = {"state.mode": "cleanup"}  # 6. no state reaches it
    table["accept"][0]["then"] = [{"motion": "retract", "elbow": 3}]  # 7. no such field
    return data


def test_the_clean_kitchen_spec_is_priced_under_its_own_profile(tmp_path: Path) -> None:
    result = check_file(_write(tmp_path, KITCHEN))
    assert [p.line() for p in result.problems] == []
    assert result.cost is not None
    assert result.cost.profile == "step_ms=8.6,prefill_us_per_token=50"
    assert result.cost.figures.step_base_s == pytest.approx(0.0086)
    default = check_file(_write(tmp_path, {k: v for k, v in KITCHEN.items() if k != "profile"}))
    assert default.cost is not None
    assert default.cost.profile == "cpu-2core-smollm2"
    assert default.cost.seconds > result.cost.seconds  # 45 ms steps against 8.6 ms


def test_one_check_run_reports_all_seven_faults(tmp_path: Path) -> None:
    result = check_file(_write(tmp_path, _seven_faults()))
    found = {(p.severity, p.path) for p in result.problems}
    assert found == {
        ("error", "events[0].params.distance_m"),
        ("error", "candidates[0]"),
        ("error", "events[0].accept[0].then[0].motion"),
        ("error", "events[0].accept[1].when.hand"),
        ("warning", "events[1].effects.gripper"),
        ("warning", "events[1].accept[0].when.state.mode"),
        ("error", "events[1].accept[0].then[0]"),
    }, [p.line() for p in result.problems]
    lines = {p.path: p.line() for p in result.problems}
    assert "'grab' is not one of" in lines["events[0].accept[0].then[0].motion"]
    assert "['elbow']" in lines["events[1].accept[0].then[0]"]
    assert "starts as a string" in lines["events[1].effects.gripper"]
    assert "declared: 'serving'" in lines["events[1].accept[0].when.state.mode"]
    assert result.cost is None  # errors: nothing is priced


def test_an_unreachable_parameter_condition_is_warned(tmp_path: Path) -> None:
    data = copy.deepcopy(KITCHEN)
    data["events"][0]["accept"][0]["when"] = {"side": "up", "distance_m": {"min": 2}}
    problems = check_file(_write(tmp_path, data)).problems
    assert {p.path for p in problems} == {
        "events[0].accept[0].when.side",
        "events[0].accept[0].when.distance_m",
    }
    assert all(p.severity == "warning" for p in problems)


@pytest.mark.parametrize(
    ("given", "step_ms"),
    [("gpu-8b", 12.0), ("step_ms=8.6,prefill_us_per_token=50", 8.6), (None, 8.6)],
)
def test_check_profile_takes_names_and_figures(
    tmp_path: Path, given: str | None, step_ms: float
) -> None:
    out = io.StringIO()
    assert run_check(_write(tmp_path, KITCHEN), scenario=None, profile=given, out=out) == 0
    assert f"(step {step_ms:.3g} ms" in out.getvalue()


@pytest.mark.parametrize("bad", ["gpu8b", "step_ms=8.6", "step_ms=x,prefill_us_per_token=1"])
def test_a_bad_profile_is_refused_naming_it(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="--profile"):
        check_file(_write(tmp_path, KITCHEN), profile=bad)
    with pytest.raises(ConfigError, match="--profile"):
        validate_profiles(bad)


def test_a_profile_list_groups_figures() -> None:
    assert profile_list("step_ms=8.6,prefill_us_per_token=50") == [
        "step_ms=8.6,prefill_us_per_token=50"
    ]
    assert profile_list("gpu-8b, step_ms=8.6,prefill_us_per_token=50,cpu-8b-q4") == [
        "gpu-8b",
        "step_ms=8.6,prefill_us_per_token=50",
        "cpu-8b-q4",
    ]
    assert validate_profiles("cpu-measured,gpu-8b") == ["cpu-measured", "gpu-8b"]


def test_a_replay_on_fixed_profiles_decodes_on_one_thread() -> None:
    # Its decisions then do not depend on the machine's core count or load.
    assert replay_threads("virtual", "cpu-2core-smollm2", None) == 1
    assert replay_threads("virtual", "step_ms=8.6,prefill_us_per_token=50") == 1
    # A measured profile times the passes as this machine decodes them: its count is chosen.
    assert replay_threads("virtual", "cpu-measured") is None
    assert replay_threads("virtual", "gpu-8b,cpu-measured") is None
    assert replay_threads("virtual", None, "cpu-measured") is None
    # The real clock decodes as a deployment does.
    assert replay_threads("real", "gpu-8b") is None
    assert replay_threads("both", None) is None
