"""A scenario's ``world`` block: declarative reactions, or a Python world by import path.

A scenario with a ``world`` block replays closed loop (:mod:`._closed_loop`). Declarative::

    world:
      episodes: 3                 # seeds seed, seed+1, ...
      episode_ms: 20000           # the episode ends here (outcome `timeout`, else neutral)
      outcomes:
        collision: {score: -10, failure: true}
        delivered: {score: 10, success: true}
      reactions:                  # tried in order; the first that matches answers
        - event: person           # after an action on an event of this type
          when: {distance_m: {max: 1.0}}   # params or state.<field>, as in `accept`
          action: [{action: stop}]         # partial actions; none: any action
          then:
            - {after_ms: 800, type: person,
               params: {side: $side, distance_m: {from: distance_m, add: 1.0, max: 3}}}
        - event: person
          when: {distance_m: {max: 1.0}}
          then: [{after_ms: 300, outcome: collision}]

The scenario's own events (``trace``, ``generate`` reseeded per episode) are the world's
spontaneous ones; reactions add what follows each action. A ``then`` parameter is a value, a
``$param`` copied from the event, or ``{from, add, mul, min, max}`` computed from one. Every
name is checked at load against the spec, and a bad one fails naming the path. Or::

    world: {python: "package.module:factory", options: {...}}

where ``factory(spec, options)`` returns a :class:`World`.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from forethought.policies import AgentSpec, ConfigError

from ._grading import Rule, _check_condition, _check_partial
from ._trace_event import TraceEvent
from ._world import Applied, Emission, Outcome, World, WorldStep

__all__ = ["Follow", "Reaction", "ReactionWorld", "WorldBlock", "make_world"]


class OutcomeSpec(BaseModel):
    """A terminal outcome's score and kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    score: float = 0.0
    success: bool = False
    failure: bool = False


class Follow(BaseModel):
    """What follows a matched action: an event (``type``), an ``outcome``, or a ``reward``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    after_ms: float = Field(default=0.0, ge=0)
    jitter_ms: float = Field(default=0.0, ge=0)
    """A seeded uniform draw in [0, jitter_ms) added to ``after_ms``."""
    type: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    state: dict[str, Any] | None = None
    outcome: str | None = None
    reward: float = 0.0

    @model_validator(mode="after")
    def _one_thing(self) -> Follow:
        if self.type is not None and self.outcome is not None:
            raise ValueError("give `type` (an event) or `outcome` (the end), not both")
        if self.type is None and self.outcome is None and not self.reward:
            raise ValueError("give `type`, `outcome` or `reward`")
        return self


class Reaction(BaseModel):
    """After an action on an event of type ``event`` (``when`` it holds), ``then`` follows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event: str = Field(min_length=1)
    """The event type (named ``event``, not ``on``: YAML 1.1 reads a bare ``on`` as true)."""
    when: dict[str, Any] = Field(default_factory=dict)
    action: list[dict[str, Any]] | None = None
    then: list[Follow] = Field(default_factory=list)
    """What follows (empty: nothing; the event is over)."""


class WorldBlock(BaseModel):
    """A scenario's ``world``: reactions (with ``episode_ms``), or ``python`` and ``options``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    python: str | None = Field(default=None, pattern=r"^[\w.]+:\w+$")
    options: dict[str, Any] = Field(default_factory=dict)
    episodes: int = Field(default=3, ge=1, le=10_000)
    max_steps: int = Field(default=10_000, ge=1)
    """World calls per episode before it counts as never ending (an error)."""
    episode_ms: float | None = Field(default=None, gt=0)
    outcomes: dict[str, OutcomeSpec] = Field(default_factory=dict)
    timeout: str | None = None
    """The outcome at ``episode_ms`` (None: a neutral ``timeout``)."""
    reactions: list[Reaction] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_kind(self) -> WorldBlock:
        if self.python is not None and (self.reactions or self.episode_ms is not None):
            raise ValueError("give `python` (a world in code) or `reactions`/`episode_ms`")
        if self.python is None and self.episode_ms is None:
            raise ValueError("a declarative world needs `episode_ms` (when an episode ends)")
        return self

    def check(self, where: str, spec: AgentSpec) -> None:
        """Check every name against ``spec``; errors name ``where`` and the path."""
        space = spec.event_space()
        schema = spec.action_schema()
        declared = sorted(space.types)
        if self.timeout is not None and self.timeout not in self.outcomes:
            raise ConfigError(
                f"{where}.timeout", self.timeout, f"not in outcomes {sorted(self.outcomes)}"
            )
        for i, r in enumerate(self.reactions):
            at = f"{where}.reactions[{i}]"
            if r.event not in space.types:
                raise ConfigError(f"{at}.event", r.event, f"not a declared event type {declared}")
            for name, want in r.when.items():
                _check_condition(f"{at}.when.{name}", name, want, space.types[r.event], spec.state)
            for j, part in enumerate(r.action or []):
                _check_partial(f"{at}.action[{j}]", part, schema, spec.default_action)
            for j, f in enumerate(r.then):
                _check_follow(f"{at}.then[{j}]", f, r.event, spec, self.outcomes)


def _check_follow(
    where: str, f: Follow, on: str, spec: AgentSpec, outcomes: Mapping[str, OutcomeSpec]
) -> None:
    types = spec.event_space().types
    if f.outcome is not None and f.outcome not in outcomes:
        raise ConfigError(f"{where}.outcome", f.outcome, f"not in outcomes {sorted(outcomes)}")
    if f.type is None:
        return
    if f.type not in types:
        raise ConfigError(f"{where}.type", f.type, f"not a declared event type {sorted(types)}")
    own = types[f.type].params
    for name, value in f.params.items():
        if name not in own:
            raise ConfigError(f"{where}.params", name, f"not a parameter of {f.type} {sorted(own)}")
        if isinstance(value, Mapping) and not isinstance(value.get("from"), str):
            raise ConfigError(
                f"{where}.params.{name}", dict(value), "a computed parameter needs `from: <param>`"
            )
        source = _source(value)
        if source is not None and source not in types[on].params:
            raise ConfigError(
                f"{where}.params.{name}", value, f"{on} has no parameter {source!r} to read"
            )
        if isinstance(value, Mapping) and not set(value) <= {"from", "add", "mul", "min", "max"}:
            raise ConfigError(
                f"{where}.params.{name}", dict(value), "computed: {from, add, mul, min, max}"
            )
    for name in f.state or {}:
        if name not in spec.state:
            raise ConfigError(f"{where}.state", name, f"the spec's state has no field {name!r}")


def _source(value: Any) -> str | None:
    """The event parameter a ``then`` parameter reads (None: a constant)."""
    if isinstance(value, str) and value.startswith("$"):
        return value[1:]
    if isinstance(value, Mapping):
        return str(value["from"])  # checked at load
    return None


def _computed(value: Any, params: Mapping[str, Any]) -> Any:
    source = _source(value)
    if source is None:
        return value
    got = params[source]
    if not isinstance(value, Mapping):
        return got
    x = float(got) * float(value.get("mul", 1.0)) + float(value.get("add", 0.0))
    if "min" in value:
        x = max(x, float(value["min"]))
    if "max" in value:
        x = min(x, float(value["max"]))
    return round(x, 6)


class ReactionWorld:
    """The world a scenario's reactions describe (implements :class:`World`).

    Args:
        name: the scenario's name.
        spec: the agent spec (the initial state that ``state.<field>`` conditions read).
        block: the checked ``world`` block.
        events: the scenario's own events for a seed (trace plus the generated ones).

    """

    tick_ms: float | None = None

    def __init__(
        self,
        name: str,
        spec: AgentSpec,
        block: WorldBlock,
        events: Callable[[int], list[TraceEvent]],
    ) -> None:
        self.name = name
        self._spec = spec
        self._block = block
        self._events = events
        self._rules = [
            (r, Rule(tuple(r.when.items()), tuple(r.action or ()))) for r in block.reactions
        ]
        self._rng = random.Random(0)
        self._state: dict[str, Any] = dict(spec.state)

    def _outcome(self, name: str) -> Outcome:
        o = self._block.outcomes[name]
        return Outcome(name, o.score, o.success, o.failure)

    def reset(self, seed: int) -> WorldStep:
        """The scenario's events for ``seed``, and the end at ``episode_ms``."""
        self._rng = random.Random(seed)
        self._state = dict(self._spec.state)
        own = [
            Emission(e.at_ms, e.type, dict(e.params), e.state, e.deadline_ms)
            for e in self._events(seed)
        ]
        assert self._block.episode_ms is not None  # checked by WorldBlock
        end = (
            self._outcome(self._block.timeout)
            if self._block.timeout is not None
            else Outcome("timeout")
        )
        return WorldStep(events=(*own, Emission(self._block.episode_ms, outcome=end)))

    def tick(self, now_ms: float) -> WorldStep:
        """Never called (no ``tick_ms``): a declarative world moves by its events."""
        return WorldStep()

    def act(self, applied: Applied) -> WorldStep:
        """The first reaction matching the event, its params and state, and the action."""
        ev = applied.event
        for reaction, rule in self._rules:
            if reaction.event != ev.type or not rule.applies(ev.params, self._state):
                continue
            if reaction.action is not None and not rule.accepts(applied.action):
                continue
            return self._follow(reaction, ev.params)
        return WorldStep()

    def _follow(self, reaction: Reaction, params: Mapping[str, Any]) -> WorldStep:
        out: list[Emission] = []
        reward = 0.0
        for f in reaction.then:
            reward += f.reward
            after = f.after_ms + (self._rng.uniform(0, f.jitter_ms) if f.jitter_ms else 0.0)
            if f.outcome is not None:
                out.append(Emission(after, outcome=self._outcome(f.outcome)))
            elif f.type is not None:
                new = {k: _computed(v, params) for k, v in f.params.items()}
                if f.state:
                    self._state.update(f.state)
                out.append(Emission(after, f.type, new, f.state))
        return WorldStep(events=tuple(out), reward=reward)


def make_world(
    name: str,
    spec: AgentSpec,
    block: WorldBlock,
    events: Callable[[int], list[TraceEvent]],
) -> World:
    """A fresh world for one strategy: the reactions, or the ``python`` factory's."""
    if block.python is None:
        return ReactionWorld(name, spec, block, events)
    module, _, attr = block.python.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("world.python", block.python, f"cannot import it: {exc}") from None
    try:
        return cast("World", factory(spec, dict(block.options)))
    except ConfigError:
        raise
    except Exception as exc:  # a user's factory: say which one failed, and how
        problem = f"making the world raised {type(exc).__name__}: {exc}"
        raise ConfigError("world.python", block.python, problem) from exc
