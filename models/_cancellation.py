"""Cancellation that neither gets lost nor swallows the caller's: two asyncio pitfalls, mended.

**A cancellation a library swallowed, raised again where a long-lived loop turns.**
On Python 3.11, :func:`asyncio.wait_for` returns its result instead of raising when the
caller's cancellation lands in the same loop step as the awaited future's result
(cpython#86296, fixed by 3.12's rewrite). aiomqtt and nats-py wait that way on every call
(a publish's PUBACK, a KV watch's next entry), so a task cancelled at that moment goes on as
if nothing happened. A loop that then awaits again -- the bus's reconnect loop, the status
refresher, the fleet's watch -- runs for ever, and the TaskGroup that cancelled it waits for
ever: the agent never stops.

The cancellation is not gone, only undelivered: the task still counts the request
(:meth:`asyncio.Task.cancelling`). Structured code that means to swallow one calls
:meth:`asyncio.Task.uncancel`; no code of ours does. So a task whose count is above zero at
a loop's turn has lost a cancellation, and :func:`raise_lost_cancel` delivers it there.
Inside :func:`asyncio.timeout` the same holds: the timeout's cancel, delivered late, still
becomes its ``TimeoutError``.

**An owner waiting for a task it cancelled.** ``with suppress(CancelledError): await task``
cannot tell the task's CancelledError from one aimed at the owner (a timeout around an
agent's exit): it swallows both, and the owner's timeout never fires. :func:`wait_cancelled`
waits with :func:`asyncio.wait`, which raises neither, and then raises the task's own failure.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["raise_lost_cancel", "wait_cancelled"]


def raise_lost_cancel() -> None:
    """Raise :class:`asyncio.CancelledError` if the running task was asked to stop.

    Call it once a turn in a loop that awaits a library using :func:`asyncio.wait_for`
    (aiomqtt, nats-py). Outside a task, or in a task nobody cancelled, it does nothing.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > 0:
        raise asyncio.CancelledError


async def wait_cancelled(task: asyncio.Task[Any]) -> None:
    """Wait for ``task``, already cancelled, to end; raise its failure if it failed.

    Its cancellation is expected and not raised; a cancellation of the caller while waiting
    is raised, never taken for the task's.
    """
    await asyncio.wait([task])
    if not task.cancelled():
        task.result()
