"""The event space: declared event types, their parameter domains, and canonical keys.

An incoming event maps to an :class:`EventKey`: its type plus each parameter snapped to the
nearest value of its domain (a list of values, or a numeric grid ``{min, max, step}``). A value
outside its domain, an unknown parameter or an undeclared type makes the event *out of space*:
it still gets decided, by the fallback tiers, but never from the tree. Mapping is a few dict
lookups and one rounding per parameter: microseconds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._errors import ConfigError, first_problem

__all__ = ["EventKey", "EventSpace", "EventType", "Grid", "GridSnap"]

Scalar = str | int | float | bool
_EPS = 1e-9


class Grid(BaseModel):
    """A numeric grid ``min, min + step, ..., max``; ``step`` must divide the range."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min: float
    max: float
    step: float = Field(gt=0)

    @model_validator(mode="after")
    def _divides(self) -> Grid:
        if self.max < self.min:
            raise ValueError(f"max {self.max} is below min {self.min}")
        n = (self.max - self.min) / self.step
        if abs(n - round(n)) > 1e-6:
            raise ValueError(f"step {self.step} does not divide the range {self.min}..{self.max}")
        return self

    @property
    def decimals(self) -> int:
        """Decimal places that represent every grid value exactly enough."""
        text = f"{self.step:.10f}".rstrip("0")
        return max(len(text.partition(".")[2]), 0)

    def values(self) -> list[float | int]:
        """Every grid value, ints where the grid is integral."""
        snapper = self.snapper()
        n = round((self.max - self.min) / self.step)
        return [snapper.clean(self.min + i * self.step) for i in range(n + 1)]

    def snapper(self) -> GridSnap:
        """The grid's rounding worked out once, for a caller that snaps many values."""
        integral = float(self.step).is_integer() and float(self.min).is_integer()
        return GridSnap(self.min, self.max, self.step, self.decimals, integral)

    def snap(self, x: float) -> float | int | None:
        """The nearest grid value, or None when ``x`` lies outside ``[min, max]``."""
        return self.snapper().snap(x)


@dataclass(frozen=True, slots=True)
class GridSnap:
    """A :class:`Grid`'s snapping with its rounding worked out.

    What an event's key reads on every decision (the grid itself works it out at each call).
    """

    min: float
    max: float
    step: float
    decimals: int
    integral: bool

    def clean(self, x: float) -> float | int:
        """``x`` rounded to the grid's decimals, an int where the grid is integral."""
        x = round(x, self.decimals)
        return int(x) if self.integral else x

    def snap(self, x: float) -> float | int | None:
        """The nearest grid value, or None when ``x`` lies outside ``[min, max]``."""
        if not math.isfinite(x) or x < self.min - _EPS or x > self.max + _EPS:
            return None
        return self.clean(self.min + round((x - self.min) / self.step) * self.step)


class EventType(BaseModel):
    """One declared event type (the scenario format's ``events`` entries)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str = Field(min_length=1)
    params: dict[str, list[Scalar] | Grid] = Field(default_factory=dict)
    deadline_ms: float = Field(gt=0)
    weight: float = Field(default=1.0, gt=0)
    effects: dict[str, Any] = Field(default_factory=dict)
    description: str | None = None
    tolerance: dict[str, float] = Field(default_factory=dict)
    """Per numeric parameter: how far (in its units) a tree answer may be borrowed from."""
    state_fields: list[str] | None = None
    """The state fields this type's decisions depend on (None: the spec's ``state_fields``)."""
    default_action: dict[str, Any] | None = None
    """This type's safe action, where the spec's ``default_action`` cannot serve it (a guard
    it would break for this type); it must validate and keep every guard."""
    latest_only: bool = False
    """Only the newest event of this type matters (a pose, a distance reading): of several
    waiting (a backlog after an outage), the newest is decided and the older are refused as
    superseded."""

    @field_validator("params", mode="before")
    @classmethod
    def _grids_first(cls, params: Any) -> Any:
        # Validate grid domains up front so an error names the grid's problem rather than
        # "not a list" from the first member of the union.
        if not isinstance(params, dict):
            return params
        out = {}
        for name, domain in params.items():
            if isinstance(domain, dict):
                try:
                    out[name] = Grid.model_validate(domain)
                except ValidationError as exc:
                    where, _, msg = first_problem(exc)
                    detail = f"{where}: {msg}" if where else msg
                    raise ValueError(f"parameter {name!r}: {detail}") from None
                continue
            out[name] = domain
        return out

    @field_validator("params")
    @classmethod
    def _non_empty(cls, params: dict[str, list[Scalar] | Grid]) -> dict[str, list[Scalar] | Grid]:
        for name, domain in params.items():
            if isinstance(domain, list) and not domain:
                raise ValueError(f"parameter {name!r} has an empty domain")
            if isinstance(domain, list) and len(set(map(repr, domain))) != len(domain):
                raise ValueError(f"parameter {name!r} lists a value twice")
        return params

    @model_validator(mode="after")
    def _refs_exist(self) -> EventType:
        for field, value in self.effects.items():
            if isinstance(value, str) and value.startswith("$") and value[1:] not in self.params:
                raise ValueError(
                    f"effects.{field}: {value!r} names no parameter of {self.type!r} "
                    f"(has {sorted(self.params)})"
                )
        for name in self.tolerance:
            if not isinstance(self.params.get(name), Grid):
                raise ValueError(  # noqa: TRY004 - pydantic reports ValueErrors with the path
                    f"tolerance.{name}: only grid parameters can have a tolerance"
                )
        return self


@dataclass(frozen=True, slots=True)
class EventKey:
    """A canonical event: its type and snapped parameters (sorted by name). Hashable."""

    type: str
    params: tuple[tuple[str, Scalar], ...] = ()

    def param(self, name: str) -> Scalar:
        """The snapped value of one parameter."""
        for k, v in self.params:
            if k == name:
                return v
        raise KeyError(name)

    def describe(self) -> str:
        """The event as the model reads it: ``obstacle: distance_m=0.5 side=left``."""
        if not self.params:
            return self.type
        return f"{self.type}: " + " ".join(f"{k}={v}" for k, v in self.params)

    def as_json(self) -> dict[str, Any]:
        """``{"type": ..., "params": {...}}``."""
        return {"type": self.type, "params": dict(self.params)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EventKey:
        """Inverse of :meth:`as_json`."""
        return cls(str(data["type"]), tuple(sorted(dict(data.get("params", {})).items())))


class EventSpace:
    """The declared event types; maps raw events to keys and enumerates the space."""

    __slots__ = ("_domains", "_keys", "_prior", "_types")

    def __init__(self, types: Sequence[EventType]) -> None:
        seen: set[str] = set()
        for i, t in enumerate(types):
            if t.type in seen:
                raise ConfigError(f"events[{i}].type", t.type, "declared twice")
            seen.add(t.type)
        self._types: dict[str, EventType] = {t.type: t for t in types}
        # Per type, its parameters in key order with their domains ready to match: a grid's
        # rounding worked out, a list's text values by value (what most events carry).
        self._domains: dict[str, dict[str, _Domain]] = {
            t.type: {n: _Domain.of(t.params[n]) for n in sorted(t.params)} for t in types
        }
        self._keys: list[EventKey] = []
        self._prior: dict[EventKey, float] = {}
        total = sum(t.weight for t in types)
        for t in types:
            names = sorted(t.params)
            domains = [self._domain_values(t.params[n]) for n in names]
            combos = list(itertools.product(*domains)) or [()]
            for combo in combos:
                key = EventKey(t.type, tuple(zip(names, combo, strict=True)))
                self._keys.append(key)
                self._prior[key] = t.weight / total / len(combos)

    @staticmethod
    def _domain_values(domain: list[Scalar] | Grid) -> list[Any]:
        return domain.values() if isinstance(domain, Grid) else list(domain)

    @classmethod
    def from_specs(cls, specs: Any) -> EventSpace:
        """Build from plain data (the scenario's ``events``); errors name the field path."""
        if not isinstance(specs, list | tuple) or not specs:
            raise ConfigError("events", specs, "a non-empty list of event types is required")
        types = []
        for i, spec in enumerate(specs):
            try:
                types.append(EventType.model_validate(spec))
            except ValidationError as exc:
                raise ConfigError(*first_problem(exc, f"events[{i}]")) from None
        return cls(types)

    @property
    def types(self) -> Mapping[str, EventType]:
        """Declared types by name."""
        return self._types

    def keys(self) -> list[EventKey]:
        """Every canonical key of the space, in declaration order."""
        return list(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[EventKey]:
        return iter(self._keys)

    def prior(self, key: EventKey) -> float:
        """The prior probability of ``key``: its type's weight share, uniform over its params."""
        return self._prior.get(key, 0.0)

    def key(self, event_type: str, params: Mapping[str, Any] | None = None) -> EventKey | None:
        """The canonical key of an event, or None when it is out of space."""
        domains = self._domains.get(event_type)
        if domains is None:
            return None
        params = params or {}
        if len(params) != len(domains):
            return None
        snapped: list[tuple[str, Scalar]] = []
        for name, domain in domains.items():
            if name not in params:
                return None
            match = domain.match(params[name])
            if match is None:
                return None
            snapped.append((name, match))
        return EventKey(event_type, tuple(snapped))

    def deadline_ms(self, key: EventKey) -> float:
        """The declared deadline of a key's type."""
        return self._types[key.type].deadline_ms

    def neighbours(self, key: EventKey) -> Iterator[tuple[EventKey, float]]:
        """Keys one grid step away in one parameter within its tolerance, nearest first.

        Yields ``(key, distance)`` where distance is in units of the parameter's tolerance.
        """
        spec = self._types.get(key.type)
        if spec is None:
            return
        domains = self._domains[key.type]
        found: list[tuple[float, EventKey]] = []
        for i, (name, value) in enumerate(key.params):
            grid = domains[name].grid
            tol = spec.tolerance.get(name)
            if grid is None or not tol or isinstance(value, str | bool):
                continue
            for direction in (-1, 1):
                other = grid.snap(float(value) + direction * grid.step)
                if other is None or other == value:
                    continue
                dist = abs(float(other) - float(value))
                if dist <= tol + _EPS:
                    params = list(key.params)
                    params[i] = (name, other)
                    found.append((dist / tol, EventKey(key.type, tuple(params))))
        for dist, k in sorted(found, key=lambda item: item[0]):
            yield k, dist


@dataclass(frozen=True, slots=True)
class _Domain:
    """One parameter's domain, ready to match a raw value against (:meth:`EventSpace.key`)."""

    grid: GridSnap | None
    values: list[Scalar]
    texts: dict[str, str]

    @classmethod
    def of(cls, domain: list[Scalar] | Grid) -> _Domain:
        if isinstance(domain, Grid):
            return cls(domain.snapper(), [], {})
        texts: dict[str, str] = {}
        for v in domain:
            if isinstance(v, str):
                texts.setdefault(v, v)
        return cls(None, list(domain), texts)

    def match(self, value: object) -> Scalar | None:
        """The domain's value for ``value`` (a grid's nearest), or None when it has none."""
        if self.grid is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            return self.grid.snap(float(value))
        if type(value) is str:
            # Only a text equals a text: the same answer as the scan, in one lookup.
            return self.texts.get(value)
        return _find(self.values, value)


def _find(domain: list[Scalar], value: object) -> Scalar | None:
    """The domain value equal to ``value`` (numbers compare by value, bools only as bools)."""
    for option in domain:
        if type(option) is bool or type(value) is bool:
            if option is value:
                return option
        elif isinstance(option, int | float) and isinstance(value, int | float):
            if abs(float(option) - float(value)) <= _EPS:
                return option
        elif option == value:
            return option
    return None
