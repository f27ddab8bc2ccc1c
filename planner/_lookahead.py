"""Look-ahead: how often each branch is expected to be needed within the next few events.

The planner's question is not "what comes next in this state" but "which (state, event)
answers will be asked for before the planner could write them in time". In the current state
that is every event within the horizon. In a state it has not reached yet, only the events
that arrive there before the planner, once there, has written their branch (:class:`Pace`):
with events seconds apart and a batch written in one, the first event after a state change
finds most of its likely keys written anyway, and only the chance it beats the batch that
writes its key is worth planning ahead.
Starting from the current state, a distribution over states is pushed forward one event at a
time:

* the next event comes from the forecaster (the previous key counts for the first step only);
* an event whose type has ``effects`` moves the mass to the state it leaves behind;
* between events the world may change on its own, as :class:`StateDrift` has learned.

Summed over the horizon, ``uses[(fingerprint, key)]`` is the expected number of times the
branch answers an event; ``1 - exp(-uses)`` is the chance it answers at least one (Poisson).
Keys whose types depend on fewer state fields share a fingerprint across states, so their
expected uses add up. States whose mass falls below ``min_mass`` are dropped: the work stays
proportional to the states that matter, a few milliseconds on the event loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from forethought.policies import EventKey, EventSpace, WorldState

from ._drift import StateDrift
from ._forecaster import Forecaster

__all__ = ["Expected", "Pace", "look_ahead"]


@dataclass(frozen=True, slots=True)
class Expected:
    """A branch and how much it is expected to be needed within the horizon."""

    state: WorldState
    """The most likely concrete state to plan it in."""
    fingerprint: str
    key: EventKey
    uses: float
    """Expected number of events it answers within the horizon."""
    next_fingerprint: str | None

    @property
    def p_used(self) -> float:
        """Probability it answers at least one event within the horizon."""
        return 1.0 - math.exp(-self.uses)


@dataclass(frozen=True, slots=True)
class Pace:
    """How fast the planner writes next to how fast events come."""

    gap_s: float
    """The mean time between events."""
    batch: int
    """Branches written per batch."""
    batch_s: float
    """Seconds per batch."""
    gaps: tuple[float, ...] = ()
    """Recently observed gaps between events, seconds. With :data:`MIN_GAPS` or more, arrivals
    are taken as a renewal stream with these gaps (bursts included); with fewer, as a Poisson
    stream at ``gap_s``."""

    def late(self, p: np.ndarray, horizon: int) -> np.ndarray:
        """Per age and key: the chance the event arrives before its branch is written.

        ``[age, key]``: the chance the ``age + 1``-th event after entering a state arrives
        before the planner there has written ``key``'s branch.

        Keys are taken as written most likely first, a batch at a time, each batch's answers
        landing when it ends. Rows stop where no key is late with chance 1e-3 or more.
        """
        return by_rank(p, self.arrivals(len(p), horizon))

    def arrivals(self, keys: int, horizon: int) -> np.ndarray:
        """Per age and rank: the chance the event arrives before the rank's batch is written.

        ``[age, rank]``: the chance the ``age + 1``-th event after entering a state arrives
        before the batch holding the ``rank``-th most likely key is written.
        """
        written_at = (np.arange(keys) // self.batch + 1) * self.batch_s
        if len(self.gaps) >= MIN_GAPS:
            return _rows(_renewal(np.asarray(self.gaps), written_at, horizon), keys)
        return _rows(_poisson(written_at / self.gap_s, horizon), keys)


def by_rank(p: np.ndarray, arrivals: np.ndarray) -> np.ndarray:
    """:meth:`Pace.arrivals`' columns put in key order: the likeliest key written first."""
    rank = np.empty(len(p), dtype=np.intp)
    rank[np.argsort(-p, kind="stable")] = np.arange(len(p))
    return arrivals[:, rank]


MIN_GAPS = 8
"""Observed gaps needed before their spread, not only their mean, shapes the pace."""

_BINS = 256
"""Time steps the renewal sums are computed on, up to the last batch's end."""


def _rows(late_by_age: Iterator[np.ndarray], keys: int) -> np.ndarray:
    """Stack the per-age rows until one has no key late with chance 1e-3 or more."""
    rows: list[np.ndarray] = []
    for late in late_by_age:
        if float(late.max()) < 1e-3:
            break
        rows.append(np.clip(late, 0.0, 1.0))
    return np.asarray(rows).reshape(len(rows), keys)


def _poisson(lam: np.ndarray, horizon: int) -> Iterator[np.ndarray]:
    """Per age: P(at least age + 1 Poisson arrivals with mean ``lam``)."""
    pmf = np.exp(-lam)  # P(exactly i events by then), i = 0
    below = pmf.copy()  # P(at most i events by then)
    for age in range(horizon):
        yield 1.0 - below  # P(at least age + 1 events by then)
        pmf = pmf * lam / (age + 1)
        below = below + pmf


def _renewal(gaps: np.ndarray, written_at: np.ndarray, horizon: int) -> Iterator[np.ndarray]:
    """Per age: P(the age + 1 gaps drawn from ``gaps`` sum to no more than ``written_at``).

    The gaps' distribution on a grid of :data:`_BINS` steps up to the latest time asked about
    (a gap past it can never count), convolved with itself once per age: bursts -- a second
    event 150 ms after the first, though events are 1.4 s apart on average -- make an early
    arrival several times likelier than a Poisson stream of the same mean would.
    """
    end = float(written_at.max())
    if end <= 0.0:
        return
    step = end / _BINS
    pmf = np.bincount(np.minimum(gaps // step, _BINS + 1).astype(np.intp), minlength=_BINS + 2)[
        : _BINS + 1
    ] / len(gaps)
    upto = np.minimum(written_at // step, _BINS).astype(np.intp)
    total = pmf
    for _ in range(horizon):
        yield np.cumsum(total)[upto]
        total = np.convolve(total, pmf)[: _BINS + 1]


class _Moves:
    """Per state: where each effect-carrying key leads (grouped by target state)."""

    def __init__(self, space: EventSpace, keys: list[EventKey]) -> None:
        self._space = space
        self._effect_idx = [i for i, k in enumerate(keys) if space.types[k.type].effects]
        self._keys = keys
        self._cache: dict[str, list[tuple[WorldState, np.ndarray]]] = {}
        self._next: dict[tuple[str, int], str | None] = {}

    def groups(self, state: WorldState) -> list[tuple[WorldState, np.ndarray]]:
        ident = state.to_json()
        hit = self._cache.get(ident)
        if hit is not None:
            return hit
        by_target: dict[str, tuple[WorldState, list[int]]] = {}
        for i in self._effect_idx:
            key = self._keys[i]
            after = state.after(self._space.types[key.type], key)
            if after == state:
                self._next[ident, i] = None
                continue
            self._next[ident, i] = after.fingerprint
            target = after.to_json()
            if target not in by_target:
                by_target[target] = (after, [])
            by_target[target][1].append(i)
        out = [(s, np.asarray(idx, dtype=np.intp)) for s, idx in by_target.values()]
        self._cache[ident] = out
        return out

    def next_fingerprint(self, state: WorldState, i: int) -> str | None:
        self.groups(state)
        return self._next.get((state.to_json(), i))


_States = dict[tuple[str, int], tuple[WorldState, float]]
"""(state JSON, events since it was entered) -> (state, probability mass)."""


def _add(into: _States, s: WorldState, m: float, age: int) -> None:
    ident = (s.to_json(), age)
    old = into.get(ident)
    into[ident] = (s, m + (old[1] if old else 0.0))


class _Walk:
    """One look-ahead: the state distribution pushed forward, expected uses accumulated."""

    def __init__(
        self,
        forecaster: Forecaster,
        space: EventSpace,
        drift: StateDrift | None,
        home: str,
        pace: Pace | None,
        horizon: int,
    ) -> None:
        self.home = home
        self.pace = pace
        self.horizon = horizon
        self.lates: dict[str, np.ndarray] = {}
        self.arrivals: np.ndarray | None = None
        self.forecaster = forecaster
        self.moves = _Moves(space, forecaster.keys)
        self.drift = drift
        self.dists: dict[str, np.ndarray] = {}
        self.drifts: dict[str, list[tuple[WorldState, float]]] = {}
        self.acc: dict[str, tuple[WorldState, np.ndarray]] = {}

    def dist(self, s: WorldState, first: bool) -> np.ndarray:
        if first:  # the previous key is known for the very next event only
            return self.forecaster.distribution(s.fingerprint)
        p = self.dists.get(s.fingerprint)
        if p is None:
            p = self.forecaster.distribution(s.fingerprint, use_previous=False)
            self.dists[s.fingerprint] = p
        return p

    def late(self, s: WorldState) -> np.ndarray | None:
        """Per age since entering ``s``, per key: the share of its events that count (None: all)."""
        if self.pace is None:
            return None
        late = self.lates.get(s.fingerprint)
        if late is None:
            p = self.dist(s, first=False)
            if self.arrivals is None:  # the same for every state: only the key order differs
                self.arrivals = self.pace.arrivals(len(p), self.horizon)
            late = by_rank(p, self.arrivals)
            self.lates[s.fingerprint] = late
        return late

    def step(self, states: _States, first: bool) -> _States:
        nxt: _States = {}
        for (ident, age), (s, m) in states.items():
            p = self.dist(s, first)
            # Another state's events count only as far as they beat the planner, there.
            late = None if ident == self.home else self.late(s)
            cap = 0 if late is None else len(late)  # ages matter only where events are late
            if late is None or age < cap:
                add = m * p if late is None else m * p * late[age]
                seen = self.acc.get(ident)
                self.acc[ident] = (s, add + (seen[1] if seen is not None else 0.0))
            stay = m
            for after, idx in self.moves.groups(s):
                moved = m * float(p[idx].sum())
                _add(nxt, after, moved, 0)
                stay -= moved
            if self.drift is not None:
                options = self.drifts.get(ident)
                if options is None:
                    options = self.drifts[ident] = self.drift.moves(s)
                base = stay
                for after, q in options:
                    _add(nxt, after, base * q, 0)
                    stay -= base * q
            _add(nxt, s, max(stay, 0.0), min(age + 1, cap))
        return nxt

    def branches(self, min_uses: float) -> list[Expected]:
        keys = self.forecaster.keys
        best: dict[tuple[str, EventKey], tuple[float, float, WorldState, int]] = {}
        for s, uses in self.acc.values():
            for i in np.flatnonzero(uses >= min_uses):
                key = keys[i]
                u = float(uses[i])
                ident = (s.fingerprint_for(key.type), key)
                old = best.get(ident)
                if old is None or u > old[1]:
                    # the concrete state where it is most needed represents the branch
                    best[ident] = (u + (old[0] if old else 0.0), u, s, int(i))
                else:
                    best[ident] = (old[0] + u, *old[1:])
        out = [
            Expected(rep, fp, key, total, self.moves.next_fingerprint(rep, i))
            for (fp, key), (total, _, rep, i) in best.items()
        ]
        out.sort(key=lambda e: -e.uses)
        return out


def look_ahead(
    start: WorldState,
    *,
    forecaster: Forecaster,
    space: EventSpace,
    drift: StateDrift | None,
    horizon: int,
    pace: Pace | None = None,
    min_mass: float = 1e-3,
    min_uses: float = 1e-4,
) -> list[Expected]:
    """Every branch expected to be needed within ``horizon`` events, most needed first.

    ``pace``: in a state other than ``start``, an event counts only with the chance it
    arrives before the planner, once there, has written its branch (None: every event).
    """
    home = start.to_json()
    walk = _Walk(forecaster, space, drift, home, pace, horizon)
    states: _States = {(home, 0): (start, 1.0)}
    for step in range(horizon):
        nxt = walk.step(states, first=step == 0)
        states = {k: v for k, v in nxt.items() if v[1] >= min_mass}
    return walk.branches(min_uses)
