"""State drift: how the state changes from outside between events, learned from the stream.

Effects say which state an event leaves behind; nothing declares how the world changes on its
own (a battery draining, a robot moving to another zone). The controller reports those changes
as state patches, and :class:`StateDrift` counts them, per field, in the units that matter:

* for a field on a state grid, the signed number of grid steps it moved (a battery that drops
  one step every ten events predicts the next lower step, including levels never seen yet);
* for any other field, the transition between its values (``zone: aisle -> dock``).

From the counts it predicts, per event, which nearby states the world is likely to be in next
(:meth:`moves`), with Dirichlet-smoothed rates: nothing is predicted before a change of that
field has been seen, and the rate of changes per event is learned within a few changes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, TypeGuard

import orjson

from forethought.policies import WorldState
from forethought.policies.internals import StateAbstraction

__all__ = ["StateDrift"]


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _token(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


class StateDrift:
    """Learns external state changes and predicts the next states they lead to.

    Args:
        abstraction: which fields are on grids (their changes are counted in steps).
        prior_events: pseudo-events with no change: the rate estimate starts low and is
            learned as changes are seen.

    """

    def __init__(self, abstraction: StateAbstraction, *, prior_events: float = 4.0) -> None:
        self._grids = abstraction.grids
        self._prior = prior_events
        self.events = 0
        self._changes: Counter[str] = Counter()
        self._steps: defaultdict[str, Counter[int]] = defaultdict(Counter)
        self._values: defaultdict[tuple[str, bytes], Counter[bytes]] = defaultdict(Counter)
        self._decoded: dict[bytes, Any] = {}

    def observe_event(self) -> None:
        """One event went by (the denominator of the change rates)."""
        self.events += 1

    def observe_change(self, old: WorldState, new: WorldState) -> None:
        """The state changed from outside (a patch, not an event's effects)."""
        before, after = old.data, new.data
        for name in before.keys() | after.keys():
            a, b = before.get(name), after.get(name)
            if a == b:
                continue
            grid = self._grids.get(name)
            sa = grid.snap(float(a)) if grid is not None and _number(a) else None
            sb = grid.snap(float(b)) if grid is not None and _number(b) else None
            if grid is not None and sa is not None and sb is not None:
                # counted between grid cells: what changes the fingerprint
                steps = round((float(sb) - float(sa)) / grid.step)
                if steps == 0:
                    continue  # moved within one grid cell: the abstraction did not change
                self._steps[name][steps] += 1
            else:
                ta, tb = _token(a), _token(b)
                self._decoded[tb] = b
                self._values[name, ta][tb] += 1
            self._changes[name] += 1

    def rate(self, name: str) -> float:
        """Estimated probability that ``name`` changes from outside before the next event."""
        return self._changes[name] / (self.events + self._prior)

    def moves(self, state: WorldState) -> list[tuple[WorldState, float]]:
        """States one external change away from ``state``, with their per-event probability."""
        out: list[tuple[WorldState, float]] = []
        data = state.data
        for name, changes in self._changes.items():
            if not changes:
                continue
            rate = self.rate(name)
            value = data.get(name)
            steps = self._steps.get(name)
            grid = self._grids.get(name)
            base = grid.snap(float(value)) if grid is not None and _number(value) else None
            if steps and grid is not None and base is not None:
                total = sum(steps.values())
                for k, count in steps.items():
                    moved = grid.snap(float(base) + k * grid.step)
                    if moved is not None and moved != base:
                        out.append((state.patched({name: moved}), rate * count / total))
                continue
            seen = self._values.get((name, _token(value)))
            if seen:
                total = sum(seen.values())
                for tb, count in seen.items():
                    # (a None target removes the field, as a patch does)
                    target = self._decoded[tb]
                    out.append((state.patched({name: target}), rate * count / total))
        return out
