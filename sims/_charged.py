"""ChargedBackend: real model calls that cost *virtual* time, as a device profile predicts.

On the virtual-time loop a call runs for real (so actions are real) while virtual time stands
still; then the call is charged what the latency law predicts for the tokens it actually
prefilled and the passes it actually made, on the chosen device profile. Deadlines and
cancellation are applied to that charged timeline exactly as the decoder applies them to real
time: not started when the prefill cannot fit, cut before the pass that would overshoot,
stopped at the next pass boundary when cancelled.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import replace

from pydantic import BaseModel

from forethought.planner import (
    CancelSignal,
    Generation,
    GenerationStatus,
    LatencyModel,
    LatencyProfile,
    Prompt,
    Scores,
    TransformersBackend,
)
from forethought.policies import ActionForm, ActionSchema, DeadlinePassed

__all__ = ["ChargedBackend"]


def _far() -> float:
    return time.monotonic() + 3600.0


class ChargedBackend:
    """Wraps a loaded TransformersBackend; charges each call's predicted time on the loop.

    Args:
        inner: the real backend (loaded).
        profile: the simulated device.
        plain: run generations without prefix reuse or jump-forward (the naive live server).

    """

    def __init__(
        self, inner: TransformersBackend, profile: LatencyProfile, *, plain: bool = False
    ) -> None:
        self._inner = inner
        self._latency = LatencyModel(profile, fixed=True)
        self._plain = plain
        self.charged_s = 0.0
        self.calls = 0

    @property
    def model_id(self) -> str:
        """The real model's id."""
        return self._inner.model_id

    @property
    def latency(self) -> LatencyModel:
        """The fixed latency law of the simulated device."""
        return self._latency

    async def prepare(self, schema: ActionSchema) -> None:
        """Compile the grammar (free: it happens before the replay starts)."""
        self._inner.prepare_sync(schema)

    async def _charge(
        self,
        prefill_s: float,
        step_s: float,
        passes: int,
        deadline: float,
        cancel: CancelSignal | None,
    ) -> tuple[GenerationStatus, float]:
        """Spend the call's virtual time; returns how it ended and when it started."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        if start + prefill_s > deadline:
            return GenerationStatus.NOT_STARTED, start
        fit = math.floor((deadline - start - prefill_s) / step_s + 1e-9) if step_s > 0 else passes
        status = GenerationStatus.DONE
        if passes > fit:
            passes, status = fit, GenerationStatus.DEADLINE
        stop = asyncio.Event()
        if cancel is not None:
            cancel.on_cancel(stop.set)
        total = prefill_s + passes * step_s
        try:
            await asyncio.wait_for(stop.wait(), total)
        except TimeoutError:
            self.charged_s += total
            return status, start
        # Cancelled: the pass under way finishes (a prefill cannot be interrupted).
        elapsed = loop.time() - start
        done = (
            prefill_s
            if elapsed <= prefill_s
            else prefill_s + math.ceil((elapsed - prefill_s) / step_s) * step_s
        )
        await asyncio.sleep(max(0.0, start + done - loop.time()))
        self.charged_s += done
        return GenerationStatus.CANCELLED, start

    @staticmethod
    def _passes(g: Generation) -> int:
        return max(g.output_tokens - g.forced_tokens - 1, 0)

    def _retime(self, g: Generation, status: GenerationStatus, start: float) -> Generation:
        now = asyncio.get_running_loop().time()
        if status is not GenerationStatus.DONE:
            return replace(
                g,
                status=status,
                action=None,
                started_at=start,
                first_token_at=None,
                finished_at=now,
            )
        return replace(g, started_at=start, first_token_at=now, finished_at=now)

    async def generate(
        self,
        prompt: Prompt,
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
        form: ActionForm | None = None,
    ) -> Generation:
        """One real generation, charged on the virtual clock."""
        now = asyncio.get_running_loop().time()
        if now >= deadline:
            raise DeadlinePassed(deadline, now)
        self.calls += 1
        # Computed the fast way either way; a plain server is *charged* its full prompt and
        # one pass per output token, which is what it would have spent.
        g = self._inner.generate_sync(
            prompt, schema, deadline=_far(), form=form, max_new_tokens=max_new_tokens
        )
        lat = self._latency
        prefill_tokens = g.prompt_tokens if self._plain else g.prefill_tokens
        passes = max(g.output_tokens - 1, 0) if self._plain else self._passes(g)
        status, start = await self._charge(
            lat.prefill(prefill_tokens).p50, lat.step(1).p50, passes, deadline, cancel
        )
        if status is GenerationStatus.DONE and not g.ok:
            status = g.status
        return self._retime(g, status, start)

    async def generate_batch(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """One real batch, charged on the virtual clock."""
        self.calls += 1
        gens = self._inner.generate_batch_sync(
            context, events, schema, deadline=_far(), max_new_tokens=max_new_tokens
        )
        lat = self._latency
        prefill = lat.prefill(sum(g.prefill_tokens for g in gens)).p50
        passes = max((self._passes(g) for g in gens), default=0)
        status, start = await self._charge(
            prefill, lat.step(len(gens)).p50, passes, deadline, cancel
        )
        out = []
        for g in gens:
            s = status if status is not GenerationStatus.DONE else g.status
            out.append(self._retime(g, s, start))
        return out

    async def score(
        self,
        prompt: Prompt,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """One real scoring pass, charged on the virtual clock."""
        self.calls += 1
        scores = self._inner.score_sync(prompt, candidates, schema, deadline=_far())
        enc = self._inner.prompts
        _, own = enc.encode(prompt, schema, ActionForm.COMPACT)
        tokens = len(own) + sum(
            len(enc.encode_action(schema.compact(schema.validate(c)))) for c in candidates
        )
        status, start = await self._charge(
            self._latency.prefill(tokens).p50, 0.0, 0, deadline, cancel
        )
        now = asyncio.get_running_loop().time()
        if status is not GenerationStatus.DONE:
            return Scores(status, None, start, now)
        return Scores(scores.status, scores.scores, start, now)
