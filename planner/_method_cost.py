"""MeasuredCosts: what each way of writing a branch has cost on this backend, kept up to date.

The planner's ``auto`` method picks, per round, the cheaper way of writing branches:
constrained generation of a batch, or scoring the candidate actions. Before a way has run, its
cost is the latency model's prediction; once it has, the cost is what it measured here (the
median of its recent rounds, in model seconds per branch written), so a backend on which one
way is dearer than the law predicts (scoring as one request per candidate, say) is found out by
running it, and the planner moves to the other.

One measurement can mislead: a first round on a cold cache, or beside a busy neighbour, may
cost several times what the way costs after. Left alone, the way that lost would never run
again and never be measured again. So the choice is revisited, as a two-armed bandit is:

* a way measured fewer than :data:`_SETTLED` times counts at its *cheapest* measurement
  (optimism while uncertain: one slow round does not condemn it);
* a way that lost is **due** again once the others have written ``revisit_branches``
  branches since it last ran: it then writes one round, and its measurement joins the rest.
  Each revisit doubles the wait before the next (up to :data:`_MAX_WAIT`), so the
  exploration's cost stays a shrinking share of the model's time; a revisit that wins makes
  the way the cheapest, and it is chosen outright from then on.
"""

from __future__ import annotations

import statistics
from collections import deque

__all__ = ["MeasuredCosts"]

_SETTLED = 3
"""Measurements after which a way counts at its median rather than its cheapest."""
_MAX_WAIT = 4096
"""The longest wait, in branches, between revisits: a change on the backend is still seen."""


class MeasuredCosts:
    """Seconds per branch measured for each method, over its last ``window`` rounds.

    Args:
        window: the rounds per method the median is taken over.
        revisit_branches: branches the other ways write before one that lost runs again
            (doubled after each revisit).

    """

    def __init__(self, window: int = 16, revisit_branches: int = 32) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        if revisit_branches < 1:
            raise ValueError("revisit_branches must be at least 1")
        self._window = window
        self._revisit = revisit_branches
        self._seen: dict[str, deque[float]] = {}
        self._written = 0  # branches written by every way, ever
        self._last_at: dict[str, int] = {}  # the count of branches when each way last ran
        self._wait: dict[str, int] = {}  # branches others write before each way is due again

    def observe(self, method: str, seconds: float, branches: int) -> None:
        """One round of ``method``: ``seconds`` of model time for ``branches`` branches."""
        if branches <= 0 or seconds < 0:
            return
        if self._due(method):
            # A revisit: the next one waits twice as long (it is chosen outright if it won).
            self._wait[method] = min(self._wait.get(method, self._revisit) * 2, _MAX_WAIT)
        self._seen.setdefault(method, deque(maxlen=self._window)).append(seconds / branches)
        self._written += branches
        self._last_at[method] = self._written

    def _due(self, method: str) -> bool:
        wait = self._wait.get(method, self._revisit)
        return self._written - self._last_at.get(method, 0) >= wait

    def get(self, method: str) -> float | None:
        """The seconds per branch ``method`` counts at (None: never measured).

        The median of its recent rounds, or its cheapest while it has fewer than
        :data:`_SETTLED` of them.
        """
        seen = self._seen.get(method)
        if not seen:
            return None
        return statistics.median(seen) if len(seen) >= _SETTLED else min(seen)

    def choose(self, costs: dict[str, float]) -> str:
        """The way to write the next round with, from each way's seconds per branch.

        The cheapest, unless another is due for a revisit (see the module's docstring): then
        that one, until a round of it is measured. A way never run is due once
        ``revisit_branches`` have been written.
        """
        best = min(costs, key=costs.__getitem__)
        due = [way for way in sorted(costs) if way != best and self._due(way)]
        return due[0] if due else best

    def as_dict(self) -> dict[str, float]:
        """Measured seconds per branch by method, for reports."""
        return {m: statistics.median(s) for m, s in self._seen.items() if s}
