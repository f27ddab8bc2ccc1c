"""Waiting for a condition that has no event to wait on: poll it, up to a limit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["until"]


async def until(cond: Callable[..., object], within: float) -> float | None:
    """Seconds until ``cond()`` holds, or None after ``within`` seconds.

    Polled every 5 ms: planner health and a bus's connection have no event to wait on.
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while not cond():  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            return loop.time() - t0
    return None
