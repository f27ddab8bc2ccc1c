"""Executor tiers that run a tiny real model, charged by a fixed profile on virtual time.

The rest of the executor's tests need no model: tests/unit/test_executor_tiers.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from executor_support import ACTION, SPACE, STATE
from virtual_time import elapse

from forethought.models import LatencyProfile, TransformersBackend
from forethought.models._prompt import Prompt, state_text
from forethought.policies import ActionSchema, EventSpace, PolicyTree
from forethought.runtime import Decision, Event, ExecutorConfig, Tier
from forethought.runtime._executor import Executor
from forethought.sims._charged import ChargedClock
from forethought.sims._vloop import VirtualTimeLoop, run_virtual


async def _live_only_stream(
    backend: Any, schema: ActionSchema, n: int, *, every_s: float, budget_s: float
) -> list[Decision]:
    """``n`` obstacle events, one every ``every_s``, decided by the live tier alone (latency
    measurements on after 0.5 s without one); the executor closed after."""
    loop = asyncio.get_running_loop()
    ex = Executor(
        space=EventSpace.from_specs(SPACE),
        schema=schema,
        tree=PolicyTree(),
        default_action={"a": "stop"},
        description="test robot",
        backend=backend,
        config=ExecutorConfig(use_tree=False, use_score=False, measure_after_s=0.5),
    )
    decisions = []
    for i in range(n):
        await elapse(every_s)
        now = loop.time()
        event = Event(str(i), "obstacle", {"d": 1.0}, arrived_at=now, deadline=now + budget_s)
        decisions.append(await ex.decide(event, STATE))
    await ex.aclose()
    return decisions


@pytest.mark.model
def test_a_live_tier_shut_out_in_a_slow_moment_is_measured_again(
    tiny_backend: TransformersBackend,
) -> None:
    """A p95 learned in a slow moment must not keep the live tier off once the model is fast.

    The model's first measurements come from a busy moment (the passes took 100x their usual
    time), so the live tier's p95 does not fit a 200 ms budget and it is not started. A tier
    that is never started is never measured: unless the executor measures the model again,
    the tier stays off for good while every call would now fit many times over. Virtual time,
    a real (tiny) model charged by a fixed profile: deterministic.
    """
    profile = LatencyProfile(0.01, 0.0002, 0.01, 0.0005, spread95=1.1)

    async def main() -> list[Decision]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        backend = tiny_backend.sharing(clock=ChargedClock(loop, profile, seed=3))
        async with backend:
            lat = backend.latency
            for tokens in (150, 20):  # what a calibration in a busy moment leaves behind
                lat.observe_prefill(tokens, 1.0 + tokens * 0.02)
            for _ in range(2):
                lat.observe_step(1, 1.0)
            return await _live_only_stream(
                backend, ActionSchema.from_json_schema(ACTION), 240, every_s=0.25, budget_s=0.2
            )

    decisions = run_virtual(main())

    def shut_out(d: Decision) -> bool:
        return any(tier == "live" and "does not fit" in why for tier, why in d.skipped)

    assert shut_out(decisions[0])  # the slow moment's p95 kept the tier off at first
    assert not any(shut_out(d) for d in decisions[-20:])  # measured again, it starts again
    assert all(d.met for d in decisions)


@pytest.mark.model
def test_a_state_prompt_too_long_to_prefill_in_any_budget_is_prefilled_in_the_background(
    tiny_backend: TransformersBackend,
) -> None:
    """A live tier the model refuses before any pass must not stay off for good.

    Prefill here costs 4 ms a token: the state's prompt (about 100 tokens) takes longer to
    prefill than the 300 ms an event allows, while an event's own tokens after it, cached,
    take about 100 ms. Nothing on the event path ever prefills the state's prompt (each call
    is refused before its first pass, so nothing is measured either): unless the executor
    prefills it in the background, no event is ever answered live. Virtual time, a real
    (tiny) model charged by a fixed profile: deterministic.
    """
    profile = LatencyProfile(0.01, 0.004, 0.01, 0.0005, spread95=1.1)
    schema = ActionSchema.from_json_schema(ACTION)

    async def main() -> tuple[list[Decision], int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        backend = tiny_backend.sharing(clock=ChargedClock(loop, profile, seed=3))
        async with backend:
            await backend.prepare(schema)  # what the agent does: calibrates on a short prompt
            prompt, _ = backend.prompts.encode(
                Prompt(state_text("test robot", STATE.to_json()), "-"), schema
            )
            decisions = await _live_only_stream(backend, schema, 40, every_s=0.5, budget_s=0.3)
        return decisions, len(prompt)

    decisions, prompt_tokens = run_virtual(main())
    assert 0.01 + 0.004 * prompt_tokens > 0.3  # the state's prompt alone does not fit
    assert decisions[0].tier is Tier.DEFAULT
    assert ("live", "not_started") in decisions[0].skipped
    live = [d for d in decisions if d.tier is Tier.LIVE]
    assert len(live) >= 30, [d.skipped for d in decisions]
    assert all(d.tier is Tier.LIVE for d in decisions[-10:])
    assert all(d.met for d in decisions)
