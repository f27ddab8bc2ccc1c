"""How many threads torch decodes with: fewer when the machine is too busy for them to help.

torch runs each operator on all its intra-op threads, and every operator ends at a barrier
where the threads wait for each other. On a machine whose cores are busy with other work, one
of them is often descheduled, and every barrier waits for it: a small model's forward pass has
hundreds of operators, so a call slows by an order of magnitude. Measured on the project's
2-core VM with a load average of 11-15: one 16-token call with 4 new tokens took 26.8 and
26.2 s on 2 threads against 2.5 and 1.1 s on 1 (interleaved), which made loading and warming
the embedded model take minutes. :func:`choose_threads` times one small call both ways when the
model is loaded and keeps the faster (cutting the slow one short); on a quiet machine that is
every core, as before.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from forethought.policies import DeadlinePassed

__all__ = ["ThreadChoice", "choose_threads", "pin_threads"]

_log = logging.getLogger("forethought.model")

_CLEAR = 1.5
"""Fewer threads are kept only when they are this many times faster (not noise)."""


@dataclass(frozen=True, slots=True)
class ThreadChoice:
    """The threads kept, and the two timings that chose them."""

    threads: int
    all_threads_s: float
    one_thread_s: float
    kept_all: bool = True
    """False when one thread was kept because it was clearly faster (a busy machine)."""


def choose_threads(call: Callable[[float], object]) -> ThreadChoice:
    """Time ``call`` on one thread and on torch's threads; keep one if it is clearly faster.

    ``call(deadline)`` runs one short model call, abandoned (``DeadlinePassed``) at ``deadline``
    (monotonic seconds). One thread goes first (an untimed call, then a timed one), so the
    many-thread call can be cut once it is slower than one thread by the margin: on a busy
    machine the choice costs a few one-thread calls, not a many-thread one. The choice is logged
    when it drops threads.
    """
    threads = torch.get_num_threads()
    if threads <= 1:
        return ThreadChoice(threads, math.nan, math.nan)
    torch.set_num_threads(1)
    try:
        call(math.inf)  # untimed: first-call costs are no thread count's
        t0 = time.monotonic()
        call(math.inf)
        one = time.monotonic() - t0
    finally:  # a call that raises leaves torch as it found it
        torch.set_num_threads(threads)
    t0 = time.monotonic()
    # Cut once slower than one thread by the margin: no need to see the end.
    with contextlib.suppress(DeadlinePassed):
        call(t0 + one * _CLEAR)
    many = time.monotonic() - t0
    if one * _CLEAR < many:
        torch.set_num_threads(1)
        _log.warning(
            "torch decodes on 1 thread, not %d: a call took %.2f s on one thread and was cut at "
            "%.2f s on %d (the cores are busy with other work, and threads waiting for each "
            "other cost more than they share)",
            threads,
            one,
            many,
            threads,
        )
        return ThreadChoice(1, many, one, kept_all=False)
    return ThreadChoice(threads, many, one)


def pin_threads(threads: int) -> ThreadChoice:
    """Decode on ``threads`` threads, as given (no timing): a choice made by the caller."""
    torch.set_num_threads(threads)
    return ThreadChoice(threads, math.nan, math.nan)
