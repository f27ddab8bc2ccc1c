"""What a call to a server is predicted to take: the fitted latency law plus the server's queue."""

from __future__ import annotations

from .._latency import LatencyModel, Prediction
from ._call_prediction import live_call

__all__ = ["ServerLatency"]


class ServerLatency:
    """The fitted law plus the server's queue: what a call here is predicted to take.

    Prefill predictions include the round trip and the wait for a free slot (zero while one
    is free; otherwise the typical remaining call), so a caller's fit check sees the queue.
    """

    def __init__(self, model: LatencyModel) -> None:
        self.model = model
        self.queue_wait_s = 0.0

    def prefill(self, tokens: int) -> Prediction:
        """Round trip, queue wait and prefill of ``tokens`` uncached tokens."""
        p = self.model.prefill(tokens)
        return Prediction(p.p50 + self.queue_wait_s, p.p95 + self.queue_wait_s)

    def step(self, rows: int = 1) -> Prediction:
        """One streamed token at ``rows`` requests in flight."""
        return self.model.step(rows)

    def call(self, prefill_tokens: int, steps: int, rows: int = 1) -> Prediction:
        """A whole call: first token, then ``steps`` more."""
        step = self.step(rows)
        return self.prefill(prefill_tokens) + Prediction(step.p50 * steps, step.p95 * steps)

    def live(self, prefill_tokens: int, steps: int) -> Prediction:
        """One single-row call, its steps' spread added as a sum's (see :func:`.live_call`)."""
        return live_call(self.prefill(prefill_tokens), self.step(1), steps)

    def typical_steps(self, default: int = 8) -> int:
        """Tokens a completed action has needed (median)."""
        return self.model.typical_steps(default)

    @property
    def observed(self) -> int:
        """How many measurements the fit has been given, ever."""
        return self.model.observed
