"""What one live call on a server will take: for its own prompt, its steps' spread as a sum's.

The fitted laws predict a call as a prefill plus ``steps`` decode steps, and the executor asks
for a p95 as the sum of their p95s, for a fixed guess of the event's tokens
(``ExecutorConfig.event_tokens``). In process that is close: each pass is timed directly and
its spread is small. On a server it is not:

* a step is seen as the gap between two streamed chunks, whose p95 was 1.4-2.4x its median
  on a 2-core CPU; a compact action is about 14 of them, and 14 step p95s added are far above
  the p95 of their sum (:func:`live_call`);
* what is prefilled is the uncached part of the prompt: after a state change the whole state,
  otherwise only the event's own tokens -- often fewer than the guess, at several milliseconds
  a token on a CPU (:class:`SentPrefixes`).

Both made the live tier decline calls that would have fitted (``docs/results/engine.md``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

from .._latency import Prediction

__all__ = ["SentPrefixes", "live_call"]


def live_call(prefill: Prediction, step: Prediction, steps: int) -> Prediction:
    """One call's time: a prefill, then ``steps`` decode steps whose spreads add as a sum's.

    The median is the medians added. Of the p95, the prefill's comes whole (one pass: a cold
    prefix, the wait behind another call), and the steps' spread above their median grows with
    the square root of their number, as the spread of a sum of independent gaps does, not with
    the number itself. That assumes the gaps vary independently; a slowdown that holds for a
    whole call moves the step median, which the law follows over its recent samples.
    """
    extra = max(step.p95 - step.p50, 0.0) * math.sqrt(max(steps, 0))
    return Prediction(prefill.p50 + steps * step.p50, prefill.p95 + steps * step.p50 + extra)


class SentPrefixes:
    """The prompt prefixes (states) sent lately: a server's prefix cache most likely holds them.

    A guess, not a reading: a shared server may have dropped one, and the call then prefills
    more than predicted.

    Args:
        keep: how many distinct prefixes are remembered (the least recently sent go first).

    """

    def __init__(self, *, keep: int = 16) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self._keep = keep
        self._sent: OrderedDict[tuple[int, ...], None] = OrderedDict()

    def sent(self, prefix: Sequence[int]) -> None:
        """Note that a request starting with ``prefix`` went to the server."""
        key = tuple(prefix)
        self._sent[key] = None
        self._sent.move_to_end(key)
        while len(self._sent) > self._keep:
            self._sent.popitem(last=False)

    def __contains__(self, prefix: object) -> bool:
        """Whether ``prefix`` (a token sequence) was sent lately."""
        return isinstance(prefix, Sequence) and tuple(prefix) in self._sent

    def uncached(self, prefix: Sequence[int], own: Sequence[int]) -> int:
        """Tokens the server is expected to prefill for ``prefix + own``."""
        return len(own) if tuple(prefix) in self._sent else len(prefix) + len(own)
