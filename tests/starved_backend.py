"""A scripted backend that answers past its call's deadline, as on a starved CPU."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from forethought.models import Scores, ScriptedBackend
from forethought.policies import ActionSchema


class StarvedBackend(ScriptedBackend):
    """Scores as quickly as it promises, then holds the loop until past the call's deadline.

    What a starved CPU does to a call that fits its budget: the loop runs nothing else, and
    the answer comes after the deadline. A busy wait on the loop's own clock, so the test
    waits for exactly that and no fixed time. Only the first ``starve`` calls are late.
    """

    def __init__(self, *, starve: int = 1, **script: Any) -> None:
        super().__init__(**script)
        self.starve = starve

    async def score(
        self,
        context: str,
        event: str,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: Any = None,
    ) -> Scores:
        scores = await super().score(context, event, candidates, schema, deadline=deadline)
        if self.starve > 0:
            self.starve -= 1
            loop = asyncio.get_running_loop()
            while loop.time() <= deadline + 0.01:
                pass
        return scores
