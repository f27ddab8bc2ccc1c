"""R4: planner and model faults (issue 12) -- the planner outlives its model, and says so.

A real model (the tiny random Llama) in a real worker process; the worker is really killed
and really stopped, and the other faults are injected into the real model's results. Checked
to fail without the guards: with the planner's old ``except (ForethoughtError, RuntimeError,
ValueError)`` the injected ``OSError`` ended the agent's task group, and with the process
backend's old cancel path (wait for the worker's reply) a stopped worker held every later call.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from benchmarks.reliability.model_faults import FAULTS, run_model_faults
from forethought.models import CancelSignal, GenerationStatus, ProcessBackend
from forethought.models._health import PlannerHealth
from forethought.planner import PlannerConfig
from forethought.policies import ActionSchema, BackendError, InvalidAction
from forethought.testing import FaultyBackend, until_holds

SCHEMA = ActionSchema.from_json_schema(
    {
        "type": "object",
        "properties": {"action": {"enum": ["stop", "go"]}},
        "required": ["action"],
    }
)
LONG = ActionSchema.from_json_schema(
    {
        "type": "object",
        "properties": {"s": {"type": "string", "minLength": 4000}},
        "required": ["s"],
    }
)
"""A call that takes hundreds of decode steps, so a fault lands inside it."""


def test_health_backs_off_doubling_and_recovers() -> None:
    h = PlannerHealth(retry_base_s=0.5, retry_max_s=3.0)
    assert h.status == "starting"
    delays = [h.failed("hang", "no reply", now=float(i)) for i in range(5)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert h.status == "backing_off"
    assert h.as_dict(now=5.0)["last_error"] == "hang: no reply"
    h.succeeded(now=10.0)
    assert (h.status, h.streak, h.recoveries, h.recovery_s) == ("ok", 0, 1, [10.0])
    assert h.failed("OSError", "x", now=11.0) == 0.5  # a new streak starts from the base


def test_planner_config_names_the_bad_field() -> None:
    with pytest.raises(ValueError, match="hang_grace_s"):
        PlannerConfig(hang_grace_s=0)


async def test_a_killed_or_stuck_worker_is_replaced(tiny_model_dir: Path) -> None:
    loop = asyncio.get_running_loop()
    async with ProcessBackend(
        model=str(tiny_model_dir), device="cpu", dtype="float32", nice=0, cancel_grace_s=0.3
    ) as be:
        first = be.worker_pid
        assert first is not None
        os.kill(first, signal.SIGKILL)  # between calls
        await until_holds(lambda: not be.worker_alive, 30, "the killed worker's exit")
        t0 = loop.time()
        with pytest.raises(BackendError, match="starting it again"):
            await be.generate("ctx", ["p"], SCHEMA, deadline=loop.time() + 30)
        assert loop.time() - t0 < 0.5  # fails fast: no caller waits for a model load
        with pytest.raises(BackendError, match="starting again"):
            await be.generate("ctx", ["p"], SCHEMA, deadline=loop.time() + 30)
        await be.wait_ready()
        (g,) = await be.generate("ctx", ["p"], SCHEMA, deadline=loop.time() + 30)
        assert g.status is GenerationStatus.DONE, g
        assert be.restarts == 1
        second = be.worker_pid
        assert second not in (None, first)

        # During a call: that call fails, and a new worker starts at once.
        calls = be.calls
        call = asyncio.ensure_future(
            be.generate("ctx", ["p"], LONG, deadline=loop.time() + 30, max_new_tokens=400)
        )
        await until_holds(lambda: be.calls != calls, 30, "the call sent")  # no event says it
        assert second is not None
        os.kill(second, signal.SIGKILL)
        with pytest.raises(BackendError, match="exited during the call"):
            await call
        assert be.restarts == 2
        await be.wait_ready()
        (g,) = await be.generate("ctx", ["p"], SCHEMA, deadline=loop.time() + 30)
        assert g.status is GenerationStatus.DONE, g

        # Stopped mid-call: the caller's cut returns at once, the worker is killed after the
        # grace, and the next call runs on a new one.
        stopped = be.worker_pid
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)
        t0 = loop.time()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await be.generate("ctx", ["p"], LONG, deadline=loop.time() + 30)
        assert loop.time() - t0 < 0.3  # not held by the stuck worker
        with pytest.raises(BackendError, match="starting again"):  # killed after the grace
            await be.generate("ctx", ["q"], SCHEMA, deadline=loop.time() + 30)
        await be.wait_ready()
        (g,) = await be.generate("ctx", ["q"], SCHEMA, deadline=loop.time() + 30)
        assert g.status is GenerationStatus.DONE, g
        assert be.hangs == 1
        assert be.worker_pid not in (None, stopped)


async def test_injected_faults_change_only_the_armed_call(tiny_model_dir: Path) -> None:
    loop = asyncio.get_running_loop()
    inner = ProcessBackend(model=str(tiny_model_dir), device="cpu", dtype="float32", nice=0)
    async with FaultyBackend(inner) as be:
        be.arm("exception")
        (g,) = await be.generate("c", ["e"], SCHEMA, deadline=loop.time() + 30)  # live: untouched
        assert g.status is GenerationStatus.DONE
        with pytest.raises(OSError, match="injected"):
            await be.generate("c", ["e"], SCHEMA, deadline=loop.time() + 30, cancel=CancelSignal())
        be.arm("malformed")
        (g,) = await be.generate(
            "c", ["e"], SCHEMA, deadline=loop.time() + 30, cancel=CancelSignal()
        )
        assert g.status is GenerationStatus.DONE
        assert g.action is not None
        with pytest.raises(InvalidAction, match="fly"):  # what the tree and executor check
            SCHEMA.validate(SCHEMA.readable(g.action))
        with pytest.raises(ValueError, match="unknown fault"):
            be.arm("meteor")


async def test_every_fault_kind_leaves_tree_hits_and_actions_intact(tiny_model_dir: Path) -> None:
    out = await run_model_faults(str(tiny_model_dir), each=2)
    kinds = out["faults"]
    assert set(kinds) == set(FAULTS)
    for kind, row in kinds.items():
        assert row["faults"] == 2, (kind, out["rows"])
        assert row["detected"] == 2, (kind, out["rows"])  # health said backing_off ...
        assert row["healthy_again"] == 2, (kind, out["rows"])  # ... then ok, on its own
    assert out["ticks"] > 50
    assert out["tick_misses"] == 0
    assert out["invalid_emitted"] == 0
    assert out["stored_invalid"] == 0
    assert out["worker_restarts"] >= 4  # two kills, two hangs
    assert out["worker_hangs_killed"] == 2
    assert out["live_cuts"] == 2
    assert out["live_cut_defaults_in_time"] == 2
    assert out["live_cut_overrun_max_ms"] <= 2 * out["decode_step_p95_ms"]
    assert out["planner_health"]["status"] == "ok"
