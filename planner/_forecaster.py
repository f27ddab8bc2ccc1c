"""The forecaster: p(next event key | previous event, state) from priors and what it has seen.

A key's probability factors into its **type** and its **parameters given the type**:

    p(key) = p(type | state, previous type) x p(key | type)

Types are few, so their structure is learned within tens of events; keys are many (a grid of
parameters), so learning them one by one would take thousands. The type distribution is a
hierarchy of Dirichlet-smoothed counts, each level backing off to the one below:

    prior (declared weights)  <-  all events seen  <-  events seen in this state
                              <-  events seen after the previous type

``p = (count(prev -> t) + a * p_state(t)) / (count(prev) + a)``, and likewise down the levels.
The parameters given the type start uniform (as the space's priors do) and learn from the
type's own events, with ``key_concentration`` pseudo-counts per key. Measured as one-step-ahead
log loss on the shipped scenarios and on Markov streams (``forethought bench --suite planner``):
a per-key hierarchy with small pseudo-counts was worse than the priors alone, because one
sighting made a key look likely in a context where it is one of sixty.
Coverage is the next event's probability mass that the tree already answers in the current
state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from forethought.policies import EventKey, EventSpace

__all__ = ["Forecaster"]

_MOST_UNCOUNTED = 1024
"""Observations kept uncounted at most: a planner that reads nothing for a long while (all
covered, events flowing) still keeps the list this short."""


class Forecaster:
    """Predicts the next event key.

    Args:
        space: the event space (priors come from its weights).
        concentration: pseudo-counts of the declared type weights against all events seen:
            the stream outweighs the declared weights after about this many events.
        context_concentration: pseudo-counts of each context level (this state, the previous
            type) over the level below.
        key_concentration: pseudo-counts per key of the uniform prior over a type's keys.

    """

    def __init__(
        self,
        space: EventSpace,
        *,
        concentration: float = 16.0,
        context_concentration: float = 16.0,
        key_concentration: float = 4.0,
    ) -> None:
        self._space = space
        self._keys = space.keys()
        self._index = {k: i for i, k in enumerate(self._keys)}
        names = list(space.types)
        self._type_index = {t: i for i, t in enumerate(names)}
        self._type_of = np.array([self._type_index[k.type] for k in self._keys], dtype=np.intp)
        weights = np.array([space.types[t].weight for t in names], dtype=np.float64)
        self._type_prior = weights / weights.sum()
        per_type = np.bincount(self._type_of, minlength=len(names)).astype(np.float64)
        self._keys_in_type = per_type
        self._a = concentration
        self._ac = context_concentration
        self._ak = key_concentration
        n = len(self._keys)
        t = len(names)
        self._types_seen = np.zeros(t)
        self._key_counts = np.zeros(n)
        self._by_state: defaultdict[str, np.ndarray] = defaultdict(lambda: np.zeros(t))
        self._by_prev: defaultdict[int, np.ndarray] = defaultdict(lambda: np.zeros(t))
        self._prev: int | None = None
        # Observations not yet counted into the arrays: (key index, state, previous index).
        # Observing is on every decision's path, so it only notes the event; the arrays'
        # arithmetic runs at the next read, on the planner's side (see _count).
        self._uncounted: list[tuple[int, str, int | None]] = []
        self.observed = 0

    @property
    def keys(self) -> list[EventKey]:
        """Every key, in the order :meth:`distribution` uses."""
        return list(self._keys)

    @property
    def previous(self) -> EventKey | None:
        """The last in-space event observed."""
        return None if self._prev is None else self._keys[self._prev]

    def observe(self, key: EventKey | None, fingerprint: str) -> None:
        """Record an event seen in the state ``fingerprint`` (None: out of space)."""
        i = None if key is None else self._index.get(key)
        if i is None:
            return  # out of space: nothing to count, and the context stays as it was
        self._uncounted.append((i, fingerprint, self._prev))
        if len(self._uncounted) >= _MOST_UNCOUNTED:
            self._count()  # nobody has read for a long while: keep the list short
        self._prev = i
        self.observed += 1

    def _count(self) -> None:
        """Count the observations noted since the last read, in the order they came."""
        of = self._type_of
        for i, fingerprint, prev in self._uncounted:
            t = int(of[i])
            self._types_seen[t] += 1
            self._key_counts[i] += 1
            self._by_state[fingerprint][t] += 1
            if prev is not None:
                self._by_prev[int(of[prev])][t] += 1
        self._uncounted.clear()

    def type_distribution(
        self, fingerprint: str, previous: EventKey | None = None, *, use_previous: bool = True
    ) -> np.ndarray:
        """p(next type), in declaration order, given the state and the previous event."""
        self._count()
        a, ac = self._a, self._ac
        seen = self._types_seen
        p: np.ndarray = (seen + a * self._type_prior) / (seen.sum() + a)
        counts = self._by_state.get(fingerprint)
        if counts is not None:
            p = (counts + ac * p) / (counts.sum() + ac)
        prev = self._prev if previous is None else self._index.get(previous)
        if use_previous and prev is not None:
            after = self._by_prev.get(int(self._type_of[prev]))
            if after is not None:
                p = (after + ac * p) / (after.sum() + ac)
        return p

    def distribution(
        self, fingerprint: str, previous: EventKey | None = None, *, use_previous: bool = True
    ) -> np.ndarray:
        """p(next key) over :attr:`keys`, given the state and the previous key.

        ``previous`` defaults to the last observed key; ``use_previous=False`` drops that level
        (the planner uses it for states reached only hypothetically).
        """
        p_type = self.type_distribution(fingerprint, previous, use_previous=use_previous)
        of = self._type_of
        ak = self._ak  # pseudo-counts per key, spread uniformly over the type's keys
        p_key = (self._key_counts + ak) / (self._types_seen[of] + ak * self._keys_in_type[of])
        out: np.ndarray = p_type[of] * p_key
        return out

    def top(
        self,
        fingerprint: str,
        k: int,
        previous: EventKey | None = None,
        *,
        use_previous: bool = True,
    ) -> list[tuple[EventKey, float]]:
        """The ``k`` most likely next keys with their probabilities, most likely first."""
        p = self.distribution(fingerprint, previous, use_previous=use_previous)
        # A stable order: among equally likely keys the first declared wins, as in the
        # planner's ranking, so "the k most likely" names the branches it writes first.
        idx = np.argsort(-p, kind="stable")[: min(k, len(p))]
        return [(self._keys[i], float(p[i])) for i in idx]

    def coverage(self, fingerprint: str, answered: Callable[[EventKey], bool]) -> float:
        """Probability mass of the next event that ``answered`` (the tree) covers."""
        p = self.distribution(fingerprint)
        return float(sum(p[i] for i, k in enumerate(self._keys) if answered(k)))
