"""ScriptedBackend: a ModelBackend that answers from a script, for tests (ours and users').

Like httpx's ``MockTransport``: the real planner and executor run against it unchanged, while
what the "model" answers and how long it takes are set by the test. Time is spent with
``asyncio.sleep`` on the running loop, so under a virtual-time loop a test of deadline
arithmetic runs in microseconds and is exact.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

from pydantic import BaseModel

from forethought.policies import ActionSchema, BackendError, NotStarted

from .._backend import CancelSignal, Generation, GenerationStatus, Scores
from .._latency import LatencyModel, LatencyProfile

__all__ = ["ScriptMode", "ScriptedBackend"]


class ScriptMode(enum.Enum):
    """How a scripted call behaves."""

    OK = "ok"
    """Spend the set time, then answer."""
    RAISE = "raise"
    """Raise a BackendError at once (a crashed model)."""
    HANG = "hang"
    """Never answer (a stuck model): only the caller's timeout ends the call."""
    INVALID = "invalid"
    """Generate: answer an INVALID generation (output that fails validation)."""
    CUT = "cut"
    """Generate: run until the deadline and stop there (DEADLINE)."""


class ScriptedBackend:
    """Answers from a script; each call costs a set time on the loop's clock.

    Args:
        score_s: what one score call costs.
        live_s: what one generate call costs (a batch costs the same: one decode).
        prefill_s, prefill_per_token_s, step_s: the fixed latency law it reports, which the
            executor's fit checks and the planner's ranking read.
        pick: the candidate index score calls answer.
        action: what generate answers (validated against the caller's schema), or a function
            of the event text giving it.
        score_mode, live_mode: how score and generate calls behave (:class:`ScriptMode`).

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
        action: Mapping[str, Any] | Callable[[str], Mapping[str, Any]] | None = None,
        score_mode: ScriptMode | str = ScriptMode.OK,
        live_mode: ScriptMode | str = ScriptMode.OK,
        model_id: str = "scripted",
    ) -> None:
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
        self.action = action
        self.score_mode = ScriptMode(score_mode)
        self.live_mode = ScriptMode(live_mode)
        self._model_id = model_id
        self._started = False
        self.calls: list[str] = []

    async def __aenter__(self) -> Self:
        self._started = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._started = False

    @property
    def model_id(self) -> str:
        """The name reports show."""
        return self._model_id

    @property
    def latency(self) -> LatencyModel:
        """The fixed latency law given at construction."""
        return self._latency

    def _check_started(self) -> None:
        if not self._started:
            raise NotStarted("ScriptedBackend")

    async def prepare(self, schema: ActionSchema) -> None:
        """Nothing to compile; recorded in :attr:`calls`."""
        self._check_started()
        self.calls.append("prepare")

    async def _spend(self, seconds: float, mode: ScriptMode) -> None:
        if mode is ScriptMode.RAISE:
            raise BackendError("scripted model failure")
        if mode is ScriptMode.HANG:
            await asyncio.Event().wait()
        await asyncio.sleep(seconds)

    async def score(
        self,
        context: str,
        event: str,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """Spend ``score_s``, then favour candidate ``pick``."""
        self._check_started()
        self.calls.append("score")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await self._spend(self.score_s, self.score_mode)
        scores = tuple(1.0 if i == self.pick else 0.0 for i in range(len(candidates)))
        return Scores(GenerationStatus.DONE, scores, t0, loop.time())

    async def generate(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """Spend ``live_s`` once for the batch, then answer each event per the script."""
        self._check_started()
        self.calls.append("generate" if len(events) == 1 else "batch")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if self.live_mode is ScriptMode.CUT:
            await asyncio.sleep(max(0.0, deadline - t0))
            now = loop.time()
            return [
                Generation(GenerationStatus.DEADLINE, None, '{"a":"', 5, 5, 3, 3, t0, t0, now)
                for _ in events
            ]
        await self._spend(self.live_s, self.live_mode)
        now = loop.time()
        if self.live_mode is ScriptMode.INVALID:
            return [
                Generation(GenerationStatus.INVALID, None, '{"a":"fly"}', 5, 5, 5, 3, t0, t0, now)
                for _ in events
            ]
        out = []
        for event in events:
            wanted = self.action(event) if callable(self.action) else (self.action or {})
            action = schema.validate(dict(wanted))
            text = schema.compact(action)
            out.append(Generation(GenerationStatus.DONE, action, text, 5, 5, 5, 3, t0, t0, now))
        return out
