"""Letting time pass in a test that runs on the virtual-time loop (``forethought.sims._vloop``).

A test on virtual time means "this much of the loop's time goes by, its timers running in
between": that costs no wall time and is exact. :func:`elapse` says so, and refuses to run on
a real loop, where the same call would be a fixed wait on the wall clock.
"""

from __future__ import annotations

import asyncio

from forethought.sims._vloop import VirtualTimeLoop

__all__ = ["elapse"]


async def elapse(seconds: float) -> None:
    """Let ``seconds`` of the running virtual loop's time pass, its timers running meanwhile.

    Raises:
        RuntimeError: the running loop is not a :class:`VirtualTimeLoop`.

    """
    if not isinstance(asyncio.get_running_loop(), VirtualTimeLoop):
        raise RuntimeError("elapse() lets virtual time pass: run the test on a VirtualTimeLoop")
    # On the virtual loop a sleep is a timer the clock jumps to: no wall time passes.
    await asyncio.sleep(seconds)
