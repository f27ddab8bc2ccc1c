"""The one clock model calls are measured against.

Deadlines are absolute times on the caller's clock. The runtime's clock is the event loop's
(``loop.time()``, which is :func:`time.monotonic` on asyncio's default loops), so the backend,
which runs model work on a worker thread, reads the same clock through this protocol. A virtual
clock (the simulator's) implements the same two members.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "MonotonicClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of absolute time in seconds; must be safe to read from any thread."""

    def now(self) -> float:
        """The current time in seconds."""
        ...


class MonotonicClock:
    """:func:`time.monotonic`: the clock behind ``asyncio``'s default event loops."""

    __slots__ = ()

    def now(self) -> float:
        """The current monotonic time in seconds."""
        return time.monotonic()
