"""MeasuredCosts: what each way of writing a branch has cost on this engine.

The planner's ``auto`` method picks, per round, the cheaper way of writing branches:
constrained generation of a batch, or scoring the candidate actions. Before a way has run, its
cost is the latency model's prediction; once it has, the cost is what it measured here (the
median of its recent rounds, in model seconds per branch written), so an engine on which one
way is dearer than the law predicts (scoring as one request per candidate, say) is found out by
running it, and the planner moves to the other.
"""

from __future__ import annotations

import statistics
from collections import deque

__all__ = ["MeasuredCosts"]


class MeasuredCosts:
    """Seconds per branch measured for each method, over its last ``window`` rounds."""

    def __init__(self, window: int = 16) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self._window = window
        self._seen: dict[str, deque[float]] = {}

    def observe(self, method: str, seconds: float, branches: int) -> None:
        """One round of ``method``: ``seconds`` of model time for ``branches`` branches."""
        if branches <= 0 or seconds < 0:
            return
        self._seen.setdefault(method, deque(maxlen=self._window)).append(seconds / branches)

    def get(self, method: str) -> float | None:
        """The median measured seconds per branch (None: never measured)."""
        seen = self._seen.get(method)
        return statistics.median(seen) if seen else None

    def as_dict(self) -> dict[str, float]:
        """Measured seconds per branch by method, for reports."""
        return {m: statistics.median(s) for m, s in self._seen.items() if s}
