"""Waiting for a condition that has no event to wait on: poll it, up to a limit.

For a test, a condition polled with a deadline says what it waits for and waits no longer
than it must (a fixed sleep waits too long on a quiet machine and too short on a loaded one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

__all__ = ["until", "until_holds", "until_holds_blocking"]

_EVERY_S = 0.005
"""How often a condition is polled: planner health and a bus's connection have no event."""


async def until(cond: Callable[..., object], within: float) -> float | None:
    """Seconds until ``cond()`` holds, or None after ``within`` seconds.

    Polled every 5 ms: planner health and a bus's connection have no event to wait on.
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while not cond():  # noqa: ASYNC110
                await asyncio.sleep(_EVERY_S)
            return loop.time() - t0
    return None


async def until_holds(
    cond: Callable[[], object | Awaitable[object]],
    within: float,
    what: str,
    *,
    every_s: float = _EVERY_S,
) -> float:
    """Seconds until ``cond()`` holds; AssertionError naming ``what`` after ``within`` seconds.

    ``cond`` may be a coroutine function (a condition read over the network, say); one that
    costs the other side work (a read of a whole bucket) is polled less often: ``every_s``.
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        async with asyncio.timeout(within):
            while True:
                got = cond()
                if isinstance(got, Awaitable):
                    got = await got
                if got:
                    return loop.time() - t0
                await asyncio.sleep(every_s)
    except TimeoutError:
        raise AssertionError(f"timed out after {within:g} s waiting for {what}") from None


def until_holds_blocking(
    cond: Callable[[], object], within: float, what: str, *, every_s: float = _EVERY_S
) -> float:
    """:func:`until_holds` for a thread with no event loop (a test driving subprocesses)."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > within:
            raise AssertionError(f"timed out after {within:g} s waiting for {what}")
        time.sleep(every_s)
    return time.monotonic() - t0
