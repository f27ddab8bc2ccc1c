"""A scripted ModelBackend for executor logic tests: each call costs a set virtual time."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from forethought.planner import (
    CancelSignal,
    Generation,
    GenerationStatus,
    LatencyModel,
    LatencyProfile,
    Prompt,
    Scores,
)
from forethought.policies import ActionForm, ActionSchema


class ScriptedBackend:
    """Answers from a script; ``score_s``/``live_s`` are charged with ``asyncio.sleep``.

    ``mode`` per tier: ``ok``, ``raise``, ``hang``, ``invalid`` (live returns an INVALID
    generation), ``cut`` (live stops at the deadline).
    """

    def __init__(
        self,
        *,
        score_s: float = 0.05,
        live_s: float = 0.2,
        prefill_s: float = 0.05,
        prefill_per_token_s: float = 0.0,
        step_s: float = 0.02,
        pick: int = 0,
        live_action: dict[str, Any] | None = None,
        score_mode: str = "ok",
        live_mode: str = "ok",
    ) -> None:
        # The (fixed) latency law the executor consults; the script charges score_s / live_s.
        self._latency = LatencyModel(
            LatencyProfile(
                prefill_base_s=prefill_s,
                prefill_per_token_s=prefill_per_token_s,
                step_base_s=step_s,
                step_per_row_s=0.0,
                spread95=1.0,
            ),
            fixed=True,
        )
        self.score_s, self.live_s = score_s, live_s
        self.pick = pick
        self.live_action = live_action
        self.score_mode, self.live_mode = score_mode, live_mode
        self.calls: list[str] = []

    @property
    def model_id(self) -> str:
        return "scripted"

    @property
    def latency(self) -> LatencyModel:
        return self._latency

    async def prepare(self, schema: ActionSchema) -> None:
        self.calls.append("prepare")

    async def _charge(self, seconds: float, mode: str) -> None:
        if mode == "raise":
            raise RuntimeError("scripted model failure")
        if mode == "hang":
            await asyncio.Event().wait()
        await asyncio.sleep(seconds)

    async def score(
        self,
        prompt: Prompt,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        self.calls.append("score")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await self._charge(self.score_s, self.score_mode)
        scores = tuple(1.0 if i == self.pick else 0.0 for i in range(len(candidates)))
        return Scores(GenerationStatus.DONE, scores, t0, loop.time())

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
        self.calls.append("live")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if self.live_mode == "cut":
            await asyncio.sleep(max(0.0, deadline - t0))
            return Generation(
                GenerationStatus.DEADLINE, None, '{"a":"', 5, 5, 3, 3, t0, t0, loop.time()
            )
        await self._charge(self.live_s, self.live_mode)
        if self.live_mode == "invalid":
            return Generation(
                GenerationStatus.INVALID, None, '{"a":"fly"}', 5, 5, 5, 3, t0, t0, loop.time()
            )
        action = schema.validate(self.live_action or {})
        return Generation(
            GenerationStatus.DONE, action, schema.compact(action), 5, 5, 5, 3, t0, t0, loop.time()
        )

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
        self.calls.append("batch")
        return [await self.generate(Prompt(context, e), schema, deadline=deadline) for e in events]
