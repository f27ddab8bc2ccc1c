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

from forethought.policies import (
    ActionSchema,
    AgentSpec,
    ConfigError,
    ForethoughtError,
    Problem,
    check_spec,
)
from forethought.policies.internals import StateDomain, did_you_mean, validation_problems

from ._grading import Grader, matches
from ._reactions import WorldBlock
from ._ros2_recording import check_recording_map
from ._scenario import SCENARIO_KEYS, Generate, Scenario, load_scenario
from ._trace_event import TraceEvent

__all__ = ["TRACE_HINT", "check_accept", "check_scenario"]

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
    values = StateDomain.of(spec) if spec is not None else None
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
    problems += check_accept(data)
    if spec is not None:
        problems += check_recording_map(path, data.get("mcap"), spec)
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


def _generate(gen: Any, declared: list[str], values: StateDomain | None) -> list[Problem]:
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


def _drift(drifts: list[Any], values: StateDomain) -> list[Problem]:
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


def check_accept(data: Any) -> list[Problem]:
    """Every problem of the ``accept`` rules of a document, whether or not its spec loads.

    Partial actions are checked against the action schema (unknown fields, values no valid
    action has), conditions against the event type's parameters and the state's fields; a
    condition no declared state or parameter value can meet is warned (the rule never applies).
    """
    if not isinstance(data, Mapping):
        return []
    schema, default = _action_parts(data)
    raw_state = data.get("state")
    state = raw_state if isinstance(raw_state, Mapping) else {}
    values = StateDomain.of_document(data)
    domains: dict[str, Mapping[str, Any]] = {}
    rules: list[tuple[str, Any, str | None]] = []
    for i, ev in enumerate(data.get("events") or []):
        if isinstance(ev, Mapping) and isinstance(ev.get("type"), str):
            params = ev.get("params", {})
            domains[ev["type"]] = params if isinstance(params, Mapping) else {}
        if isinstance(ev, Mapping) and "accept" in ev:
            rules.append((f"events[{i}].accept", ev["accept"], ev.get("type")))
    trace = data.get("trace")
    for i, ev in enumerate(trace if isinstance(trace, list) else []):
        if isinstance(ev, Mapping) and "accept" in ev:
            rules.append((f"trace[{i}].accept", ev["accept"], ev.get("type")))
    problems: list[Problem] = []
    for where, raw, etype in rules:
        params = domains.get(etype) if isinstance(etype, str) else None
        found = Grader.problems(
            raw, where=where, schema=schema, default=default, params=params, state=state
        )
        problems += [Problem("error", e.field, e.value, e.problem) for e in found]
        problems += _unreachable(where, raw, params or {}, values)
    return problems


def _action_parts(data: Mapping[str, Any]) -> tuple[ActionSchema | None, Mapping[str, Any] | None]:
    """The action schema and a default that validates against it, each None when it does not."""
    action = data.get("action")
    if not isinstance(action, Mapping):
        return None, None
    try:
        schema = ActionSchema.from_json_schema(dict(action))
    except ForethoughtError:
        return None, None
    default = data.get("default_action")
    if not isinstance(default, Mapping):
        return schema, None
    try:
        schema.validate(dict(default))
    except ForethoughtError:
        return schema, None
    return schema, default


def _unreachable(
    where: str, raw: Any, params: Mapping[str, Any], values: StateDomain
) -> list[Problem]:
    """Warnings for ``when`` conditions no declared state or parameter value meets."""
    out: list[Problem] = []
    entries = raw if isinstance(raw, list) else []
    for i, entry in enumerate(entries):
        when = entry.get("when") if isinstance(entry, Mapping) else None
        if not isinstance(when, Mapping):
            continue
        for name, want in when.items():
            path = f"{where}[{i}].when.{name}"
            if isinstance(name, str) and name.startswith("state."):
                field = name.removeprefix("state.")
                declared = values.declared(field) if field in values.fields else None
                what = f"state.{field}"
            else:
                what = f"parameter {name}"
                domain = params.get(name)
                declared = list(domain) if isinstance(domain, list) else None
                if isinstance(domain, Mapping) and _range_misses(want, domain):
                    declared = []
            if declared is None or any(matches(v, want) for v in declared):
                continue
            shown = ", ".join(repr(v) for v in declared) or "a range it does not meet"
            out.append(
                Problem(
                    "warning",
                    path,
                    want,
                    f"no declared value of {what} meets this condition (declared: {shown}): "
                    "the rule never applies",
                    "declare the value (a state effect or a parameter domain) or fix the condition",
                )
            )
    return out


def _range_misses(want: Any, grid: Mapping[str, Any]) -> bool:
    """Whether a condition on a grid parameter can never hold (received values stay in range)."""
    lo, hi = grid.get("min"), grid.get("max")
    if not isinstance(lo, int | float) or not isinstance(hi, int | float):
        return False
    if isinstance(want, Mapping):
        w_lo, w_hi = want.get("min", lo), want.get("max", hi)
        if not isinstance(w_lo, int | float) or not isinstance(w_hi, int | float):
            return False
        return bool(w_lo > hi or w_hi < lo)
    if isinstance(want, bool) or not isinstance(want, int | float):
        return not isinstance(want, list)
    return bool(want < lo or want > hi)


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
