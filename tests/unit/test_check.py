"""``forethought check``: every problem of a broken spec in one run, with no model loaded."""

from __future__ import annotations

import copy
import logging
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
import yaml
from extras import needs

from forethought.commands._check import check_file
from forethought.policies import AgentSpec, ConfigError, check_spec
from forethought.policies._spec import load_document
from forethought.policies._spec_check import StateDomain
from forethought.sims import shipped_scenarios
from forethought.sims._file_schema import spec_file_schema
from forethought.sims._scenario_check import check_scenario

DOOR: dict[str, Any] = {
    "name": "door",
    "description": "A door controller: open for people, close on alarm.",
    "action": {
        "type": "object",
        "properties": {"action": {"enum": ["open", "close", "hold"]}},
        "required": ["action"],
    },
    "default_action": {"action": "hold"},
    "state": {"mode": "normal", "door": "closed"},
    "events": [
        {"type": "person", "params": {"side": ["inside", "outside"]}, "deadline_ms": 300},
        {"type": "alarm", "deadline_ms": 200, "effects": {"mode": "alarm"}},
        {
            "type": "badge",
            "params": {"distance_m": {"min": 0, "max": 2, "step": 0.5}},
            "deadline_ms": 500,
            "tolerance": {"distance_m": 0.5},
        },
    ],
    "generate": {"count": 20, "mean_gap_ms": 1000},
}


def broken(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(DOOR)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is _DROP:
            del node[last]
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return data


_DROP = object()


def write(tmp_path: Path, data: dict[str, Any], name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_complete_spec_is_clean(tmp_path: Path) -> None:
    result = check_file(write(tmp_path, DOOR))
    assert [p.line() for p in result.problems] == []
    assert result.cost is not None
    assert {t.type for t in result.cost.types} == {"person", "alarm", "badge"}


# Each broken spec: what was changed, and the (severity, path, words) of every problem it has.
BROKEN: list[tuple[str, dict[str, Any], list[tuple[str, str, str]]]] = [
    (
        "misnamed key and a categorical written as {enum}",
        {"actoin": DOOR["action"], "action": _DROP, "events__0__params__side": {"enum": ["a"]}},
        [
            ("error", "actoin", "did you mean 'action'"),
            ("error", "action", "required key is missing"),
            ("error", "events[0].params.side", "a categorical parameter is a plain list"),
        ],
    ),
    (
        "neither trace nor generate, and a misspelt deadline",
        {"generate": _DROP, "events__1__deadline": 200, "events__1__deadline_ms": _DROP},
        [
            ("error", "trace", "generate: {count"),
            ("error", "events[1].deadline", "did you mean 'deadline_ms'"),
            ("error", "events[1].deadline_ms", "required key is missing"),
        ],
    ),
    (
        "effects and state_fields naming unknown fields",
        {
            "events__1__effects": {"modus": "alarm"},
            "state_fields": ["mode", "zone"],
            "events__0__state_fields": ["dor"],
            "events__2__deadline_ms": -1,
        },
        [
            ("warning", "events[1].effects.modus", "did you mean 'mode'"),
            ("warning", "state_fields[1]", "names no field of state"),
            ("warning", "events[0].state_fields[0]", "did you mean 'door'"),
            ("error", "events[2].deadline_ms", "greater than 0"),
        ],
    ),
    (
        "a grid with a misspelt step, one that does not divide, an effect naming no parameter",
        {
            "events__2__params__distance_m": {"min": 0, "max": 1, "stepp": 0.3},
            "events__0__params__floor": {"min": 0, "max": 1, "step": 0.3},
            "events__0__effects": {"door": "$where"},
        },
        [
            ("error", "events[2].params.distance_m.stepp", "did you mean 'step'"),
            ("error", "events[0].params.floor", "divide"),
            ("error", "events[0].effects.door", "names no parameter"),
            ("error", "events[2].tolerance.distance_m", "only grid parameters"),
        ],
    ),
    (
        "a default action the schema refuses, a type declared twice, an empty domain",
        {
            "default_action": {"action": "fly"},
            "events__2__type": "person",
            "events__0__params__side": [],
        },
        [
            ("error", "default_action", "does not validate"),
            ("error", "events[2].type", "declared twice"),
            ("error", "events[0].params.side", "empty domain"),
        ],
    ),
    (
        "a trace of an unknown type with an undeclared state value; generate with a bad weight",
        {
            "trace": [
                {"at_ms": 5, "type": "persn", "params": {}},
                {"at_ms": 9, "type": "alarm", "state": {"mode": "maintenance", "zone": "a"}},
                {"at_ms": -1, "type": "alarm", "when": 3},
            ],
            "generate": {"count": 0, "mean_gap_ms": 1000, "weights": {"alrm": 1}},
        },
        [
            ("warning", "trace[0].type", "did you mean 'person'"),
            ("warning", "trace[1].state.mode", "'maintenance'"),
            ("warning", "trace[1].state.zone", "does not declare"),
            ("error", "trace[2].at_ms", "greater than or equal to 0"),
            ("error", "trace[2].when", "unknown key"),
            ("error", "generate.count", "greater than or equal to 1"),
            ("error", "generate.weights.alrm", "did you mean 'alarm'"),
        ],
    ),
    (
        "accept rules naming no action field, a drift of an unknown field, an effect of the "
        "wrong kind",
        {
            "events__0__accept": [{"acton": "open"}],
            "generate": {
                "count": 5,
                "mean_gap_ms": 100,
                "drift": [{"field": "mood", "every": 2, "values": ["x"]}],
            },
            "events__1__effects": {"mode": 3},
        },
        [
            ("error", "events[0].accept[0]", "acton"),
            ("warning", "generate.drift[0].field", "does not declare"),
            ("warning", "events[1].effects.mode", "starts as a string"),
        ],
    ),
    (
        "a state that is not a mapping, a name that is empty, an unknown top-level key",
        {"state": ["mode"], "name": "", "evnets": []},
        [
            ("error", "state", "mapping"),
            ("error", "name", "at least 1 character"),
            ("error", "evnets", "did you mean 'events'"),
        ],
    ),
    (
        "a parameter domain that is a bare string, tolerance on a list, state_tolerance off-grid",
        {
            "events__0__params__side": "inside,outside",
            "events__0__tolerance": {"side": 1},
            "state_tolerance": {"mode": 0.1},
        },
        [
            ("error", "events[0].params.side", "a list of values"),
            ("error", "events[0].tolerance.side", "only grid parameters"),
            ("error", "state_tolerance.mode", "only a field in state_grids"),
        ],
    ),
]


@pytest.mark.parametrize(("what", "changes", "expected"), BROKEN, ids=[b[0] for b in BROKEN])
def test_check_reports_every_problem_of_a_broken_spec_in_one_run(
    tmp_path: Path, what: str, changes: dict[str, Any], expected: list[tuple[str, str, str]]
) -> None:
    result = check_file(write(tmp_path, broken(**changes)), scenario=True)  # as --trace
    lines = [p.line() for p in result.problems]
    for severity, path, words in expected:
        found = [
            p
            for p in result.problems
            if p.severity == severity and p.path == path and words in p.line()
        ]
        assert found, f"{what}: no {severity} at {path} saying {words!r} in:\n" + "\n".join(lines)
    errors = sum(e[0] == "error" for e in expected)
    assert result.errors >= errors
    if errors:
        assert result.cost is None  # no plan for an invalid spec


def test_every_problem_names_its_value_or_says_what_to_write(tmp_path: Path) -> None:
    data = broken(actoin={}, events__0__params__side={"enum": ["inside", "outside"]})
    for p in check_file(write(tmp_path, data)).problems:
        assert p.path
        assert p.value is not None or p.fix, p.line()
    side = next(p for p in check_file(write(tmp_path, data)).problems if "side" in p.path)
    assert side.fix == "write side: [inside, outside]"
    assert side.value == {"enum": ["inside", "outside"]}


def test_loading_a_broken_spec_lists_every_problem(tmp_path: Path) -> None:
    data = broken(actoin={}, action=_DROP, events__0__params__side={"enum": ["a", "b"]})
    del data["generate"]
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        AgentSpec.from_file(path)
    text = str(info.value)
    assert str(path) in text
    assert "did you mean 'action'" in text
    assert "a categorical parameter is a plain list" in text


def test_loading_a_valid_spec_logs_its_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = broken(events__1__effects={"modus": "alarm"})
    del data["generate"]
    with caplog.at_level(logging.WARNING, logger="forethought.spec"):
        AgentSpec.from_file(write(tmp_path, data))
    assert any("events[1].effects.modus" in r.getMessage() for r in caplog.records)


def test_the_state_domain_names_undeclared_fields_and_values() -> None:
    spec = AgentSpec.model_validate({k: v for k, v in DOOR.items() if k != "generate"})
    values = StateDomain.of(spec)
    assert values.declared("mode") == ["alarm", "normal"]
    assert values.unknown({"mode": "alarm", "door": "closed"}) == []
    (problem,) = values.unknown({"mode": "maintenance"})
    assert problem.path == "state.mode"
    assert problem.value == "maintenance"
    (problem,) = values.unknown({"zone": "a"})
    assert "does not declare" in problem.problem


def test_a_declared_type_the_trace_never_draws_is_named(tmp_path: Path) -> None:
    data = broken(generate={"count": 10, "mean_gap_ms": 100, "weights": {"person": 1}})
    path = write(tmp_path, data)
    problems = check_scenario(load_document(path), str(path))
    never = {p.path for p in problems if "never draws" in p.problem}
    assert never == {"events.alarm", "events.badge"}


def test_plan_cost_counts_keys_per_reachable_state(tmp_path: Path) -> None:
    result = check_file(write(tmp_path, DOOR))
    assert result.cost is not None
    by_type = {t.type: t for t in result.cost.types}
    # person: 2 keys; badge: 5 grid values; alarm: 1 key. The alarm's effect makes a second
    # state (mode: alarm), and every type depends on every field.
    assert (by_type["person"].keys, by_type["badge"].keys, by_type["alarm"].keys) == (2, 5, 1)
    assert result.cost.states == 2
    assert result.cost.branches == (2 + 5 + 1) * 2
    assert result.cost.seconds > 0


@pytest.mark.parametrize("path", shipped_scenarios(), ids=lambda p: p.name)
def test_shipped_scenarios_check_without_errors(path: Path) -> None:
    if path.stem == "recorded-amr":
        needs("mcap", "mcap")  # its trace is an MCAP recording
    result = check_file(path)
    assert result.errors == 0, [p.line() for p in result.problems]
    assert result.cost is not None


def test_check_command_loads_no_model(tmp_path: Path) -> None:
    path = write(tmp_path, broken(actoin={}))
    script = (
        "import sys, time; t = time.perf_counter(); from forethought._cli import main; "
        f"rc = main(['check', {str(path)!r}]); "
        "print('torch' in sys.modules, 'transformers' in sys.modules, "
        "'networkx' in sys.modules, 'httpx' in sys.modules, rc, "
        "round(time.perf_counter() - t, 2), file=sys.stderr)"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    torch, transformers, networkx, httpx, rc, seconds = out.stderr.split()[-6:]
    # Nor networkx (only a policy tree needs it) nor httpx (only a server backend; it loads
    # click, rich and pygments for its command line): a third of a second each.
    loaded = (torch, transformers, networkx, httpx, rc)
    assert loaded == ("False", "False", "False", "False", "1"), out.stderr
    assert "did you mean 'action'" in out.stdout
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    # Loading torch alone costs more CPU than this; the wall time (printed) is measured, not
    # asserted: this machine is shared.
    print(f"check: {seconds} s wall in-process, {cpu:.2f} s CPU for the whole subprocess")
    assert cpu < 5.0


def test_schema_command_validates_shipped_files_and_refuses_unknown_keys() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "forethought", "schema", "spec"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    schema = orjson.loads(out.stdout)
    assert schema == orjson.loads(orjson.dumps(spec_file_schema()))
    validator = jsonschema.Draft202012Validator(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in shipped_scenarios():
        errors = [e.message for e in validator.iter_errors(load_document(path))]
        assert errors == [], (path.name, errors)
    bad = broken(actoin={}, events__0__params__side={"enum": ["a"]})
    errors = list(validator.iter_errors(bad))
    assert any("actoin" in e.message for e in errors), [e.message for e in errors]
    paths = [list(e.absolute_path) for e in errors]
    assert ["events", 0, "params", "side"] in paths, paths


def test_committed_schema_file_is_current() -> None:
    committed = Path(__file__).parents[2] / "docs" / "spec.schema.json"
    assert orjson.loads(committed.read_bytes()) == orjson.loads(orjson.dumps(spec_file_schema()))


def test_check_json_problem_lines_for_a_non_mapping() -> None:
    (problem,) = check_spec(["not", "a", "spec"])
    assert problem.severity == "error"
    assert problem.path == "spec"


def test_update_state_with_an_undeclared_value_is_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from forethought.runtime import Agent

    spec = AgentSpec.model_validate({k: v for k, v in DOOR.items() if k != "generate"})
    agent = Agent(spec)
    with caplog.at_level(logging.WARNING, logger="forethought.agent"):
        agent.update_state({"mode": "alarm"})  # declared by the alarm's effect
        assert caplog.records == []
        agent.update_state({"mode": "maintenance"})
        agent.update_state({"mode": "maintenance"})
    (record,) = caplog.records
    text = record.getMessage()
    assert "update_state.mode" in text
    assert "'maintenance'" in text
    assert "declared: 'alarm', 'normal'" in text
    assert agent.state.get("mode") == "maintenance"  # accepted: the world is what it is
