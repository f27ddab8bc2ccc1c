"""Scenario files: an agent spec plus the events to replay.

Everything but ``trace``/``generate`` is the agent spec ``forethought run`` takes. ``trace``
lists events at fixed times; ``generate`` appends a seeded random stream (exponential gaps,
types drawn by weight, parameters drawn from their domains, numbers jittered off the grid).
Optional: ``profile`` (the simulated device, e.g. ``{step_ms: 8.6, prefill_us_per_token:
50}``), ``live_form`` (``compact`` or ``verbose``: how the live strategy writes actions) and
``perception_ms`` (time already spent before an event reaches us, noted in reports).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from forethought.policies import (
    SCENARIO_KEYS,
    AgentSpec,
    ConfigError,
    Grid,
    first_problem,
    load_document,
)

__all__ = ["Generate", "Scenario", "TraceEvent", "load_scenario"]


class TraceEvent(BaseModel):
    """One event of the trace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at_ms: float = Field(ge=0)
    type: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    deadline_ms: float | None = Field(default=None, gt=0)
    state: dict[str, Any] | None = None
    accept: list[dict[str, Any]] | None = None
    """The action is right if it contains every field/value of one entry."""


class Generate(BaseModel):
    """A seeded random trace appended after ``trace``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    count: int = Field(ge=1, le=100_000)
    mean_gap_ms: float = Field(gt=0)


class Profile(BaseModel):
    """A simulated device's latency figures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_ms: float = Field(gt=0)
    prefill_us_per_token: float = Field(ge=0)


class Scenario(BaseModel):
    """A spec and the events to replay."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: AgentSpec
    trace: list[TraceEvent] = Field(default_factory=list)
    generate: Generate | None = None
    profile: Profile | None = None
    live_form: Literal["compact", "verbose"] = "compact"
    perception_ms: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _has_events(self) -> Scenario:
        if not self.trace and self.generate is None:
            raise ValueError("give a trace, a generate block, or both")
        return self

    @property
    def name(self) -> str:
        """The scenario's name."""
        return self.spec.name

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
    for _ in range(gen.count):
        t += rng.expovariate(1.0 / gen.mean_gap_ms)
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


def load_scenario(path: str | Path) -> Scenario:
    """Load a YAML or JSON scenario; errors name the file, the field path and the problem."""
    data = load_document(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), type(data).__name__, "a scenario must be a mapping")
    spec = AgentSpec.from_data(data, source=str(path))
    rest = {k: data[k] for k in SCENARIO_KEYS if k in data}
    try:
        scenario = Scenario.model_validate({"spec": spec, **rest})
    except ValidationError as exc:
        where, value, problem = first_problem(exc)
        raise ConfigError(f"{path}: {where or 'scenario'}", value, problem) from None
    schema = spec.action_schema()
    for i, ev in enumerate(scenario.trace):
        for j, accept in enumerate(ev.accept or []):
            try:
                schema.validate(
                    accept | {k: v for k, v in spec.default_action.items() if k not in accept}
                )
            except Exception as exc:
                raise ConfigError(
                    f"{path}: trace[{i}].accept[{j}]",
                    accept,
                    f"cannot match any valid action: {exc}",
                ) from None
    return scenario
