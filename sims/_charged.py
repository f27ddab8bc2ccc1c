"""ChargedClock: model work costs *virtual* time, drawn from a device profile.

A simulated replay runs every model call for real (the actions are real) on a
:class:`VirtualTimeLoop`, with the backend reading this clock. Each forward
pass is computed while virtual time stands still, then charged what the device profile
predicts for *that* pass -- a prefill of n tokens, or a decode pass feeding k tokens to r rows
-- drawn around the prediction from the profile's spread with a seeded generator. The decoder's
own deadline logic (not started, cut before the pass that would overshoot, cancelled at the
next pass boundary) then runs on the charged timeline unchanged, and because one worker owns
the model, planner and executor calls queue on it as they would on one device.

What a real call pays besides its forward passes is charged too, from the profile's measured
distributions: each call's own work (the hop to the worker, tokenizing, the grammar set-up,
reading the output) as the call starts on the worker, and each decode pass's (the grammar mask
per row, the argmax, the next pass's tensors) with that pass. A call that starts after the
model sat idle longer than the profile's ``idle_after_s`` pays its ``idle_cost`` on top (caches
and threads gone cold: its first passes are slower), so a model that waits between events pays
what a real one does. The replay's very first call that runs has its passes scaled by the
profile's ``first_call_factor`` instead, where it has one (a fresh backend's one-off costs on
a machine that sat idle before the replay, spread over its passes as on a real machine).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from forethought.models import LatencyModel, LatencyProfile, Prediction
from forethought.models.internals import Pass, PassKind

if TYPE_CHECKING:
    from ._vloop import VirtualTimeLoop

__all__ = ["ChargedClock"]

_T = TypeVar("_T")
_Z95 = 1.6448536269514722  # the standard normal's 95th percentile


class ChargedClock:
    """The clock of a model on a simulated device (implements the planner's ``Clock``).

    Args:
        loop: the virtual-time loop of the replay.
        profile: the simulated device's latency law.
        seed: seeds the draws, so a replay is byte-identical for a seed, profile and model.

    A pass the profile predicts at p50 ``m`` and p95 ``q`` costs ``m * exp(sigma * z)``, z
    standard normal, sigma = ln(q / m) / 1.645: the median is the profile's, and one pass in
    twenty takes longer than its p95, as on a real device. A profile without spread (q == m)
    charges exactly ``m``.

    """

    def __init__(self, loop: VirtualTimeLoop, profile: LatencyProfile, *, seed: int = 0) -> None:
        self._loop = loop
        self._law = LatencyModel(profile, fixed=True)
        self._profile = profile
        self._rng = random.Random(seed)
        # Decisions draw their own costs on the loop's thread: a generator of their own keeps
        # the passes' draws (on the worker) in the same order whatever the interleaving.
        self._select_rng = random.Random(seed + 1)
        self._log: list[Pass] | None = None
        self.charged_s = 0.0
        """Model time charged: passes and every call's and pass's own work."""
        self.overhead_s = 0.0
        """The part of :attr:`charged_s` outside forward passes."""
        self.passes = 0
        self.idle_s = 0.0
        """The part of :attr:`overhead_s` charged for calls after idle time."""
        self.idle_calls = 0
        """How many calls were charged the profile's ``idle_cost``."""
        self._last_end = loop.time()  # the model is idle from the moment it is there
        # The idle cost drawn as the call under way started, spent with its first pass: a
        # call refused before any pass wakes nothing, so it pays none and the model stays idle.
        self._cold_s = 0.0
        self._ran = False
        self._fresh = True  # no call has run yet: the first pays the first call's factor
        self._factor = 1.0  # the call under way's passes take this many times their charge

    def now(self) -> float:
        """The loop's virtual time."""
        return self._loop.time()

    def predict(self, shape: Pass) -> Prediction:
        """What the profile predicts for one pass of ``shape``."""
        if shape.kind is PassKind.PREFILL:
            return self._law.prefill(shape.tokens)
        return self._law.step(shape.tokens)

    def charge(self, shape: Pass) -> float:
        """What one forward pass of ``shape`` costs (one draw)."""
        predicted = self.predict(shape)
        m, q = predicted.p50, predicted.p95
        if q <= m * (1 + 1e-9):
            return m
        sigma = math.log(q / m) / _Z95
        return m * math.exp(sigma * self._rng.gauss(0.0, 1.0))

    def overhead(self, shape: Pass) -> float:
        """What a decode pass of ``shape`` costs outside its forward (one draw).

        A prefill's own work is part of its call's (:meth:`call_cost`): 0 here.
        """
        p = self._profile
        if shape.kind is not PassKind.STEP or not (p.pass_cost.quantiles or p.row_cost.quantiles):
            return 0.0
        u = self._rng.random()
        return p.pass_cost.at(u) + max(shape.rows - 1, 0) * p.row_cost.at(u)

    def call_cost(self) -> float:
        """What one call's own work costs outside its passes (one draw)."""
        cost = self._profile.call_cost
        return cost.at(self._rng.random()) if cost.quantiles else 0.0

    def idle_cost(self) -> float:
        """What the call starting now pays for the model's idle time before it (one draw).

        Nothing unless the model was idle for longer than the profile's ``idle_after_s`` since
        its last call ended (no draw either: a profile without an idle cost charges as before);
        after a longer idle time, the cost the profile gives for it (``longer_idle``).
        """
        return self._counted(self._idle_draw())

    def _counted(self, idle: float) -> float:
        """``idle`` seconds of idle cost, added to the counters when there are any."""
        if idle > 0:
            self.idle_s += idle
            self.idle_calls += 1
        return idle

    def _idle_draw(self) -> float:
        p = self._profile
        if self._fresh and p.first_call_factor.quantiles:
            return 0.0  # the first call's factor stands for its idle time
        idle = self._loop.time() - self._last_end
        if not p.idle_cost.quantiles or idle <= p.idle_after_s:
            return 0.0
        cost = p.idle_cost
        for after, longer in p.longer_idle:
            if idle >= after:
                cost = longer
        return cost.at(self._rng.random())

    def _first_call_draw(self) -> float:
        """The factor the call starting now scales its passes by: 1 unless it is the first."""
        first = self._profile.first_call_factor
        return first.at(self._rng.random()) if self._fresh and first.quantiles else 1.0

    def select_cost(self) -> float:
        """What one decision's own work in the executor costs (one draw, on the loop)."""
        cost = self._profile.select_cost
        return cost.at(self._select_rng.random()) if cost.quantiles else 0.0

    def timed(self, work: Callable[[], _T], shape: Pass) -> tuple[_T, float]:
        """Compute the pass for real with time still, then spend its charge.

        A decode pass is charged its own work too; returns the forward pass's seconds, with
        the idle cost on a call's first pass: on a real machine the cold start is inside that
        pass, so the latency model learning from it sees it there too.
        """
        out = work()
        if self._log is not None:
            self._log.append(shape)
        cold, self._cold_s, self._ran = self._counted(self._cold_s), 0.0, True
        seconds = self.charge(shape) * self._factor
        extra = self.overhead(shape) + cold
        self.charged_s += seconds + extra
        self.overhead_s += extra
        self.passes += 1
        self._loop.spend(seconds + extra)
        return out, seconds + cold

    def record(self) -> list[Pass]:
        """Log the shapes of the passes charged from now on (until :meth:`stop_recording`).

        A call that runs to completion, uncut and uncancelled, is a pure function of its
        prompt (greedy decoding): replaying its passes charges exactly what computing it again
        would, draw for draw, on any profile (the simulator's naive live caller uses this).
        """
        self._log = []
        return self._log

    def stop_recording(self) -> None:
        """Stop logging passes."""
        self._log = None

    async def replay(self, passes: list[Pass]) -> float:
        """Charge a logged call again on the loop (no model work); returns seconds.

        Its own costs (and its idle cost), then its passes, drawn in the order computing it
        draws them.
        """
        total = self.call_cost() + self.idle_cost()
        factor = self._first_call_draw()
        self._fresh = False
        self.charged_s += total
        self.overhead_s += total
        await asyncio.sleep(total)
        for shape in passes:
            seconds = self.charge(shape) * factor
            extra = self.overhead(shape)
            self.charged_s += seconds + extra
            self.overhead_s += extra
            self.passes += 1
            total += seconds + extra
            await asyncio.sleep(seconds + extra)
        self._last_end = self._loop.time()
        return total

    def begin_call(self) -> None:
        """Hold virtual time while the worker starts the call."""
        self._loop.hold()

    def start_call(self) -> None:
        """The call's work starts on the worker: spend its own costs (it holds the loop).

        The idle cost, when the model sat idle long enough before it, is drawn now and spent
        with the call's first pass (a call refused before any pass pays none).
        """
        seconds = self.call_cost()
        self._cold_s, self._ran = self._idle_draw(), False
        self._factor = self._first_call_draw()
        self.charged_s += seconds
        self.overhead_s += seconds
        if seconds > 0:
            self._loop.spend(seconds)

    def end_call(self) -> None:
        """The call is over: the model is idle from now (if it ran); virtual time moves on."""
        if self._ran:
            self._last_end = self._loop.time()
            self._fresh = False
        self._cold_s, self._ran, self._factor = 0.0, False, 1.0
        self._loop.release()
