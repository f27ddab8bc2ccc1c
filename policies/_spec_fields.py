"""The agent spec's fields and the rules between them, apart from loading a spec.

Its own module because two others need it: :class:`AgentSpec` (in :mod:`._spec`) adds loading
to it and lists every problem :func:`check_spec` finds when a spec does not load, and the
checker validates a document's plain fields through this model of record. Neither imports the
other for it.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ._abstraction import StateAbstraction
from ._action import ActionSchema
from ._errors import ForethoughtError
from ._events import EventSpace, EventType, Grid
from ._guards import GuardRule, GuardSet
from ._state import WorldState

__all__ = ["EVENT_EXTRA_KEYS", "SpecFields", "event_keys", "required_spec_keys", "spec_keys"]

EVENT_EXTRA_KEYS: tuple[str, ...] = ("accept",)
"""Keys an event type may carry that are not the agent's (grading, the simulator's business).

The loader sets them aside; ``check`` knows them; the JSON Schema and docs/spec.md list them.
"""


class SpecFields(BaseModel):
    """An agent spec's fields and the rules between them; :class:`AgentSpec` adds loading."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    action: dict[str, Any]
    default_action: dict[str, Any]
    state: dict[str, Any] = Field(default_factory=dict)
    state_fields: list[str] | None = None
    """Fields the fingerprint covers (None: all); an event type may name its own."""
    state_grids: dict[str, Grid] = Field(default_factory=dict)
    """Numeric state fields snapped to a grid in the fingerprint (readings within half a step
    share precomputed answers)."""
    state_tolerance: dict[str, float] = Field(default_factory=dict)
    """Per grid field: how far a precomputed answer may be borrowed from a neighbouring state
    when no exact one exists (flagged as a near-state answer)."""
    events: list[EventType] = Field(min_length=1)
    candidates: list[dict[str, Any]] | None = None
    """Actions the score tier may choose from when the action space is not enumerable."""
    guards: list[GuardRule] = Field(default_factory=list)
    """Rules no action may break, on every tier (:mod:`._guards`); the defaults must keep
    them in every declared state and event."""

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        schema = self.action_schema()
        try:
            schema.validate(self.default_action)
        except ForethoughtError as exc:
            raise ValueError(f"default_action does not validate against action: {exc}") from None
        for i, cand in enumerate(self.candidates or []):
            try:
                schema.validate(cand)
            except ForethoughtError as exc:
                raise ValueError(f"candidates[{i}] does not validate: {exc}") from None
        EventSpace(self.events)  # duplicate types
        from ._guard_proof import guard_errors  # noqa: PLC0415 - it reads this model

        for problem in guard_errors(self):
            raise ValueError(problem)
        for name, tol in self.state_tolerance.items():
            if name not in self.state_grids:
                raise ValueError(
                    f"state_tolerance.{name}: only a field in state_grids can have one"
                )
            if tol < 0:
                raise ValueError(f"state_tolerance.{name}: must be >= 0, not {tol}")
        return self

    def state_abstraction(self) -> StateAbstraction:
        """What a decision depends on: fields (per event type) and grids."""
        return StateAbstraction(
            fields=self.state_fields,
            by_type={t.type: t.state_fields for t in self.events},
            grids=self.state_grids,
            tolerance=self.state_tolerance,
        )

    def initial_state(self, *, max_bytes: int = 16_384) -> WorldState:
        """The declared initial state, fingerprinted by :meth:`state_abstraction`."""
        return WorldState(self.state, abstraction=self.state_abstraction(), max_bytes=max_bytes)

    def action_schema(self) -> ActionSchema:
        """The action schema (built from ``action``)."""
        return ActionSchema.from_json_schema(self.action, name=_model_name(self.name))

    def guard_set(self) -> GuardSet:
        """The guards, compiled (built from ``guards``)."""
        return GuardSet(self.guards)

    def type_defaults(self) -> dict[str, dict[str, Any]]:
        """Each event type's own ``default_action``, where it has one."""
        return {t.type: t.default_action for t in self.events if t.default_action is not None}

    def event_space(self) -> EventSpace:
        """The event space (built from ``events``)."""
        return EventSpace(self.events)


def spec_keys() -> tuple[str, ...]:
    """Every top-level key of an agent spec, in declaration order: the one list of record.

    ``check``, the loader (through :class:`SpecFields`), the JSON Schema and the reference
    page all derive from the model's fields, so a field added there is known to each.
    """
    return tuple(SpecFields.model_fields)


def required_spec_keys() -> tuple[str, ...]:
    """The top-level keys a spec must have."""
    return tuple(k for k, f in SpecFields.model_fields.items() if f.is_required())


def event_keys() -> tuple[str, ...]:
    """Every key of an event type: :class:`EventType`'s fields, then :data:`EVENT_EXTRA_KEYS`."""
    return (*EventType.model_fields, *EVENT_EXTRA_KEYS)


def _model_name(name: str) -> str:
    cleaned = "".join(part.title() for part in name.replace("-", "_").split("_") if part)
    return (cleaned if cleaned.isidentifier() else "Action") + "Action"
