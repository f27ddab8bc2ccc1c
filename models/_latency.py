"""The latency model: T = prefill(N_in) + N_out x t_step, predicted before a call runs.

Two linear laws, fitted online from every real forward pass:

* ``prefill(n)``  = a + b * n        (n = new tokens fed in one pass, all rows together)
* ``step(r)``     = c + d * (r - 1)  (r = rows x tokens per row in one decode pass)

Fits use Theil-Sen (median of pairwise slopes) over a recent window, so a stray slow pass
(a page fault, the other core busy) does not drag them; percentiles come from the ratio of
measured to fitted time over the same window. A :class:`LatencyProfile` is the fitted law as
plain numbers: the simulator charges virtual time with one, measured or given.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ._cost import Cost

__all__ = ["LatencyHistory", "LatencyModel", "LatencyPredictor", "LatencyProfile", "Prediction"]

_WINDOW = 256
_FIT_POINTS = 64


@dataclass(frozen=True, slots=True)
class Prediction:
    """A predicted duration in seconds: the fitted median and a conservative 95th percentile."""

    p50: float
    p95: float

    def __add__(self, other: Prediction) -> Prediction:
        return Prediction(self.p50 + other.p50, self.p95 + other.p95)


@dataclass(frozen=True, slots=True)
class LatencyProfile:
    """A device's latency law in plain numbers (seconds), e.g. measured here or given."""

    prefill_base_s: float
    prefill_per_token_s: float
    step_base_s: float
    step_per_row_s: float
    spread95: float = 1.15
    """p95 / p50 of measured vs fitted times."""
    call_cost: Cost = field(default_factory=Cost)
    """One model call's work outside its forward passes: the hop to the model's worker thread
    and back, tokenizing the event, the grammar matcher's set-up, reading the output."""
    pass_cost: Cost = field(default_factory=Cost)
    """One decode pass's work outside the forward, for one row: the grammar mask, the argmax,
    building the next pass's tensors."""
    row_cost: Cost = field(default_factory=Cost)
    """What each further row of a batched decode pass adds to :attr:`pass_cost`."""
    select_cost: Cost = field(default_factory=Cost)
    """One decision's own work in the executor (tree selection), model calls aside."""
    idle_cost: Cost = field(default_factory=Cost)
    """What a pass pays on top when the model sat idle longer than :attr:`idle_after_s` before
    it: caches and threads gone cold (a CPU's prefill after a second's pause is measurably
    slower than one back to back)."""
    idle_after_s: float = math.inf
    """How long the model must have been idle for the next pass to pay :attr:`idle_cost`."""
    longer_idle: tuple[tuple[float, Cost], ...] = ()
    """Costs for longer idle times, ascending: after at least ``seconds`` idle a call pays its
    cost instead of :attr:`idle_cost` (the longest such time that has passed counts). A pause
    of a second costs more than one of a tenth, and a replay's calls come after its events'
    own gaps."""
    first_call_factor: Cost = field(default_factory=Cost)
    """How many times its charge each forward pass of a fresh backend's first call takes, as
    a distribution of ratios (not seconds), instead of any idle cost: a new decoder and prefix
    cache, and the machine's caches cold after the model sat idle (a replay's first call,
    which the latency model then learns from). Empty: it pays what any call after the same
    idle time pays."""

    @classmethod
    def from_figures(cls, *, step_ms: float, prefill_us_per_token: float) -> LatencyProfile:
        """A profile from the two figures people quote (8.6 ms/token, 50 us/prefill token)."""
        return cls(
            prefill_base_s=step_ms / 1e3,
            prefill_per_token_s=prefill_us_per_token / 1e6,
            step_base_s=step_ms / 1e3,
            step_per_row_s=step_ms / 1e3 * 0.02,
            spread95=1.0,
        )


@runtime_checkable
class LatencyPredictor(Protocol):
    """Predicted call times: what the executor and the planner ask before a model call."""

    def prefill(self, tokens: int) -> Prediction:
        """Predicted time of one prefill pass over ``tokens`` new tokens."""
        ...

    def step(self, rows: int = 1) -> Prediction:
        """Predicted time of one decode pass over ``rows`` tokens (rows x tokens per row)."""
        ...

    def call(self, prefill_tokens: int, steps: int, rows: int = 1) -> Prediction:
        """Predicted time of a whole call: one prefill and ``steps`` decode passes."""
        ...

    def typical_steps(self, default: int = 8) -> int:
        """The median number of decode passes a completed action has needed."""
        ...

    @property
    def observed(self) -> int:
        """How many passes the fits have been given, ever (grows with every new measurement)."""
        ...


class _Law:
    """One y = a + b * x law with a sliding window of samples and a cached robust fit."""

    def __init__(self, a: float, b: float, spread95: float) -> None:
        self._samples: deque[tuple[float, float]] = deque(maxlen=_WINDOW)
        self._fit = (a, b, 1.0, spread95)  # intercept, slope, p50 ratio, p95 ratio

    def add(self, x: float, y: float) -> None:
        self._samples.append((x, y))
        xs, ys = (np.asarray(v, dtype=np.float64) for v in zip(*self._samples, strict=True))
        self._fit = _theil_sen(xs, ys, self._fit)

    def predict(self, x: float) -> Prediction:
        a, b, r50, r95 = self._fit
        base = max(a + b * x, 1e-6)
        return Prediction(base * r50, base * max(r95, r50))

    @property
    def coefficients(self) -> tuple[float, float, float]:
        a, b, r50, r95 = self._fit
        return a * r50, b * r50, max(r95, r50) / r50

    @property
    def count(self) -> int:
        return len(self._samples)

    @property
    def history(self) -> tuple[tuple[float, float], ...]:
        return tuple(self._samples)


def _theil_sen(
    xs: np.ndarray, ys: np.ndarray, prior: tuple[float, float, float, float]
) -> tuple[float, float, float, float]:
    if len(xs) > _FIT_POINTS:
        xs, ys = xs[-_FIT_POINTS:], ys[-_FIT_POINTS:]
    if len(xs) == 1 or np.ptp(xs) == 0:
        # One x seen: keep the prior's slope and move the intercept through the median.
        slope = prior[1]
        intercept = float(np.median(ys - slope * xs))
    else:
        i, j = np.triu_indices(len(xs), k=1)
        dx = xs[j] - xs[i]
        ok = dx != 0
        slope = max(float(np.median((ys[j] - ys[i])[ok] / dx[ok])), 0.0)
        intercept = float(np.median(ys - slope * xs))
    fitted = np.maximum(intercept + slope * xs, 1e-6)
    ratios = ys / fitted
    if len(xs) >= 8:
        r50, r95 = float(np.median(ratios)), float(np.quantile(ratios, 0.95))
    else:
        r50, r95 = 1.0, max(prior[3], float(ratios.max()))
    return intercept, slope, r50, r95


@dataclass(frozen=True, slots=True)
class LatencyHistory:
    """What a latency model has seen, in order: enough to give another the same fit.

    ``prefills`` are (new tokens, seconds), ``steps`` (rows, seconds) and ``actions`` the decode
    passes each completed action needed. A warm-up's history is what a later load on the same
    machine replays instead of running the warm-up's calls again
    (:class:`~forethought.models._warm_record.WarmRecord`).
    """

    prefills: tuple[tuple[int, float], ...] = ()
    steps: tuple[tuple[int, float], ...] = ()
    actions: tuple[int, ...] = ()


class LatencyModel:
    """Predicts prefill and decode-step times; learns from every real pass. Thread-safe.

    ``fixed=True`` freezes it at its profile (the simulator's virtual device).
    """

    def __init__(self, profile: LatencyProfile | None = None, *, fixed: bool = False) -> None:
        p = profile or LatencyProfile(0.02, 0.002, 0.05, 0.002)
        self._lock = threading.Lock()
        self._fixed = fixed
        self._prefill = _Law(p.prefill_base_s, p.prefill_per_token_s, p.spread95)
        self._step = _Law(p.step_base_s, p.step_per_row_s, p.spread95)
        self._steps_per_action: deque[int] = deque(maxlen=64)
        self._observed = 0

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """Record a prefill pass over ``tokens`` new tokens that took ``seconds``."""
        if not self._fixed:
            with self._lock:
                self._prefill.add(float(tokens), seconds)
                self._observed += 1

    def observe_step(self, rows: int, seconds: float) -> None:
        """Record a decode pass over ``rows`` tokens (rows x tokens per row)."""
        if not self._fixed:
            with self._lock:
                self._step.add(float(max(rows, 1) - 1), seconds)
                self._observed += 1

    def observe_action(self, steps: int) -> None:
        """Record how many decode passes one completed action needed."""
        with self._lock:
            self._steps_per_action.append(steps)

    def prefill(self, tokens: int) -> Prediction:
        """Predicted time of one prefill pass over ``tokens`` new tokens."""
        with self._lock:
            return self._prefill.predict(float(tokens))

    def step(self, rows: int = 1) -> Prediction:
        """Predicted time of one decode pass over ``rows`` tokens."""
        with self._lock:
            return self._step.predict(float(max(rows, 1) - 1))

    def typical_steps(self, default: int = 8) -> int:
        """The median number of decode passes a completed action has needed."""
        with self._lock:
            if not self._steps_per_action:
                return default
            return int(np.median(np.asarray(self._steps_per_action)))

    def call(self, prefill_tokens: int, steps: int, rows: int = 1) -> Prediction:
        """Predicted time of a whole call: one prefill and ``steps`` decode passes."""
        step = self.step(rows)
        return self.prefill(prefill_tokens) + Prediction(step.p50 * steps, step.p95 * steps)

    @property
    def observed(self) -> int:
        """How many passes the fits have been given, ever (the window keeps the recent ones)."""
        with self._lock:
            return self._observed

    @property
    def samples(self) -> tuple[int, int]:
        """How many prefill and step passes the fits have seen."""
        with self._lock:
            return self._prefill.count, self._step.count

    def history(self) -> LatencyHistory:
        """The passes the fits hold now (the recent window), and the actions' pass counts."""
        with self._lock:
            return LatencyHistory(
                prefills=tuple((int(x), y) for x, y in self._prefill.history),
                steps=tuple((int(x) + 1, y) for x, y in self._step.history),
                actions=tuple(self._steps_per_action),
            )

    def replay(self, history: LatencyHistory) -> None:
        """Observe ``history``'s passes and actions, in order, as if they ran now."""
        for tokens, seconds in history.prefills:
            self.observe_prefill(tokens, seconds)
        for rows, seconds in history.steps:
            self.observe_step(rows, seconds)
        for steps in history.actions:
            self.observe_action(steps)

    def adopt(self, profile: LatencyProfile, typical_steps: int | None = None) -> None:
        """Take over another model's fit (the model in a worker process reports its own)."""
        with self._lock:
            self._prefill = _Law(
                profile.prefill_base_s, profile.prefill_per_token_s, profile.spread95
            )
            self._step = _Law(profile.step_base_s, profile.step_per_row_s, profile.spread95)
            if typical_steps is not None:
                self._steps_per_action.clear()
                self._steps_per_action.append(typical_steps)

    def profile(self) -> LatencyProfile:
        """The current fit as plain numbers."""
        with self._lock:
            pa, pb, ps = self._prefill.coefficients
            sa, sb, ss = self._step.coefficients
        return LatencyProfile(pa, pb, sa, sb, max(ps, ss))
