"""Cost: a measured cost in seconds as a distribution (its quantiles), not one figure.

A model call pays more than its forward passes: the hop to the model's worker thread and back,
tokenizing the event, setting up the grammar matcher, and per decode pass the grammar mask,
the argmax and building the next pass's tensors. A :class:`LatencyProfile` carries each of
those as a :class:`Cost` measured on a machine, so a virtual clock can charge them with the
spread they really have: a draw ``u`` in [0, 1) reads the measured quantile function there.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["Cost"]

_POINTS = 21  # quantiles at 0, 5, ..., 100 %: enough to keep the tail a p95 check reads


@dataclass(frozen=True, slots=True)
class Cost:
    """A cost's quantile function at evenly spaced probabilities (seconds, ascending).

    ``quantiles[0]`` is the smallest sample, ``quantiles[-1]`` the largest; empty means free.
    """

    quantiles: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        qs = self.quantiles
        if any(q < 0 for q in qs) or any(b < a for a, b in itertools.pairwise(qs)):
            raise ValueError(f"a cost's quantiles must be ascending and >= 0, got {qs}")

    @classmethod
    def measured(cls, samples: Iterable[float]) -> Cost:
        """The distribution of ``samples`` (seconds; negatives, from clock noise, count as 0)."""
        xs = np.maximum(np.asarray(list(samples), dtype=np.float64), 0.0)
        if xs.size == 0:
            return cls()
        qs = np.quantile(xs, np.linspace(0.0, 1.0, _POINTS))
        return cls(tuple(float(q) for q in np.maximum.accumulate(qs)))

    @classmethod
    def fixed(cls, seconds: float) -> Cost:
        """A cost that is always ``seconds``."""
        return cls((max(seconds, 0.0),))

    def at(self, u: float) -> float:
        """The cost at probability ``u`` in [0, 1] (linear between the stored quantiles)."""
        qs = self.quantiles
        if not qs:
            return 0.0
        if len(qs) == 1:
            return qs[0]
        x = min(max(u, 0.0), 1.0) * (len(qs) - 1)
        i = min(int(x), len(qs) - 2)
        return qs[i] + (qs[i + 1] - qs[i]) * (x - i)

    @property
    def p50(self) -> float:
        """The median."""
        return self.at(0.5)

    @property
    def p95(self) -> float:
        """The 95th percentile."""
        return self.at(0.95)

    def scaled(self, factor: float) -> Cost:
        """The same shape, every quantile times ``factor`` (a derived profile's)."""
        return Cost(tuple(q * max(factor, 0.0) for q in self.quantiles))

    def figures(self) -> dict[str, float]:
        """p50 and p95 in milliseconds (for reports)."""
        return {"p50_ms": round(self.p50 * 1e3, 4), "p95_ms": round(self.p95 * 1e3, 4)}
