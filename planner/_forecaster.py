"""The forecaster: p(next event key | previous key, state) from priors and what it has seen.

A hierarchy of Dirichlet-smoothed counts, each level backing off to the one below:

    prior (declared weights)  <-  all events seen  <-  events seen in this state
                              <-  events seen after the previous key

``p = (count(prev -> k) + a * p_state(k)) / (count(prev) + a)``, and likewise down the levels,
so a stream with structure is predicted better as counts accrue, while an unseen context falls
back smoothly to what is known. Coverage is the next event's probability mass that the tree
already answers in the current state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from forethought.policies import EventKey, EventSpace

__all__ = ["Forecaster"]


class Forecaster:
    """Predicts the next event key.

    Args:
        space: the event space (priors come from its weights).
        concentration: smoothing strength ``a`` at each level (pseudo-counts).

    """

    def __init__(self, space: EventSpace, *, concentration: float = 2.0) -> None:
        self._space = space
        self._keys = space.keys()
        self._index = {k: i for i, k in enumerate(self._keys)}
        self._prior = np.array([space.prior(k) for k in self._keys], dtype=np.float64)
        self._prior /= self._prior.sum()
        self._a = concentration
        n = len(self._keys)
        self._unigram = np.zeros(n)
        self._by_state: defaultdict[str, np.ndarray] = defaultdict(lambda: np.zeros(n))
        self._by_prev: defaultdict[int, np.ndarray] = defaultdict(lambda: np.zeros(n))
        self._prev: int | None = None
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
        if key is None or key not in self._index:
            return  # out of space: nothing to count, and the context stays as it was
        i = self._index[key]
        self._unigram[i] += 1
        self._by_state[fingerprint][i] += 1
        if self._prev is not None:
            self._by_prev[self._prev][i] += 1
        self._prev = i
        self.observed += 1

    def distribution(
        self, fingerprint: str, previous: EventKey | None = None, *, use_previous: bool = True
    ) -> np.ndarray:
        """p(next key) over :attr:`keys`, given the state and the previous key.

        ``previous`` defaults to the last observed key; ``use_previous=False`` drops that level
        (the planner uses it for states reached only hypothetically).
        """
        a = self._a
        p: np.ndarray = (self._unigram + a * self._prior) / (self._unigram.sum() + a)
        counts = self._by_state.get(fingerprint)
        if counts is not None:
            p = (counts + a * p) / (counts.sum() + a)
        prev = self._prev if previous is None else self._index.get(previous)
        if use_previous and prev is not None:
            after = self._by_prev.get(prev)
            if after is not None:
                p = (after + a * p) / (after.sum() + a)
        return p

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
        k = min(k, len(p))
        idx = np.argpartition(-p, k - 1)[:k]
        idx = idx[np.argsort(-p[idx], kind="stable")]
        return [(self._keys[i], float(p[i])) for i in idx]

    def coverage(self, fingerprint: str, answered: Callable[[EventKey], bool]) -> float:
        """Probability mass of the next event that ``answered`` (the tree) covers."""
        p = self.distribution(fingerprint)
        return float(sum(p[i] for i, k in enumerate(self._keys) if answered(k)))
