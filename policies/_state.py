"""World state: a JSON object the controller updates, and its fingerprint.

Precomputed actions are valid for the state they were planned in. The fingerprint -- a hash of
the canonical JSON of the fields the planner conditions on (all by default) -- names that state,
so a lookup is ``(fingerprint, key)``. Event ``effects`` give the state an event leaves behind,
which lets the planner look one event further.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ._errors import InvalidState
from ._events import EventKey, EventType

__all__ = ["WorldState"]


def _canonical(data: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise InvalidState("state", data, f"not JSON-serialisable: {exc}") from None


class WorldState:
    """An immutable JSON-object state with its fingerprint.

    Args:
        data: the state (a JSON object).
        fields: the fields the fingerprint covers (None: all).
        max_bytes: the largest canonical JSON size accepted.

    """

    __slots__ = ("_data", "_fields", "_fingerprint", "_json", "_max_bytes")

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        fields: Sequence[str] | None = None,
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
        self._fields = tuple(fields) if fields is not None else None
        self._max_bytes = max_bytes
        chosen = (
            self._data if self._fields is None else {k: self._data.get(k) for k in self._fields}
        )
        self._fingerprint = hashlib.sha256(_canonical(chosen)).hexdigest()[:16]

    @property
    def fingerprint(self) -> str:
        """The hash of the conditioned fields' canonical JSON (16 hex digits)."""
        return self._fingerprint

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
        return WorldState(merged, fields=self._fields, max_bytes=self._max_bytes)

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
