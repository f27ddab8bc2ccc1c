"""State abstraction: the part of the state a decision depends on, and states near it.

A precomputed action is keyed by a fingerprint of the state it was planned in. Hashing every
field makes each change of any field -- a battery reading moving from 0.80 to 0.79 -- a new
state with an empty subtree. The abstraction narrows what the fingerprint covers:

* **fields** -- the state fields every decision depends on (None: all);
* **per event type** -- an event type may declare its own ``state_fields`` (an obstacle's
  answer depends on the zone, not on the battery), so its branches survive changes of the
  fields it ignores;
* **grids** -- numeric state fields snap to a declared grid (``{min, max, step}``), so
  readings within half a step share a branch;
* **tolerance** -- how far (in the field's units) a branch planned for a neighbouring grid
  value may be borrowed when no exact branch exists (a *near-state* answer, flagged).

Coverage bought this way costs fidelity: the model might have answered 0.79 differently from
0.80, or an obstacle differently at low battery. The simulator reports both, side by side.
With no declarations the fingerprint is exactly the hash of the chosen fields, as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson

from ._errors import ConfigError, InvalidState
from ._events import Grid

__all__ = ["StateAbstraction"]

_EPS = 1e-9


def canonical(data: Mapping[str, Any]) -> bytes:
    """Canonical JSON (sorted keys); InvalidState when not serialisable."""
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise InvalidState("state", data, f"not JSON-serialisable: {exc}") from None


def digest(data: Mapping[str, Any]) -> str:
    """The 16-hex-digit fingerprint of a view."""
    return hashlib.sha256(canonical(data)).hexdigest()[:16]


class StateAbstraction:
    """Which state fields each decision depends on, and how numeric fields are snapped.

    Args:
        fields: the fields every fingerprint covers (None: all).
        by_type: per event type, the fields its decisions depend on (overrides ``fields``).
        grids: numeric state fields and their grids.
        tolerance: per grid field, how far a near-state answer may be borrowed from.

    """

    __slots__ = ("_by_type", "_fields", "_grids", "_tolerance")

    def __init__(
        self,
        *,
        fields: Sequence[str] | None = None,
        by_type: Mapping[str, Sequence[str] | None] | None = None,
        grids: Mapping[str, Grid] | None = None,
        tolerance: Mapping[str, float] | None = None,
    ) -> None:
        self._fields = tuple(fields) if fields is not None else None
        self._by_type = {t: tuple(f) for t, f in (by_type or {}).items() if f is not None}
        self._grids = dict(grids or {})
        self._tolerance = dict(tolerance or {})
        for name, tol in self._tolerance.items():
            if name not in self._grids:
                raise ConfigError(
                    f"state_tolerance.{name}", tol, "only a field with a state grid can have one"
                )
            if tol < 0:
                raise ConfigError(f"state_tolerance.{name}", tol, "must be >= 0")

    @property
    def trivial(self) -> bool:
        """True when every event type shares one fingerprint and nothing is snapped."""
        return not self._by_type and not self._grids

    @property
    def grids(self) -> Mapping[str, Grid]:
        """The numeric state fields' grids."""
        return self._grids

    def fields_for(self, event_type: str | None) -> tuple[str, ...] | None:
        """The fields decisions about ``event_type`` depend on (None: all)."""
        if event_type is not None:
            own = self._by_type.get(event_type)
            if own is not None:
                return own
        return self._fields

    def snap(self, field: str, value: Any) -> Any:
        """``value`` on its field's grid (unchanged when there is no grid or it lies outside)."""
        grid = self._grids.get(field)
        if grid is None or isinstance(value, bool) or not isinstance(value, int | float):
            return value
        snapped = grid.snap(float(value))
        return value if snapped is None else snapped

    def view(self, data: Mapping[str, Any], event_type: str | None = None) -> dict[str, Any]:
        """The part of ``data`` a decision about ``event_type`` depends on, snapped."""
        fields = self.fields_for(event_type)
        chosen = dict(data) if fields is None else {k: data.get(k) for k in fields}
        if self._grids:
            for name in self._grids.keys() & chosen.keys():
                chosen[name] = self.snap(name, chosen[name])
        return chosen

    def fingerprint(self, data: Mapping[str, Any], event_type: str | None = None) -> str:
        """The hash of :meth:`view` (16 hex digits)."""
        return digest(self.view(data, event_type))

    def near(
        self, data: Mapping[str, Any], event_type: str | None = None
    ) -> Iterator[tuple[str, float]]:
        """Fingerprints of views one or more grid steps away, within tolerance, nearest first.

        Yields ``(fingerprint, distance)``, distance in units of the field's tolerance.
        """
        view = self.view(data, event_type)
        found: list[tuple[float, str]] = []
        for name, tol in self._tolerance.items():
            value = view.get(name)
            if not tol or name not in view or isinstance(value, bool):
                continue
            if not isinstance(value, int | float):
                continue
            grid = self._grids[name]
            steps = int(tol / grid.step + _EPS)
            for k in range(1, steps + 1):
                for direction in (-1, 1):
                    other = grid.snap(float(value) + direction * k * grid.step)
                    if other is None or other == value:
                        continue
                    moved = dict(view)
                    moved[name] = other
                    found.append((abs(float(other) - float(value)) / tol, digest(moved)))
        found.sort(key=lambda item: item[0])
        for dist, fp in found:
            yield fp, dist
