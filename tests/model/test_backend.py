"""TransformersBackend through its async API, on the tiny model."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from forethought.models import (
    CancelSignal,
    GenerationStatus,
    LoopClock,
    ModelBackend,
    TransformersBackend,
)
from forethought.models._clock import Pass
from forethought.policies import ActionSchema, NotStarted

pytestmark = pytest.mark.model

_T = TypeVar("_T")


async def test_async_lifecycle_and_calls(tiny_model_dir: Path, robot_schema: ActionSchema) -> None:
    backend = TransformersBackend(model=str(tiny_model_dir), device="cpu", dtype="float32")
    assert isinstance(backend, ModelBackend)
    async with backend:
        await backend.prepare(robot_schema)
        loop = asyncio.get_running_loop()
        (g,) = await backend.generate("ctx", ["event"], robot_schema, deadline=loop.time() + 60)
        assert g.status in (GenerationStatus.DONE, GenerationStatus.LENGTH)
        if g.ok:
            assert robot_schema.parse(g.text) == g.action
        gens = await backend.generate(
            "ctx", ["a", "b", "c"], robot_schema, deadline=loop.time() + 60
        )
        assert len(gens) == 3
        candidates = robot_schema.enumerate(10)
        assert candidates is not None
        scores = await backend.score(
            "ctx", "event", candidates, robot_schema, deadline=loop.time() + 60
        )
        assert scores.status is GenerationStatus.DONE
        assert scores.scores is not None
        assert len(scores.scores) == len(candidates)
        assert scores.best == max(range(len(candidates)), key=lambda i: scores.scores[i])
        assert backend.stats()["calls"] >= 3


class _HeldClock(LoopClock):
    """The loop's clock, except that once armed it holds the next forward pass until released.

    It lets a test cancel a call while the worker is surely mid-call, however fast the
    machine decodes (a fixed sleep raced a fast CI machine that finished all 450 tokens).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.armed = False
        self.held = False
        self.passes_after_release = 0
        self.holding = asyncio.Event()  # set on the loop once the worker is held
        self.release = threading.Event()

    def timed(self, work: Callable[[], _T], shape: Pass) -> tuple[_T, float]:
        if self.armed:
            if not self.held:
                self.held = True
                self._loop.call_soon_threadsafe(self.holding.set)
                self.release.wait(timeout=30)
            else:
                self.passes_after_release += 1
        return super().timed(work, shape)

    def end_call(self) -> None:
        self.armed = False  # count only the held call's passes
        super().end_call()


async def test_event_loop_stays_responsive_during_a_call(
    tiny_model_dir: Path, robot_schema: ActionSchema
) -> None:
    loop = asyncio.get_running_loop()
    clock = _HeldClock(loop)
    async with TransformersBackend(
        model=str(tiny_model_dir), device="cpu", dtype="float32", clock=clock
    ) as backend:
        clock.armed = True
        task = asyncio.create_task(
            backend.generate("ctx", ["event"], robot_schema, deadline=loop.time() + 60)
        )
        await asyncio.wait_for(clock.holding.wait(), 30)
        # The worker thread is inside a forward pass (held there): the loop must keep running.
        gaps = []
        last = loop.time()
        for _ in range(20):
            await asyncio.sleep(0.005)
            now = loop.time()
            gaps.append(now - last)
            last = now
        assert not task.done()
        assert max(gaps) < 0.1
        clock.release.set()
        (g,) = await task
        assert g.finished_at <= loop.time()


async def test_cancelling_the_await_stops_the_worker(
    tiny_model_dir: Path, robot_schema: ActionSchema
) -> None:
    loop = asyncio.get_running_loop()
    clock = _HeldClock(loop)
    async with TransformersBackend(
        model=str(tiny_model_dir), device="cpu", dtype="float32", clock=clock
    ) as backend:
        cancel = CancelSignal()
        long_schema = ActionSchema.from_json_schema(
            {
                "type": "object",
                "properties": {"x": {"type": "string", "minLength": 400}},
                "required": ["x"],
            }
        )
        clock.armed = True
        task = asyncio.create_task(
            backend.generate(
                "ctx",
                ["long"],
                long_schema,
                deadline=loop.time() + 60,
                max_new_tokens=450,
                cancel=cancel,
            )
        )
        await asyncio.wait_for(clock.holding.wait(), 30)  # the worker is in its first pass
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cancel.cancelled
        clock.release.set()
        # The worker is free again within a step: the next call starts promptly.
        t0 = time.monotonic()
        (g,) = await backend.generate("ctx", ["next"], robot_schema, deadline=loop.time() + 60)
        assert g.started_at - t0 < 0.2
        # It stopped after the held pass, not after the 400 characters asked for.
        assert clock.passes_after_release == 0


async def test_a_call_before_the_start_raises_not_started(
    tiny_model_dir: Path, robot_schema: ActionSchema
) -> None:
    backend = TransformersBackend(model=str(tiny_model_dir), device="cpu", dtype="float32")
    with pytest.raises(NotStarted):
        await backend.generate("ctx", ["x"], robot_schema, deadline=1e9)


def test_each_start_reads_the_loop_that_started_it(tiny_backend: TransformersBackend) -> None:
    from forethought.sims._vloop import run_virtual

    async def start_and_read() -> tuple[float, float]:
        async with tiny_backend:
            return tiny_backend.decoder.clock.now(), asyncio.get_running_loop().time()

    asyncio.run(start_and_read())  # a first start on an ordinary (monotonic) loop
    backend_now, loop_now = run_virtual(start_and_read())  # then on a virtual one, at t=0
    assert backend_now == loop_now == 0.0
    # Stopped, it reads monotonic time again (sync use must not see the finished loop's 0.0).
    assert tiny_backend.decoder.clock.now() == pytest.approx(time.monotonic(), abs=1.0)
