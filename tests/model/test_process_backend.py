"""ProcessBackend: the same calls, answered by a worker process (tiny model)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from forethought.models import CancelSignal, GenerationStatus, ProcessBackend
from forethought.models._gate import ModelGate
from forethought.policies import ActionSchema, DeadlinePassed, ModelNotFound, PromptTooLong

pytestmark = pytest.mark.model


async def test_calls_cancel_and_errors_cross_the_process(
    tiny_model_dir: Path, robot_schema: ActionSchema
) -> None:
    async with ProcessBackend(model=str(tiny_model_dir), device="cpu", dtype="float32") as be:
        loop = asyncio.get_running_loop()
        await be.prepare(robot_schema)
        assert be.latency.step(1).p50 > 0  # adopted from the worker's warm-up
        (g,) = await be.generate("ctx", ["event"], robot_schema, deadline=loop.time() + 30)
        assert g.status in (GenerationStatus.DONE, GenerationStatus.LENGTH)
        if g.ok:
            assert g.action == robot_schema.parse(g.text)  # re-parsed in this process
        gens = await be.generate("ctx", ["a", "b"], robot_schema, deadline=loop.time() + 30)
        assert len(gens) == 2
        cands = robot_schema.enumerate(10)
        assert cands is not None
        scores = await be.score("ctx", "event", cands, robot_schema, deadline=loop.time() + 30)
        assert scores.best is not None
        with pytest.raises(DeadlinePassed):
            await be.generate("ctx", ["x"], robot_schema, deadline=loop.time() - 1)
        with pytest.raises(PromptTooLong):
            await be.generate("ctx " * 600, ["x"], robot_schema, deadline=loop.time() + 30)
        # A long batch, preempted through the gate like the executor does.
        long_schema = ActionSchema.from_json_schema(
            {
                "type": "object",
                # Long however the model spells it: 4,000 characters take hundreds of tokens,
                # far more than the 0.3 s before the preemption. (With 400, the grammar's bound,
                # 464 characters, could be reached by long tokens in a few dozen steps.)
                "properties": {"s": {"type": "string", "minLength": 4000}},
                "required": ["s"],
            }
        )
        gate = ModelGate()

        async def background() -> list[object]:
            async with gate.background() as cancel:
                return list(
                    await be.generate(
                        "ctx",
                        ["p", "q"],
                        long_schema,
                        deadline=loop.time() + 60,
                        max_new_tokens=450,
                        cancel=cancel,
                    )
                )

        task = asyncio.create_task(background())
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        async with gate.urgent():
            waited = time.monotonic() - t0
        result = await task
        statuses = [g.status for g in result]  # type: ignore[attr-defined]
        assert all(st is GenerationStatus.CANCELLED for st in statuses), statuses
        assert waited < 0.5
        cancel = CancelSignal()
        cancel.cancel()
        (g,) = await be.generate(
            "ctx",
            ["y"],
            long_schema,
            deadline=loop.time() + 30,
            cancel=cancel,
            max_new_tokens=450,
        )
        assert g.status is GenerationStatus.CANCELLED


def test_unknown_model_fails_before_spawning() -> None:
    with pytest.raises(ModelNotFound):
        ProcessBackend(model="/no/such/model.gguf")
