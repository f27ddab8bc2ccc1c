"""A real model backend whose next planner call fails in a named way: a fault to test against.

:class:`FaultyBackend` wraps a real backend. The model really runs; only its result is replaced
(or the call raises), so the planner sees exactly what a misbehaving backend hands it. The
faults, one of :data:`INJECTED_FAULTS`:

* ``exception``: an ``OSError`` (not one of ours) raised instead of generating;
* ``grammar``: the grammar compiler's error (:class:`~forethought.policies.BackendError`);
* ``malformed``: a "done" action that fails the schema;
* ``truncated``: JSON cut short;
* ``runaway``: whitespace until the token limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Self

from pydantic import BaseModel

from forethought.models import (
    CancelSignal,
    Generation,
    GenerationStatus,
    LatencyPredictor,
    ModelBackend,
    Scores,
)
from forethought.policies import ActionSchema, BackendError

__all__ = ["INJECTED_FAULTS", "FaultyBackend"]

INJECTED_FAULTS = ("exception", "grammar", "malformed", "truncated", "runaway")
"""The faults :meth:`FaultyBackend.arm` takes."""


class FaultyBackend:
    """A real backend whose next planner call fails as armed.

    :meth:`arm` names the fault, one of :data:`INJECTED_FAULTS`: ``exception`` (an ``OSError``,
    not one of ours), ``grammar`` (the grammar compiler's :class:`BackendError`), ``malformed`` (a
    "done" action that fails the schema), ``truncated`` (JSON cut short), ``runaway``
    (whitespace until the token limit). The model really runs; only its result is replaced, so
    the planner sees exactly what a misbehaving backend hands it. Only calls that carry a cancel
    signal (the planner's) take a fault; the live tiers' go through untouched unless ``live`` is
    set when arming.

    Args:
        inner: the real backend (started and stopped with this one).

    """

    def __init__(self, inner: ModelBackend) -> None:
        self.inner = inner
        """The real backend."""
        self._armed: tuple[str, bool] | None = None
        self.in_call = asyncio.Event()
        """Set while a planner call runs (the moment to kill or stop the worker)."""
        self.injected: dict[str, int] = {}
        """How many of each fault were injected so far."""

    async def __aenter__(self) -> Self:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.inner.__aexit__(*exc_info)

    @property
    def model_id(self) -> str:
        """The real model's."""
        return self.inner.model_id

    @property
    def latency(self) -> LatencyPredictor:
        """The real model's."""
        return self.inner.latency

    def arm(self, kind: str, *, live: bool = False) -> None:
        """Fail the next planner call (or any call, with ``live``) as ``kind``."""
        if kind not in INJECTED_FAULTS:
            raise ValueError(f"unknown fault {kind!r}: choose one of {INJECTED_FAULTS}")
        self._armed = (kind, live)

    def _take(self, cancel: CancelSignal | None) -> str | None:
        if self._armed is None or (cancel is None and not self._armed[1]):
            return None
        kind, self._armed = self._armed[0], None
        self.injected[kind] = self.injected.get(kind, 0) + 1
        return kind

    async def prepare(self, schema: ActionSchema) -> None:
        """The real model's."""
        await self.inner.prepare(schema)

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
        """The real model's generation, failed as armed."""
        fault = self._take(cancel)
        if fault == "exception":
            raise OSError(5, "injected: input/output error")
        if fault == "grammar":
            raise BackendError("injected: the grammar matcher refused the model's token")
        if cancel is not None:
            self.in_call.set()
        try:
            gens = await self.inner.generate(
                context,
                events,
                schema,
                deadline=deadline,
                cancel=cancel,
                max_new_tokens=max_new_tokens,
            )
        finally:
            self.in_call.clear()
        return gens if fault is None else [_spoil(g, fault, schema) for g in gens]

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
        """The real model's scores (faults are injected into generation)."""
        return await self.inner.score(
            context, event, candidates, schema, deadline=deadline, cancel=cancel
        )


def _spoil(g: Generation, fault: str, schema: ActionSchema) -> Generation:
    """What a misbehaving backend would hand back instead of ``g``."""
    if fault == "malformed":
        # "Done", with an action object the schema forbids (built without validation).
        bad = schema.model.model_construct(action="fly", speed=99.0)
        return replace(g, status=GenerationStatus.DONE, action=bad, text='{"action":"fly"}')
    if fault == "truncated":
        return replace(g, status=GenerationStatus.INVALID, action=None, text=g.text[:7])
    return replace(g, status=GenerationStatus.LENGTH, action=None, text="{" + " " * 4000)
