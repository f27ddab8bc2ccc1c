"""The agent spec: what one agent decides about (the scenario header).

``name``, ``description`` (the task context given to the model), ``action`` (JSON Schema of one
action), ``default_action`` (the safe action, which must validate), the initial ``state`` and the
``events`` the planner anticipates. ``forethought run`` takes one; a simulator scenario is a spec
plus a trace.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ._action import ActionSchema
from ._errors import ConfigError, ForethoughtError, first_problem
from ._events import EventSpace, EventType

__all__ = ["AgentSpec", "load_document"]


class AgentSpec(BaseModel):
    """One agent: its task, action schema, safe default, state and event space."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    action: dict[str, Any]
    default_action: dict[str, Any]
    state: dict[str, Any] = Field(default_factory=dict)
    state_fields: list[str] | None = None
    """Fields the fingerprint covers (None: all)."""
    events: list[EventType] = Field(min_length=1)
    candidates: list[dict[str, Any]] | None = None
    """Actions the score tier may choose from when the action space is not enumerable."""

    @model_validator(mode="after")
    def _coherent(self) -> AgentSpec:
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
        return self

    def action_schema(self) -> ActionSchema:
        """The action schema (built from ``action``)."""
        return ActionSchema.from_json_schema(self.action, name=_model_name(self.name))

    def event_space(self) -> EventSpace:
        """The event space (built from ``events``)."""
        return EventSpace(self.events)

    @classmethod
    def from_data(
        cls, data: Any, *, source: str = "spec", ignore: Collection[str] = ()
    ) -> AgentSpec:
        """Validate plain data; errors name the source, the field path and the problem.

        ``ignore`` names top-level keys that belong to a larger document the spec is part of
        (a simulator scenario's ``trace``, say); any other unknown key is an error.
        """
        if not isinstance(data, dict):
            raise ConfigError(source, type(data).__name__, "a spec must be a mapping")
        header = {k: v for k, v in data.items() if k not in ignore}
        try:
            return cls.model_validate(header)
        except ValidationError as exc:
            raise _config_error(source, exc) from None

    @classmethod
    def from_file(cls, path: str | Path, *, ignore: Collection[str] = ()) -> AgentSpec:
        """Load from a YAML or JSON file (top-level keys in ``ignore`` are skipped)."""
        return cls.from_data(load_document(path), source=str(path), ignore=ignore)


def _model_name(name: str) -> str:
    cleaned = "".join(part.title() for part in name.replace("-", "_").split("_") if part)
    return (cleaned if cleaned.isidentifier() else "Action") + "Action"


def _config_error(source: str, exc: ValidationError) -> ConfigError:
    where, value, problem = first_problem(exc)
    return ConfigError(f"{source}: {where}" if where else source, value, problem)


def load_document(path: str | Path) -> Any:
    """Read a YAML or JSON file; a parse error is a ConfigError naming the file."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(str(p), str(p), f"cannot read: {exc.strerror}") from None
    try:
        if p.suffix == ".json":
            return orjson.loads(raw)
        return yaml.safe_load(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        kind = p.suffix.lstrip(".") or "YAML"
        raise ConfigError(str(p), p.name, f"not valid {kind}: {exc}") from None
