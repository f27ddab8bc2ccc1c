"""The model gate: urgent callers (the executor) take the model from background work at once.

The planner runs each batch inside :meth:`ModelGate.background`, which hands it a cancel
signal. An urgent caller entering :meth:`ModelGate.urgent` sets that signal -- the worker
stops before its next forward pass -- and waits only for that pass to end. Background work
then waits until no urgent caller is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._backend import CancelSignal

__all__ = ["ModelGate"]


class ModelGate:
    """Priority access to one model: urgent callers preempt background batches."""

    def __init__(self) -> None:
        self._urgent = 0
        self._no_urgent = asyncio.Event()
        self._no_urgent.set()
        self._background_done = asyncio.Event()
        self._background_done.set()
        self._background_cancel: CancelSignal | None = None
        self.preemptions = 0

    @property
    def urgent_waiting(self) -> bool:
        """True while an urgent caller holds or waits for the model."""
        return self._urgent > 0

    @asynccontextmanager
    async def urgent(self) -> AsyncIterator[None]:
        """Hold the model for an event's decision, cancelling background work in flight."""
        self._urgent += 1
        self._no_urgent.clear()
        try:
            if self._background_cancel is not None:
                self._background_cancel.cancel()
                self.preemptions += 1
            await self._background_done.wait()
            yield
        finally:
            self._urgent -= 1
            if self._urgent == 0:
                self._no_urgent.set()

    @asynccontextmanager
    async def background(self) -> AsyncIterator[CancelSignal]:
        """Hold the model for background work once no urgent caller is left."""
        while self._urgent:
            await self._no_urgent.wait()
        cancel = CancelSignal()
        self._background_cancel = cancel
        self._background_done.clear()
        try:
            yield cancel
        finally:
            self._background_cancel = None
            self._background_done.set()
