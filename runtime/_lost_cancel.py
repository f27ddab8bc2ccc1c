"""A cancellation a library swallowed, raised again where a long-lived loop turns.

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
"""

from __future__ import annotations

import asyncio

__all__ = ["raise_lost_cancel"]


def raise_lost_cancel() -> None:
    """Raise :class:`asyncio.CancelledError` if the running task was asked to stop.

    Call it once a turn in a loop that awaits a library using :func:`asyncio.wait_for`
    (aiomqtt, nats-py). Outside a task, or in a task nobody cancelled, it does nothing.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > 0:
        raise asyncio.CancelledError
