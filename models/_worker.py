"""ModelWorker: the one thread that owns a model, and the order calls reach it in.

Forward passes of one model do not overlap usefully (torch already spreads one pass over the
cores), so calls run one at a time: a call holds the worker from the moment it is handed over
until the worker is done with it, even when its caller stopped waiting (a cancelled caller sets
the call's cancel signal, which the decoder honours before its next pass). The outcome is
posted to the event loop *before* the clock is told the call ended, so a virtual clock delivers
it at the instant the work ended, and the next caller starts exactly then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from forethought.policies import NotStarted

from ._backend import CancelSignal
from ._clock import Clock

__all__ = ["ModelWorker"]

_T = TypeVar("_T")


class ModelWorker:
    """One worker thread and the lock that queues calls for it (started on a loop)."""

    def __init__(self, name: str = "forethought-model") -> None:
        self._name = name
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._busy: asyncio.Lock | None = None

    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """The thread (made on first use)."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=self._name
            )
        return self._pool

    def start(self) -> None:
        """Accept calls from the running loop."""
        self._busy = asyncio.Lock()

    async def stop(self) -> None:
        """Wait for the call under way (its caller may have given up on it), then close.

        Waiting on the loop matters: under a virtual clock the call under way needs the loop
        to let its pass's time run, so blocking the loop thread on the worker would deadlock.
        """
        busy = self._busy
        if busy is not None:
            async with busy:
                self._busy = None
        self.close()

    def close(self) -> None:
        """Stop the thread after the call under way; refuse further calls."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._busy = None

    async def call(self, fn: Callable[[], _T], cancel: CancelSignal, clock: Clock) -> _T:
        """Run ``fn`` on the thread once every earlier call is done; ``clock`` is told when."""
        busy = self._busy
        if busy is None:
            raise NotStarted("the model backend")
        await busy.acquire()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()

        def job() -> None:
            try:
                clock.start_call()
                out = fn()
            except BaseException as exc:
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, out, None)
            finally:
                clock.end_call()

        try:
            clock.begin_call()
            self.pool().submit(job)
        except BaseException:
            busy.release()
            raise
        # The model is free when the worker is done, not when the caller stops waiting.
        future.add_done_callback(lambda _: busy.release())
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The thread cannot be interrupted mid-pass; it stops before the next one.
            cancel.cancel()
            future.add_done_callback(_retrieve)
            raise


def _settle(future: asyncio.Future[Any], out: Any, exc: BaseException | None) -> None:
    """Hand a worker's outcome to the awaiting caller (on the loop)."""
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(out)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark an abandoned call's outcome as seen (its caller was cancelled)."""
    if not future.cancelled():
        future.exception()
