"""A virtual-time asyncio loop: sleeping costs no wall time, and time moves only by sleeps.

The loop's clock starts at 0 and jumps straight to the next scheduled callback whenever nothing
is ready, like trio's ``MockClock(autojump_threshold=0)`` or SimPy's environment. I/O and
``call_soon_threadsafe`` still work (the real selector is polled), but a wait on them with
nothing scheduled blocks in real time while virtual time stands still -- which is how a
simulated replay runs real model calls and then *charges* their predicted time.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["VirtualTimeLoop", "run_virtual"]

_T = TypeVar("_T")


class _JumpingSelector(selectors.DefaultSelector):
    """Polls the real selector; advances the loop's virtual clock instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # nothing scheduled: wait for real I/O (a worker thread's result)
            return super().select(None)
        assert self.loop is not None
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual and jumps to the next timer."""

    def __init__(self) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self._virtual_now = 0.0

    def time(self) -> float:
        """Virtual seconds since the loop was made."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the clock forward (the selector does it when the loop would sleep)."""
        if seconds > 0:
            self._virtual_now += seconds


def run_virtual(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
