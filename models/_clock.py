"""The one clock: model calls read the time of the event loop that made them.

Deadlines are absolute times on the event loop's clock (``loop.time()``). The model runs on a
worker thread, so it reads that same clock through a :class:`Clock` the backend is given when
it starts on a loop (:class:`LoopClock`). Every forward pass goes through :meth:`Clock.timed`:
on a real clock it measures the pass; the simulator's virtual clock (``forethought.sims``)
instead charges the pass what its device profile predicts, on the same timeline the deadlines
are on. The decoder therefore has one implementation of "not started", "cut before the pass
that would overshoot" and "cancelled at the next pass boundary", whichever clock runs it.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

__all__ = ["Clock", "LoopClock", "MonotonicClock", "Pass", "PassKind"]

_T = TypeVar("_T")


class PassKind(enum.Enum):
    """What one forward pass does (the latency law has one line for each)."""

    PREFILL = "prefill"
    """Feeds new prompt tokens (all rows together)."""
    STEP = "step"
    """A decode pass: one token per row, plus any forced tokens (rows x tokens per row)."""


@dataclass(frozen=True, slots=True)
class Pass:
    """The shape of one forward pass: its kind, how many tokens it feeds, over how many rows."""

    kind: PassKind
    tokens: int
    rows: int = 1


@runtime_checkable
class Clock(Protocol):
    """A source of absolute time in seconds that model work is measured (or charged) on.

    ``now`` and ``timed`` are called from the model's worker thread; ``begin_call`` on the
    event loop just before a call is handed to that thread, ``start_call`` from the thread as
    its work starts, ``end_call`` from the thread when the call's work is over (a virtual clock
    keeps time still in between, except while a pass or the call's own costs are charged).
    """

    def now(self) -> float:
        """The current time in seconds."""
        ...

    def timed(self, work: Callable[[], _T], shape: Pass) -> tuple[_T, float]:
        """Run one forward pass of ``shape``; return its result and its seconds on this clock."""
        ...

    def begin_call(self) -> None:
        """A model call is about to start on the worker (called on the event loop)."""
        ...

    def start_call(self) -> None:
        """The call's work starts on the worker (called from the worker).

        A virtual clock charges the call's own costs here: the hop to the worker, tokenizing,
        the grammar set-up, reading the output.
        """
        ...

    def end_call(self) -> None:
        """The model call's work is over (called from the worker)."""
        ...


class _RealTime:
    """Shared behaviour of the real clocks: a pass takes the time it takes."""

    __slots__ = ()

    def now(self) -> float:
        raise NotImplementedError

    def timed(self, work: Callable[[], _T], shape: Pass) -> tuple[_T, float]:
        """Run ``work`` and measure it."""
        start = self.now()
        out = work()
        return out, self.now() - start

    def begin_call(self) -> None:
        """Nothing to do: real time passes by itself."""

    def start_call(self) -> None:
        """Nothing to do: the call's own work takes the time it takes."""

    def end_call(self) -> None:
        """Nothing to do: real time passes by itself."""


class LoopClock(_RealTime):
    """The clock of one event loop, readable from any thread.

    asyncio's default loops read :func:`time.monotonic`; a loop with its own ``time()`` (a
    virtual one) is read the same way, so a backend's deadlines are always the loop's.
    """

    __slots__ = ("_loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def now(self) -> float:
        """The loop's time."""
        return self._loop.time()


class MonotonicClock(_RealTime):
    """:func:`time.monotonic`, for a backend used without an event loop (scripts, benches)."""

    __slots__ = ()

    def now(self) -> float:
        """The current monotonic time in seconds."""
        return time.monotonic()
