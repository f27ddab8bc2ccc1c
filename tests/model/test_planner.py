"""The planner on the tiny random-weight model: real batches, real gate, real asyncio."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any

import pytest

from forethought.models import Generation, GenerationStatus, TransformersBackend
from forethought.models._gate import ModelGate
from forethought.planner import PlannerConfig
from forethought.planner._forecaster import Forecaster
from forethought.planner._planner import Planner
from forethought.policies import ActionSchema, BackendError, EventSpace, PolicyTree, WorldState
from forethought.testing import until_holds

pytestmark = pytest.mark.model

SPECS = [
    {
        "type": "obstacle",
        "params": {"side": ["left", "right", "front"]},
        "deadline_ms": 300,
        "weight": 6,
        "effects": {"zone": "blocked"},
    },
    {
        "type": "battery_low",
        "params": {"level": [0.1, 0.2]},
        "deadline_ms": 2000,
        "weight": 2,
        "effects": {"battery": "$level"},
    },
    {"type": "path_clear", "deadline_ms": 1000, "weight": 1, "effects": {"zone": "aisle"}},
]


def make_planner(backend: Any, schema: ActionSchema, **cfg: Any) -> tuple[Planner, PolicyTree]:
    space = EventSpace.from_specs(SPECS)
    planner_box: list[Planner] = []
    tree = PolicyTree(max_nodes=200, on_evict=lambda _: planner_box[0].wake())
    planner = Planner(
        backend=backend,
        gate=ModelGate(),
        space=space,
        schema=schema,
        tree=tree,
        forecaster=Forecaster(space),
        description="You steer a warehouse robot.",
        state=WorldState({"zone": "aisle", "battery": 0.8}),
        config=PlannerConfig(**{"batch_size": 2, "horizon": 1, **cfg}),
    )
    planner_box.append(planner)
    return planner, tree


async def at_rest(planner: Planner, within_s: float = 60.0) -> None:
    """Until the planner has nothing left worth writing and awaits an event."""
    await until_holds(lambda: planner.sleeping, within_s, "the planner at rest")


async def covered(planner: Planner, within_s: float = 60.0) -> None:
    """Until the tree answers 95 % of the next event, then the planner at rest.

    A model error delays a branch (it is tried again after a backoff); it never excuses it.
    """
    await until_holds(
        lambda: planner.coverage() >= 0.95,
        within_s,
        f"95 % coverage (errors so far: {planner.stats.errors})",
    )
    await at_rest(planner, within_s)


async def test_fills_the_tree_in_priority_order_then_sleeps_without_cpu(
    running_tiny: TransformersBackend, robot_schema: ActionSchema
) -> None:
    planner, tree = make_planner(running_tiny, robot_schema)
    expected_first = [b.key for b in planner.candidates()[:2]]
    assert all(k.type == "obstacle" for k in expected_first)  # most probable type first
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(planner.run(), name="forethought.planner")
        await at_rest(planner)
        fp = planner.state.fingerprint
        nodes = sorted(tree.branches(fp), key=lambda n: n.version)
        assert {n.key for n in nodes[:2]} == set(expected_first)
        assert len(nodes) + sum(planner.stats.errors.values()) >= 6
        await covered(planner)
        # An error delays a branch, it never excuses it: at rest again, all six are written.
        assert len(list(tree.branches(fp))) >= 6
        # Asleep means awaiting an event: no polling, no CPU.
        cpu0 = time.process_time()
        await asyncio.sleep(0.5)
        assert time.process_time() - cpu0 < 0.05
        assert planner.sleeping
        task.cancel()


async def test_replans_after_a_state_change(
    running_tiny: TransformersBackend, robot_schema: ActionSchema
) -> None:
    planner, tree = make_planner(running_tiny, robot_schema, batch_size=4)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(planner.run(), name="forethought.planner")
        await at_rest(planner)
        old = planner.state
        new = old.patched({"zone": "dock"})
        planner.set_state(new)
        await asyncio.sleep(0)
        assert not planner.sleeping
        await at_rest(planner)
        assert len(list(tree.branches(new.fingerprint))) >= 4
        assert len(list(tree.branches(old.fingerprint))) >= 4  # the old state's work is kept
        assert planner.stats.cover_times_s, "time to cover the new state's top events"
        task.cancel()


async def test_plans_past_the_next_event_with_effects(
    running_tiny: TransformersBackend, robot_schema: ActionSchema
) -> None:
    planner, tree = make_planner(running_tiny, robot_schema, horizon=2, batch_size=8, min_rate=0.0)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(planner.run(), name="forethought.planner")
        await at_rest(planner)
        task.cancel()
    blocked = planner.state.patched({"zone": "blocked"})
    assert len(list(tree.branches(blocked.fingerprint))) > 0
    first = next(n for n in tree.branches(planner.state.fingerprint) if n.key.type == "obstacle")
    assert first.next_fingerprint == blocked.fingerprint


async def test_yields_the_model_to_an_urgent_caller_within_a_step(
    running_tiny: TransformersBackend,
) -> None:
    long_schema = ActionSchema.from_json_schema(
        {
            "type": "object",
            # Digits only: each is one token in this vocabulary, so a batch surely takes 300+
            # passes (a bare minLength let the random model fill it with 12-character tokens).
            "properties": {
                "say": {"type": "string", "pattern": "^[0-9]+$", "minLength": 300, "maxLength": 300}
            },
            "required": ["say"],
        }
    )
    planner, _ = make_planner(running_tiny, long_schema, batch_size=4, max_new_tokens=400)
    gate = planner._gate
    async with asyncio.TaskGroup() as tg:
        passes = running_tiny.latency.observed
        task = tg.create_task(planner.run(), name="forethought.planner")
        # Mid-batch: it holds the model and has run a few passes (each batch runs ~400).
        await until_holds(
            lambda: (
                gate._background_cancel is not None and running_tiny.latency.observed >= passes + 3
            ),
            60,
            "the planner mid-batch",
        )
        assert not planner.sleeping
        t0 = time.monotonic()
        async with gate.urgent():
            waited = time.monotonic() - t0
        task.cancel()
    step = running_tiny.latency.step(4).p95
    assert gate.preemptions >= 1
    assert waited <= 3 * step + 0.02, (waited, step)
    assert planner.stats.cancelled >= 1


class FlakyBackend:
    """The real tiny backend, but its first ``failures`` batches raise."""

    def __init__(self, inner: TransformersBackend, failures: int) -> None:
        self._inner = inner
        self._failures = failures
        self.calls = 0

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def latency(self) -> Any:
        return self._inner.latency

    async def generate(
        self, context: str, events: Sequence[str], schema: ActionSchema, **kw: Any
    ) -> Any:
        self.calls += 1
        if self.calls <= self._failures:
            raise BackendError("simulated device fault")
        return await self._inner.generate(context, events, schema, **kw)


class StalePredictionBackend:
    """The real tiny backend behind a latency model whose samples are stale (a warm-up measured
    on a busy machine): it refuses every call with a deadline, as predicted not to fit
    (NOT_STARTED), until one unchecked call (no deadline) has run and given it a fresh sample.
    """

    def __init__(self, inner: TransformersBackend) -> None:
        self._inner = inner
        self.refused = 0
        self.fresh = False

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def latency(self) -> Any:
        return self._inner.latency

    async def generate(
        self, context: str, events: Sequence[str], schema: ActionSchema, **kw: Any
    ) -> list[Generation]:
        now = asyncio.get_running_loop().time()
        if not self.fresh and math.isfinite(kw["deadline"]):
            self.refused += 1
            return [
                Generation(GenerationStatus.NOT_STARTED, None, "", 0, 0, 0, 0, now, None, now)
                for _ in events
            ]
        out = await self._inner.generate(context, events, schema, **kw)
        self.fresh = True
        return out


async def test_a_round_refused_on_a_stale_prediction_is_followed_by_a_retry_round(
    running_tiny: TransformersBackend, robot_schema: ActionSchema
) -> None:
    """Refused whole, the planner's next round is a retry round, one branch with no
    predicted-time check: it does not ask again and again (each ask re-ranking every
    candidate) while nothing runs to correct the prediction. Seen as the README example stuck
    at 36 % coverage for 10 min with the planner spinning in its ranking."""
    stale = StalePredictionBackend(running_tiny)
    planner, tree = make_planner(stale, robot_schema)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(planner.run(), name="forethought.planner")
        await at_rest(planner, within_s=60.0)
        await covered(planner)
        task.cancel()
    assert stale.refused == 1
    assert planner.stats.refused_rounds == 1
    assert len(tree) >= 6
    assert planner.coverage() >= 0.95


async def test_model_errors_are_counted_and_retried(
    running_tiny: TransformersBackend, robot_schema: ActionSchema
) -> None:
    flaky = FlakyBackend(running_tiny, failures=2)
    planner, tree = make_planner(flaky, robot_schema, retry_base_s=0.05, batch_size=8)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(planner.run(), name="forethought.planner")
        await until_holds(lambda: len(tree) >= 6, 30, "six branches despite two errors")
        task.cancel()
    assert planner.stats.errors["BackendError"] == 2
    assert flaky.calls >= 3
