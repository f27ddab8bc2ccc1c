"""Why the event loop wakes late beside the planner: the switch interval, or the CPU.

    .venv/bin/python benchmarks/loop_lag_probe.py

The loop sleeps 1 ms, 1,500 times, and counts how late it woke, with nothing beside it, with
a thread running pure Python (as the planner's decode loop does between torch calls: sampling,
the grammar's mask), and with a thread running torch matrix products (which release the GIL),
each under ``sys.setswitchinterval`` 5 ms (CPython's default) and 0.5 ms. A thread that holds
the interpreter makes every wake-up of the loop wait up to one switch interval; a torch thread
that keeps the cores busy delays it by the CPU's scheduling instead, whatever the interval.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable


def _pure_python(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i


def _torch(stop: threading.Event) -> None:
    import torch  # noqa: PLC0415 - only this probe needs it

    a = torch.randn(256, 256)
    while not stop.is_set():
        a = (a @ a).tanh()


async def _lag(n: int = 1500) -> tuple[float, float]:
    """The loop's wake-up lag for 1 ms sleeps: p50 and p99, in ms."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    for _ in range(n):
        t = loop.time()
        await asyncio.sleep(0.001)
        late.append(loop.time() - t - 0.001)
    late.sort()
    return late[len(late) // 2] * 1e3, late[int(len(late) * 0.99)] * 1e3


def main() -> None:
    beside: list[tuple[str, Callable[[threading.Event], None] | None]] = [
        ("nothing", None),
        ("a pure-Python thread", _pure_python),
        ("a torch thread", _torch),
    ]
    for interval in (0.005, 0.0005):
        sys.setswitchinterval(interval)
        for name, work in beside:
            stop = threading.Event()
            thread = None
            if work is not None:
                thread = threading.Thread(target=work, args=(stop,))
                thread.start()
                time.sleep(0.2)
            p50, p99 = asyncio.run(_lag())
            stop.set()
            if thread is not None:
                thread.join()
            print(
                f"switchinterval {interval * 1e3:g} ms, {name:22s}: "
                f"loop lag p50 {p50:.3f} ms, p99 {p99:.3f} ms"
            )


if __name__ == "__main__":
    main()
