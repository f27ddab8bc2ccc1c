"""World state: a JSON object the controller updates, and its fingerprints.

Precomputed actions are valid for the state they were planned in. The fingerprint -- a hash of
the canonical JSON of the fields the planner conditions on (all by default, snapped to their
grids: :class:`StateAbstraction`) -- names that state, so a lookup is ``(fingerprint, key)``.
An event type may depend on fewer fields: :meth:`WorldState.fingerprint_for` is the fingerprint
its branches are keyed by. Event ``effects`` give the state an event leaves behind, which lets
the planner look further ahead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ._abstraction import StateAbstraction
from ._abstraction import canonical as _canonical
from ._errors import InvalidState
from ._events import EventKey, EventType

__all__ = ["WorldState"]


class WorldState:
    """An immutable JSON-object state with its fingerprint.

    Args:
        data: the state (a JSON object).
        fields: the fields the fingerprint covers (None: all); ignored with ``abstraction``.
        abstraction: fields per event type and numeric grids (default: just ``fields``).
        max_bytes: the largest canonical JSON size accepted.

    """

    __slots__ = (
        "_abstraction",
        "_by_type",
        "_data",
        "_fingerprint",
        "_json",
        "_max_bytes",
        "_near",
    )

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        fields: Sequence[str] | None = None,
        abstraction: StateAbstraction | None = None,
        max_bytes: int = 16_384,
    ) -> None:
        data = {} if data is None else data
        if not isinstance(data, Mapping):
            raise InvalidState("state", data, "must be a JSON object")
        raw = _canonical(data)
        if len(raw) > max_bytes:
            raise InvalidState("state", f"<{len(raw)} bytes>", f"larger than {max_bytes} bytes")
        self._json = raw
        self._data: dict[str, Any] = orjson.loads(raw)  # a private deep copy
        self._abstraction = abstraction or StateAbstraction(fields=fields)
        self._max_bytes = max_bytes
        self._fingerprint = self._abstraction.fingerprint(self._data)
        self._by_type: dict[str, str] = {}
        self._near: dict[str, tuple[tuple[str, float], ...]] = {}

    @property
    def fingerprint(self) -> str:
        """The hash of the conditioned fields' canonical JSON, snapped (16 hex digits)."""
        return self._fingerprint

    @property
    def abstraction(self) -> StateAbstraction:
        """What the fingerprints cover."""
        return self._abstraction

    def fingerprint_for(self, event_type: str) -> str:
        """The fingerprint branches for ``event_type`` are keyed by (computed once, cached)."""
        if self._abstraction.trivial:
            return self._fingerprint
        fp = self._by_type.get(event_type)
        if fp is None:
            fp = self._by_type[event_type] = self._abstraction.fingerprint(self._data, event_type)
        return fp

    def near(self, event_type: str) -> tuple[tuple[str, float], ...]:
        """Fingerprints of nearby states (grid neighbours within tolerance), nearest first.

        With each, its distance in units of tolerance. Computed once per type, cached.
        """
        found = self._near.get(event_type)
        if found is None:
            found = self._near[event_type] = tuple(self._abstraction.near(self._data, event_type))
        return found

    @property
    def data(self) -> dict[str, Any]:
        """A copy of the state."""
        return orjson.loads(self._json)  # type: ignore[no-any-return]

    def get(self, field: str, default: Any = None) -> Any:
        """One field's value."""
        return self._data.get(field, default)

    def to_json(self) -> str:
        """The canonical JSON text (sorted keys): what the model reads."""
        return self._json.decode()

    def patched(self, patch: Mapping[str, Any]) -> WorldState:
        """A new state with ``patch``'s fields set (a None value removes the field)."""
        if not isinstance(patch, Mapping):
            raise InvalidState("patch", patch, "must be a JSON object")
        merged = dict(self._data)
        for k, v in patch.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        return WorldState(merged, abstraction=self._abstraction, max_bytes=self._max_bytes)

    def after(self, spec: EventType, key: EventKey) -> WorldState:
        """The state after an event of ``spec`` with ``key``: its effects applied."""
        if not spec.effects:
            return self
        patch = {
            field: key.param(value[1:])
            if isinstance(value, str) and value.startswith("$")
            else value
            for field, value in spec.effects.items()
        }
        return self.patched(patch)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorldState) and self._json == other._json

    def __hash__(self) -> int:
        return hash(self._json)

    def __repr__(self) -> str:
        return f"WorldState({self.to_json()}, fingerprint={self._fingerprint})"
