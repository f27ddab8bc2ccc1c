"""A virtual-time asyncio loop: sleeping costs no wall time, and time moves only by sleeps.

The loop's clock starts at 0 and jumps straight to the next scheduled callback whenever nothing
is ready, like trio's ``MockClock(autojump_threshold=0)`` or SimPy's environment.

Model work runs for real on a worker thread while virtual time stands still, and is then
*charged* on this loop's timeline (:class:`ChargedClock`). Two thread-safe
calls make that exact:

* :meth:`VirtualTimeLoop.hold` (on the loop, when a call is handed to the worker) and
  :meth:`VirtualTimeLoop.release` (from the worker, when it is done): while anything holds the
  loop, it waits for real I/O (the worker's result) instead of jumping ahead;
* :meth:`VirtualTimeLoop.spend` (from the worker, which holds the loop): let ``seconds`` of
  virtual time pass -- timers in between run, an event may cancel the call -- then hold again
  and return. A forward pass costs exactly what it was charged, on the one clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
import threading
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
        loop = self.loop
        assert loop is not None
        if loop.held:
            # Model work is computing at this instant: run nothing until the worker posts
            # (its result, or the pass it charges), so the interleaving is the same every run.
            return super().select(None)
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if loop.step(timeout):
            return []
        return super().select(None)  # nothing scheduled: wait for real I/O


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual and jumps to the next timer."""

    def __init__(self) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self._virtual_now = 0.0
        self._lock = threading.Lock()
        self._holds = 0
        self._wakes: list[tuple[float, int, threading.Event]] = []
        self._order = itertools.count()

    def time(self) -> float:
        """Virtual seconds since the loop was made."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the clock forward (the selector does it when the loop would sleep)."""
        if seconds > 0:
            self._virtual_now += seconds

    @property
    def held(self) -> bool:
        """Whether model work holds virtual time still."""
        return self._holds > 0

    def step(self, timeout: float | None) -> bool:
        """Move time forward by at most ``timeout`` (None: no timer is due); False to wait.

        Called by the selector on the loop thread when nothing is ready. A worker charging a
        pass that ends strictly before the next timer is woken there instead (and holds the
        loop again); on a tie the timers run first, so the order never depends on real time.
        """
        with self._lock:
            if self._holds:
                return False
            if self._wakes:
                at = self._wakes[0][0]
                if timeout is None or at - self._virtual_now < timeout:
                    _, _, woken = heapq.heappop(self._wakes)
                    self._virtual_now = max(self._virtual_now, at)
                    self._holds += 1
                    woken.set()
                    return True
            if timeout is None:
                return False
            self.advance(timeout)
            return True

    def hold(self) -> None:
        """Keep virtual time still until :meth:`release` (call on the loop's thread)."""
        with self._lock:
            self._holds += 1

    def release(self) -> None:
        """Undo one :meth:`hold` (from any thread)."""
        with self._lock:
            self._holds -= 1
        self._wake_selector()

    def spend(self, seconds: float) -> None:
        """From a worker holding the loop: let ``seconds`` of virtual time pass, then resume.

        Blocks the calling thread until the loop reaches that time; the hold is given up
        meanwhile and taken again before this returns.
        """
        woken = threading.Event()
        with self._lock:
            at = self._virtual_now + max(seconds, 0.0)
            heapq.heappush(self._wakes, (at, next(self._order), woken))
            self._holds -= 1
        self._wake_selector()
        woken.wait()

    def _wake_selector(self) -> None:
        if not self.is_closed():
            self.call_soon_threadsafe(_nothing)


def _nothing() -> None:
    """A callback whose only job is to wake the selector."""


def run_virtual(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion on a fresh virtual-time loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
