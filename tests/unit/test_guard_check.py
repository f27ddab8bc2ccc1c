"""``forethought check`` proves the defaults keep every guard, or names the counter-example."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from forethought.policies import AgentSpec, ConfigError, check_spec, default_breaches

SPEC: dict[str, Any] = {
    "name": "door",
    "description": "a sliding door between a corridor and a lab",
    "action": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["open", "close", "hold"]},
            "speed": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["command", "speed"],
    },
    "default_action": {"command": "close", "speed": 0.2},
    "state": {"person_in_doorway": False, "mode": "auto"},
    "events": [
        {
            "type": "person",
            "deadline_ms": 200,
            "params": {"present": [True, False]},
            "effects": {"person_in_doorway": "$present"},
        },
        {
            "type": "fire_alarm",
            "deadline_ms": 100,
            "params": {"level": {"min": 0, "max": 10, "step": 1}},
        },
    ],
    "guards": [
        {
            "name": "door-clear",
            "when": {"state.person_in_doorway": True},
            "forbid": [{"command": "close"}],
        },
        {"name": "alarm-open", "when": {"level": {"min": 3}}, "allow": [{"command": "open"}]},
    ],
}


def test_check_names_a_default_that_breaks_a_guard_with_the_state_and_event() -> None:
    errors = [p for p in check_spec(SPEC) if p.severity == "error"]
    lines = [p.line() for p in errors]
    assert any(
        "'door-clear'" in line
        and "'person_in_doorway': True" in line
        and "event person {'present': True}" in line
        for line in lines
    ), lines
    # The alarm guard reads a grid parameter: the witness is a reading in its range.
    assert any("'alarm-open'" in line and "fire_alarm {'level': 3}" in line for line in lines)
    with pytest.raises(ConfigError, match="door-clear"):
        AgentSpec.from_data(SPEC)


def test_per_event_type_defaults_prove_what_one_default_cannot() -> None:
    spec = copy.deepcopy(SPEC)
    spec["default_action"] = {"command": "hold", "speed": 0.0}
    assert any("'alarm-open'" in p.line() for p in check_spec(spec) if p.severity == "error")
    spec["events"][1]["default_action"] = {"command": "open", "speed": 0.5}
    assert [p for p in check_spec(spec) if p.severity == "error"] == []
    loaded = AgentSpec.from_data(spec)
    assert default_breaches(loaded) == []
    assert loaded.type_defaults() == {"fire_alarm": {"command": "open", "speed": 0.5}}


def test_check_says_which_guards_cannot_be_compiled() -> None:
    spec = copy.deepcopy(SPEC)
    spec["default_action"] = {"command": "hold", "speed": 0.0}
    spec["events"][1]["default_action"] = {"command": "open", "speed": 0.5}
    spec["guards"].append({"name": "pair", "forbid": [{"command": "open", "speed": {"min": 0.9}}]})
    warnings = [p for p in check_spec(spec) if p.severity == "warning"]
    assert [p.path for p in warnings] == ["guards[2]"]
    assert "several fields together" in warnings[0].problem


@pytest.mark.parametrize(
    ("guard", "path"),
    [
        (
            {"name": "x", "when": {"state.nobody": True}, "forbid": [{"command": "close"}]},
            "guards[0].when.state.nobody",
        ),
        (
            {"name": "x", "when": {"nobody": 1}, "forbid": [{"command": "close"}]},
            "guards[0].when.nobody",
        ),
        ({"name": "x", "forbid": [{"colour": "red"}]}, "guards[0].forbid[0]"),
    ],
)
def test_a_guard_naming_what_the_spec_lacks_is_an_error_at_its_path(
    guard: dict[str, Any], path: str
) -> None:
    spec = copy.deepcopy(SPEC)
    spec["default_action"] = {"command": "hold", "speed": 0.0}
    spec["guards"] = [guard]
    errors = [p for p in check_spec(spec) if p.severity == "error"]
    assert [p.path for p in errors] == [path], [p.line() for p in errors]


def test_a_bad_per_type_default_is_named() -> None:
    spec = copy.deepcopy(SPEC)
    spec["default_action"] = {"command": "hold", "speed": 0.0}
    spec["events"][1]["default_action"] = {"command": "fly", "speed": 0.5}
    errors = [p for p in check_spec(spec) if p.severity == "error"]
    assert [p.path for p in errors] == ["events[1].default_action"]
