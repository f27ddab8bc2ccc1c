"""Forecaster calibration: how well predicted probabilities match the events that came.

A stream of ``(key, state fingerprint)`` is scored one-step-ahead, online: each event is
predicted before the forecaster sees it, then observed. Figures, averaged over the events after
``skip`` warm-up ones:

* **log loss** -- mean ``-ln p(actual next key)`` (nats; lower is better; a uniform guess over
  ``n`` keys scores ``ln n``);
* **Brier score** -- mean squared error of the whole predicted distribution against the
  one-hot outcome (0 is perfect, 2 the worst);
* **top-1** -- share of events that were the single most likely key.

:func:`markov_bound` gives the best any forecaster can do on a stream whose transition matrix
is known (the true probabilities' own scores), the yardstick the bench reports against.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from forethought.policies import EventKey

from ._forecaster import Forecaster

__all__ = ["Calibration", "calibration", "markov_bound"]

_FLOOR = 1e-12


@dataclass(frozen=True, slots=True)
class Calibration:
    """Scores of one-step-ahead predictions over a stream."""

    events: int
    log_loss: float
    brier: float
    top1: float

    def as_dict(self) -> dict[str, float]:
        """Plain data for reports."""
        return {
            "events": self.events,
            "log_loss": self.log_loss,
            "brier": self.brier,
            "top1": self.top1,
        }


def _score(dists: Iterable[tuple[np.ndarray, int]]) -> Calibration:
    losses, briers, hits = [], [], []
    for p, actual in dists:
        losses.append(-math.log(max(float(p[actual]), _FLOOR)))
        onehot = np.zeros_like(p)
        onehot[actual] = 1.0
        briers.append(float(((p - onehot) ** 2).sum()))
        hits.append(int(np.argmax(p)) == actual)
    n = len(losses)
    if n == 0:
        return Calibration(0, math.nan, math.nan, math.nan)
    return Calibration(n, float(np.mean(losses)), float(np.mean(briers)), float(np.mean(hits)))


def calibration(
    make: Callable[[], Forecaster],
    stream: Sequence[tuple[EventKey | None, str]],
    *,
    learn: bool = True,
    skip: int = 0,
) -> Calibration:
    """Score a fresh forecaster from ``make`` on ``stream`` (``learn=False``: priors only).

    Out-of-space events (``None`` keys) are neither scored nor learned from.
    """
    f = make()
    index = {k: i for i, k in enumerate(f.keys)}

    def walk() -> Iterable[tuple[np.ndarray, int]]:
        for n, (key, fp) in enumerate(stream):
            if key is None or key not in index:
                continue
            p = f.distribution(fp)
            if n >= skip:
                yield p, index[key]
            if learn:
                f.observe(key, fp)

    return _score(walk())


def markov_bound(transitions: np.ndarray, sequence: Sequence[int], *, skip: int = 0) -> Calibration:
    """The scores of the true next-event probabilities on a known Markov ``sequence``."""
    return _score(
        (transitions[prev], nxt)
        for n, (prev, nxt) in enumerate(itertools.pairwise(sequence), start=1)
        if n >= skip
    )
