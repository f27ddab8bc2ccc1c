"""Scenario files: an agent spec plus the events to replay.

Everything but ``trace``/``generate`` is the agent spec ``forethought run`` takes. ``trace``
lists events at fixed times; ``generate`` appends a seeded random stream (exponential gaps,
types drawn by weight, parameters drawn from their domains, numbers jittered off the grid).
Optional: ``profile`` (the simulated device: a shipped profile's name, or figures such as
``{step_ms: 8.6, prefill_us_per_token: 50}``), ``perception_ms`` (time perception spends
between the stimulus and the event reaching the agent: one figure, or one per event type; the
deadline still counts from the stimulus), ``seed`` (the charged model time's draws),
``mcap`` (a robot's recording as the trace, :mod:`._mcap`) and ``accept`` on event types and
trace events (grading rules, :mod:`._grading`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from forethought.policies import AgentSpec, ConfigError, EventKey
from forethought.policies.internals import (
    EVENT_EXTRA_KEYS,
    EventType,
    Grid,
    first_problem,
    load_document,
)
from forethought.runtime import is_ros2_map, load_ros2_map

from ._grading import Grader
from ._mcap import McapTrace, load_mapping, trace_from_mcap
from ._reactions import WorldBlock
from ._ros2_recording import trace_from_ros2
from ._trace_event import TraceEvent

__all__ = [
    "SCENARIO_KEYS",
    "Drift",
    "Generate",
    "Scenario",
    "load_scenario",
    "load_spec",
]

SCENARIO_KEYS = frozenset(
    {"trace", "generate", "profile", "perception_ms", "seed", "mcap", "world"}
)
"""Top-level keys of a scenario file that are not part of the agent spec."""


class Drift(BaseModel):
    """A state field the world changes on its own, every ``every`` events (a state patch).

    Numeric: ``by`` is added each time; past ``min`` the value restarts at ``max`` (a battery
    swapped), past ``max`` at ``min``. Categorical: the value moves to the next of ``values``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    field: str = Field(min_length=1)
    every: int = Field(ge=1)
    by: float | None = None
    min: float | None = None
    max: float | None = None
    values: list[Any] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Drift:
        if (self.by is None) == (self.values is None):
            raise ValueError("give `by` (a numeric field) or `values` (a categorical one)")
        if self.values is not None and not self.values:
            raise ValueError("values must not be empty")
        return self

    def advance(self, value: Any) -> Any:
        """The field's next value."""
        if self.values is not None:
            i = self.values.index(value) if value in self.values else -1
            return self.values[(i + 1) % len(self.values)]
        assert self.by is not None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(  # noqa: TRY004 - reported as a ConfigError by the caller
                f"drift of {self.field!r}: {value!r} is not a number"
            )
        nxt = round(float(value) + self.by, 6)
        if self.min is not None and nxt < self.min and self.max is not None:
            return self.max
        if self.max is not None and nxt > self.max and self.min is not None:
            return self.min
        return nxt


class Generate(BaseModel):
    """A seeded random trace appended after ``trace``.

    Arrivals are a Poisson stream (``mean_gap_ms``); with ``burst_size`` > 1 each arrival is a
    burst of that many events ``burst_gap_ms`` apart (a crowd, a sensor storm). The stream's
    own mix can differ from the spec's declared weights (``weights``, per type) and have
    structure the weights cannot express (``follow``: after an event of type A the next is of
    type B with the given probability); ``drift`` changes state fields every so many events.
    A planner that only trusts the declared weights is wrong on such a stream until it learns.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed: int = 0
    count: int = Field(ge=1, le=100_000)
    mean_gap_ms: float = Field(gt=0)
    burst_size: int = Field(default=1, ge=1, le=1000)
    burst_gap_ms: float = Field(default=0.0, ge=0)
    weights: dict[str, float] | None = None
    follow: dict[str, dict[str, float]] = Field(default_factory=dict)
    drift: list[Drift] = Field(default_factory=list)

    @model_validator(mode="after")
    def _probabilities(self) -> Generate:
        for first, nexts in self.follow.items():
            total = sum(nexts.values())
            if any(p < 0 for p in nexts.values()) or total > 1 + 1e-9:
                raise ValueError(f"follow.{first}: probabilities must be >= 0 and sum to <= 1")
        if self.weights is not None and any(w < 0 for w in self.weights.values()):
            raise ValueError("weights must be >= 0")
        return self


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
    world: WorldBlock | None = None
    """A world that answers the agent's actions: the replay is closed loop (:mod:`._reactions`)."""
    graders: dict[str, Grader] = Field(default_factory=dict, exclude=True)
    """Accept rules per event type (from the file's ``events[].accept``)."""

    @model_validator(mode="after")
    def _has_events(self) -> Scenario:
        if not self.trace and self.generate is None and self.world is None:
            raise ValueError("give a trace, a generate block (or both), or a world")
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

    def key_stream(self) -> list[tuple[EventKey | None, str]]:
        """Each event's key and the state fingerprint it arrives in: a forecaster's test.

        Patches and effects are applied in order, as an agent would.
        """
        space = self.spec.event_space()
        state = self.spec.initial_state()
        out: list[tuple[EventKey | None, str]] = []
        for ev in self.events():
            if ev.state:
                state = state.patched(ev.state)
            key = space.key(ev.type, ev.params)
            out.append((key, state.fingerprint))
            if key is not None:
                state = state.after(space.types[key.type], key)
        return out

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
    by_name = {t.type: t for t in types}
    for name in [*(gen.weights or {}), *gen.follow, *(b for f in gen.follow.values() for b in f)]:
        if name not in by_name:
            raise ConfigError("generate", name, f"names no declared event type ({sorted(by_name)})")
    own = gen.weights or {}
    weights = [own.get(t.type, 0.0) if gen.weights is not None else t.weight for t in types]
    current = {d.field: spec.state.get(d.field) for d in gen.drift}
    t = start
    out = []
    previous: str | None = None
    for n in range(gen.count):
        if n % gen.burst_size == 0:
            t += rng.expovariate(1.0 / gen.mean_gap_ms)
        else:
            t += gen.burst_gap_ms
        etype = _next_type(rng, types, weights, gen.follow.get(previous or ""), by_name)
        previous = etype.type
        patch: dict[str, Any] = {}
        for d in gen.drift:
            if n > 0 and n % d.every == 0:
                try:
                    current[d.field] = patch[d.field] = d.advance(current[d.field])
                except ValueError as exc:
                    raise ConfigError("generate.drift", d.field, str(exc)) from None
        params: dict[str, Any] = {}
        for name, domain in sorted(etype.params.items()):
            if isinstance(domain, Grid):
                value = rng.choice(domain.values())
                # Real sensors do not report grid values: jitter within half a step.
                jitter = rng.uniform(-0.45, 0.45) * domain.step
                params[name] = round(min(max(value + jitter, domain.min), domain.max), 4)
            else:
                params[name] = rng.choice(domain)
        out.append(
            TraceEvent(at_ms=round(t, 3), type=etype.type, params=params, state=patch or None)
        )
    return out


def _next_type(
    rng: random.Random,
    types: list[EventType],
    weights: list[float],
    follow: dict[str, float] | None,
    by_name: dict[str, EventType],
) -> EventType:
    if follow:
        u = rng.random()
        for name, p in follow.items():
            if u < p:
                return by_name[name]
            u -= p
    return rng.choices(types, weights)[0]


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
            {k: v for k, v in e.items() if k not in EVENT_EXTRA_KEYS} if isinstance(e, dict) else e
            for e in data["events"]
        ]
    return AgentSpec.from_data(header, source=str(path), ignore=SCENARIO_KEYS)


def load_spec(path: str | Path) -> AgentSpec:
    """The agent spec of a spec file or of a scenario file (its trace and grading left out)."""
    return _spec_of(path, load_document(path))


def load_scenario(path: str | Path, *, recording: tuple[Path, Path] | None = None) -> Scenario:
    """Load a YAML or JSON scenario; errors name the file, the field path and the problem.

    ``recording`` (an MCAP file and its mapping) replaces the file's trace and generated
    events: a spec file with grading rules and a robot's recording make a scenario.
    """
    data = load_document(path)
    spec = _spec_of(path, data)
    graders = _graders(path, data, spec)
    rest = {k: data[k] for k in SCENARIO_KEYS if k in data and k != "mcap"}
    recorded = _recorded(path, data.get("mcap"), recording)
    if recorded is not None:
        rest = {k: v for k, v in rest.items() if k not in ("trace", "generate")} | {
            "trace": [*(rest.get("trace") or []), *recorded] if recording is None else recorded
        }
    try:
        scenario = Scenario.model_validate({"spec": spec, **rest})
    except ValidationError as exc:
        where, value, problem = first_problem(exc)
        raise ConfigError(f"{path}: {where or 'scenario'}", value, problem) from None
    if scenario.world is not None:
        scenario.world.check(f"{path}: world", spec)
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


def _recorded(
    path: str | Path, block: Any, recording: tuple[Path, Path] | None
) -> list[dict[str, Any]] | None:
    """The trace events of the scenario's ``mcap`` block, or of ``recording``."""
    if recording is not None:
        mcap_path, map_path = recording
    elif block is None:
        return None
    else:
        try:
            ref = McapTrace.model_validate(block)
        except ValidationError as exc:
            where, value, problem = first_problem(exc, "mcap")
            raise ConfigError(f"{path}: {where}", value, problem) from None
        base = Path(path).parent
        mcap_path, map_path = base / ref.path, base / ref.map
    for p in (mcap_path, map_path):
        if not p.exists():
            raise ConfigError(f"{path}: mcap", str(p), "no such file")
    map_data = load_document(map_path)
    if is_ros2_map(map_data):  # a rosbag2 recording (a bag folder or its .mcap), CDR
        events = trace_from_ros2(mcap_path, load_ros2_map(map_path, map_data))
    else:
        events = trace_from_mcap(mcap_path, load_mapping(map_path))
    return [e.model_dump(exclude={"grader"}, exclude_none=True) for e in events]
