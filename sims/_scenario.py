"""Scenario files: an agent spec plus the events to replay.

Everything but ``trace``/``generate`` is the agent spec ``forethought run`` takes. ``trace``
lists events at fixed times; ``generate`` appends a seeded random stream (exponential gaps,
types drawn by weight, parameters drawn from their domains, numbers jittered off the grid).
Optional: ``profile`` (the simulated device: a shipped profile's name, or figures such as
``{step_ms: 8.6, prefill_us_per_token: 50}``), ``perception_ms`` (time perception spends
between the stimulus and the event reaching the agent: one figure, or one per event type; the
deadline still counts from the stimulus), ``seed`` (the charged model time's draws) and
``accept`` on event types and trace events (grading rules, :mod:`._grading`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from forethought.policies import (
    AgentSpec,
    ConfigError,
    Grid,
    first_problem,
    load_document,
)

from ._grading import Grader

__all__ = ["SCENARIO_KEYS", "Generate", "Scenario", "TraceEvent", "load_scenario", "load_spec"]

SCENARIO_KEYS = frozenset({"trace", "generate", "profile", "perception_ms", "seed"})
"""Top-level keys of a scenario file that are not part of the agent spec."""


class TraceEvent(BaseModel):
    """One event of the trace."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    at_ms: float = Field(ge=0)
    type: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    deadline_ms: float | None = Field(default=None, gt=0)
    state: dict[str, Any] | None = None
    accept: list[Any] | None = None
    """Grading rules of this event (override its type's): see :mod:`._grading`."""
    grader: Grader | None = Field(default=None, exclude=True)
    """``accept`` as checked rules (set by :func:`load_scenario`)."""

    def describe(self) -> str:
        """The event as shown to a model when it is outside the declared space."""
        params = " ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.type}: {params}" if params else self.type


class Generate(BaseModel):
    """A seeded random trace appended after ``trace``.

    Arrivals are a Poisson stream (``mean_gap_ms``); with ``burst_size`` > 1 each arrival is a
    burst of that many events ``burst_gap_ms`` apart (a crowd, a sensor storm).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    count: int = Field(ge=1, le=100_000)
    mean_gap_ms: float = Field(gt=0)
    burst_size: int = Field(default=1, ge=1, le=1000)
    burst_gap_ms: float = Field(default=0.0, ge=0)


class Profile(BaseModel):
    """A simulated device's latency figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_ms: float = Field(gt=0)
    prefill_us_per_token: float = Field(ge=0)


class Scenario(BaseModel):
    """A spec and the events to replay."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    spec: AgentSpec
    trace: list[TraceEvent] = Field(default_factory=list)
    generate: Generate | None = None
    profile: Profile | str | None = None
    perception_ms: float | dict[str, float] = 0.0
    seed: int = 0
    graders: dict[str, Grader] = Field(default_factory=dict, exclude=True)
    """Accept rules per event type (from the file's ``events[].accept``)."""

    @model_validator(mode="after")
    def _has_events(self) -> Scenario:
        if not self.trace and self.generate is None:
            raise ValueError("give a trace, a generate block, or both")
        return self

    @property
    def name(self) -> str:
        """The scenario's name."""
        return self.spec.name

    def deadline_ms(self, ev: TraceEvent, default: float = 1000.0) -> float:
        """The event's deadline, from its stimulus: its own, else its type's."""
        if ev.deadline_ms is not None:
            return ev.deadline_ms
        # The declared types directly: building the event space (every key) per event is waste.
        return next((t.deadline_ms for t in self.spec.events if t.type == ev.type), default)

    def perception_s(self, ev: TraceEvent) -> float:
        """Seconds perception spends before the event reaches the agent."""
        p = self.perception_ms
        return (p.get(ev.type, 0.0) if isinstance(p, dict) else p) / 1e3

    def grade(self, ev: TraceEvent, action: dict[str, Any], state: dict[str, Any]) -> bool | None:
        """Whether ``action`` is accepted for ``ev`` in ``state`` (None: ungraded)."""
        grader = ev.grader or self.graders.get(ev.type)
        return grader.grade(action, ev.params, state) if grader else None

    def events(self) -> list[TraceEvent]:
        """The trace plus the generated events, in time order."""
        out = list(self.trace)
        if self.generate is not None:
            out += _generated(
                self.spec, self.generate, start=max((e.at_ms for e in out), default=0.0)
            )
        return sorted(out, key=lambda e: e.at_ms)


def _generated(spec: AgentSpec, gen: Generate, start: float) -> list[TraceEvent]:
    rng = random.Random(gen.seed)
    types = spec.events
    weights = [t.weight for t in types]
    t = start
    out = []
    for n in range(gen.count):
        if n % gen.burst_size == 0:
            t += rng.expovariate(1.0 / gen.mean_gap_ms)
        else:
            t += gen.burst_gap_ms
        etype = rng.choices(types, weights)[0]
        params: dict[str, Any] = {}
        for name, domain in sorted(etype.params.items()):
            if isinstance(domain, Grid):
                value = rng.choice(domain.values())
                # Real sensors do not report grid values: jitter within half a step.
                jitter = rng.uniform(-0.45, 0.45) * domain.step
                params[name] = round(min(max(value + jitter, domain.min), domain.max), 4)
            else:
                params[name] = rng.choice(domain)
        out.append(TraceEvent(at_ms=round(t, 3), type=etype.type, params=params))
    return out


def _graders(path: str | Path, data: dict[str, Any], spec: AgentSpec) -> dict[str, Grader]:
    schema = spec.action_schema()
    space = spec.event_space()
    out = {}
    for i, ev in enumerate(data.get("events") or []):
        if isinstance(ev, dict) and "accept" in ev:
            out[ev.get("type", "")] = Grader.parse(
                ev["accept"],
                where=f"{path}: events[{i}].accept",
                schema=schema,
                default=spec.default_action,
                event_type=space.types.get(ev.get("type", "")),
                state=spec.state,
            )
    return out


def _spec_of(path: str | Path, data: Any) -> AgentSpec:
    if not isinstance(data, dict):
        raise ConfigError(str(path), type(data).__name__, "a scenario must be a mapping")
    # `accept` on an event type is grading, the simulator's business: not part of the spec.
    header = dict(data)
    if isinstance(data.get("events"), list):
        header["events"] = [
            {k: v for k, v in e.items() if k != "accept"} if isinstance(e, dict) else e
            for e in data["events"]
        ]
    return AgentSpec.from_data(header, source=str(path), ignore=SCENARIO_KEYS)


def load_spec(path: str | Path) -> AgentSpec:
    """The agent spec of a spec file or of a scenario file (its trace and grading left out)."""
    return _spec_of(path, load_document(path))


def load_scenario(path: str | Path) -> Scenario:
    """Load a YAML or JSON scenario; errors name the file, the field path and the problem."""
    data = load_document(path)
    spec = _spec_of(path, data)
    graders = _graders(path, data, spec)
    rest = {k: data[k] for k in SCENARIO_KEYS if k in data}
    try:
        scenario = Scenario.model_validate({"spec": spec, **rest})
    except ValidationError as exc:
        where, value, problem = first_problem(exc)
        raise ConfigError(f"{path}: {where or 'scenario'}", value, problem) from None
    schema = spec.action_schema()
    space = spec.event_space()
    trace = [
        ev
        if ev.accept is None
        else ev.model_copy(
            update={
                "grader": Grader.parse(
                    ev.accept,
                    where=f"{path}: trace[{i}].accept",
                    schema=schema,
                    default=spec.default_action,
                    event_type=space.types.get(ev.type),
                    state=spec.state,
                )
            }
        )
        for i, ev in enumerate(scenario.trace)
    ]
    return scenario.model_copy(update={"graders": graders, "trace": trace})
