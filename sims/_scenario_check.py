"""Check a scenario file: its spec, its trace or generate block and its grading, every problem.

:func:`check_scenario` adds to :func:`check_spec` what only a scenario has:
a ``trace`` or a ``generate`` block (one is needed: the hint says what each is), trace events of
undeclared types, state patches and drifts naming unknown fields or undeclared values, ``accept``
rules that make no sense for the spec, and declared event types the replay never draws (their
rows in a report would be empty).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from forethought.policies import AgentSpec, ConfigError, ForethoughtError
from forethought.policies._spec_check import (
    Problem,
    StateValues,
    check_spec,
    did_you_mean,
    validation_problems,
)

from ._grading import Grader
from ._reactions import WorldBlock
from ._scenario import SCENARIO_KEYS, Generate, Scenario, load_scenario
from ._trace_event import TraceEvent

__all__ = ["TRACE_HINT", "check_scenario"]

TRACE_HINT = (
    "add `generate: {count: 200, mean_gap_ms: 2000, seed: 1}` (a seeded random stream: types "
    "drawn by weight, parameters from their domains) or `trace: [{at_ms: 1000, type: T, "
    "params: {...}}]` (events at fixed times), or both"
)


def _model_problems(model: type[BaseModel], data: Any, where: str) -> list[Problem]:
    try:
        model.model_validate(data)
    except ValidationError as exc:
        known = [k for k in model.model_fields if k != "grader"]
        return validation_problems(exc, where, known)
    return []


def check_scenario(data: Any, path: str = "scenario") -> list[Problem]:
    """Every problem of a scenario document: its spec's, then its trace's and grading's."""
    problems = check_spec(data, extra_keys=SCENARIO_KEYS)
    if not isinstance(data, Mapping):
        return problems
    if not any(k in data for k in ("trace", "generate", "mcap", "world")):
        problems.append(
            Problem("error", "trace", None, "a scenario needs events to replay", TRACE_HINT)
        )
    declared = _declared_types(data)
    trace = data.get("trace", [])
    if not isinstance(trace, list):
        problems.append(
            Problem(
                "error",
                "trace",
                trace,
                "the trace is a list of events",
                "write trace: [{at_ms: 1000, type: T}]",
            )
        )
        trace = []
    spec = _spec(data)
    values = StateValues.of(spec) if spec is not None else None
    for i, ev in enumerate(trace):
        where = f"trace[{i}]"
        problems += _model_problems(TraceEvent, _without(ev, "accept"), where)
        if not isinstance(ev, Mapping):
            continue
        etype = ev.get("type")
        if isinstance(etype, str) and declared and etype not in declared:
            problems.append(
                Problem(
                    "warning",
                    f"{where}.type",
                    etype,
                    "not a declared event type: decided by the fallback tiers, never from the tree",
                    f"{did_you_mean(etype, declared)} (or declare it under events)",
                )
            )
        if isinstance(ev.get("state"), Mapping) and values is not None:
            problems += values.unknown(ev["state"], f"{where}.state")
    gen = data.get("generate")
    if gen is not None:
        problems += _generate(gen, declared, values)
    if spec is not None:
        problems += _accept(data, spec)
    if spec is not None and data.get("world") is not None:
        problems += _world(data["world"], spec)
    if "world" not in data and not any(p.severity == "error" for p in problems):
        # (a world draws its events as it goes: no trace says in advance which come)
        problems += _never_drawn(path, declared)
    return problems


def _world(block: Any, spec: AgentSpec) -> list[Problem]:
    """A closed-loop scenario's ``world`` block, checked against the spec."""
    problems = _model_problems(WorldBlock, block, "world")
    if problems:
        return problems
    try:
        WorldBlock.model_validate(block).check("world", spec)
    except ConfigError as exc:
        hint = "see the simulator guide's Closed loop section"
        return [Problem("error", exc.field, exc.value, exc.problem, hint)]
    return []


def _without(ev: Any, key: str) -> Any:
    return {k: v for k, v in ev.items() if k != key} if isinstance(ev, Mapping) else ev


def _declared_types(data: Mapping[str, Any]) -> list[str]:
    events = data.get("events")
    if not isinstance(events, list):
        return []
    return [e["type"] for e in events if isinstance(e, Mapping) and isinstance(e.get("type"), str)]


def _spec(data: Mapping[str, Any]) -> AgentSpec | None:
    header = {k: v for k, v in data.items() if k not in SCENARIO_KEYS}
    if isinstance(header.get("events"), list):
        header["events"] = [_without(e, "accept") for e in header["events"]]
    try:
        return AgentSpec.model_validate(header)
    except (ValidationError, ForethoughtError):
        return None


def _generate(gen: Any, declared: list[str], values: StateValues | None) -> list[Problem]:
    problems = _model_problems(Generate, gen, "generate")
    if not isinstance(gen, Mapping):
        return problems
    names: list[tuple[str, str]] = []
    if isinstance(gen.get("weights"), Mapping):
        names += [(f"generate.weights.{n}", n) for n in gen["weights"]]
    if isinstance(gen.get("follow"), Mapping):
        for first, nexts in gen["follow"].items():
            names.append((f"generate.follow.{first}", first))
            if isinstance(nexts, Mapping):
                names += [(f"generate.follow.{first}.{n}", n) for n in nexts]
    for where, name in names:
        if declared and name not in declared:
            problems.append(
                Problem(
                    "error",
                    where,
                    name,
                    "names no declared event type",
                    did_you_mean(str(name), declared),
                )
            )
    if values is not None and isinstance(gen.get("drift"), list):
        problems += _drift(gen["drift"], values)
    return problems


def _drift(drifts: list[Any], values: StateValues) -> list[Problem]:
    problems: list[Problem] = []
    for j, d in enumerate(drifts):
        if isinstance(d, Mapping) and isinstance(d.get("field"), str):
            field = d["field"]
            if field not in values.fields:
                problems.append(
                    Problem(
                        "warning",
                        f"generate.drift[{j}].field",
                        field,
                        "drifts a field the spec's state does not declare",
                        did_you_mean(field, values.fields),
                    )
                )
            elif isinstance(d.get("values"), list):
                for v in d["values"]:
                    problems += values.unknown({field: v}, f"generate.drift[{j}].values")
    return problems


def _accept(data: Mapping[str, Any], spec: AgentSpec) -> list[Problem]:
    problems: list[Problem] = []
    schema = spec.action_schema()
    types = spec.event_space().types
    rules: list[tuple[str, Any, str | None]] = []
    for i, ev in enumerate(data.get("events") or []):
        if isinstance(ev, Mapping) and "accept" in ev:
            rules.append((f"events[{i}].accept", ev["accept"], ev.get("type")))
    for i, ev in enumerate(data.get("trace") or []):
        if isinstance(ev, Mapping) and "accept" in ev:
            rules.append((f"trace[{i}].accept", ev["accept"], ev.get("type")))
    for where, raw, etype in rules:
        try:
            Grader.parse(
                raw,
                where=where,
                schema=schema,
                default=spec.default_action,
                event_type=types.get(etype) if isinstance(etype, str) else None,
                state=spec.state,
            )
        except ConfigError as exc:
            problems.append(Problem("error", exc.field, exc.value, exc.problem))
    return problems


def _never_drawn(path: str, declared: list[str]) -> list[Problem]:
    """Declared types no event of the replay has (only for a file that loads)."""
    try:
        scenario: Scenario = load_scenario(path)
        counts = Counter(ev.type for ev in scenario.events())
    except (ForethoughtError, OSError, ValueError):
        return []
    return [
        Problem(
            "warning",
            f"events.{name}",
            0,
            "the trace never draws this type: a replay says nothing about it",
            "add it to the trace, or give it weight in generate",
        )
        for name in declared
        if counts[name] == 0
    ]
