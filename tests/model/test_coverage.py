"""Planner coverage (issue 10): state abstraction, look-ahead with learned drift, a forecaster
that learns the stream, the value-vs-cost rule and the waste figures."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from pydantic import ValidationError
from virtual_time import elapse

from forethought.models import ScriptedBackend, TransformersBackend
from forethought.models._gate import ModelGate
from forethought.models._prompt import state_text
from forethought.planner import PlannerBudget, PlannerConfig
from forethought.planner._budget import BudgetBucket
from forethought.planner._calibration import calibration, markov_bound
from forethought.planner._drift import StateDrift
from forethought.planner._forecaster import Forecaster
from forethought.planner._lookahead import Pace, look_ahead
from forethought.planner._planner import Planner
from forethought.policies import (
    ActionSchema,
    AgentSpec,
    ConfigError,
    EventKey,
    EventSpace,
    PolicyNode,
    PolicyTree,
    WorldState,
)
from forethought.policies._abstraction import StateAbstraction
from forethought.policies._events import Grid
from forethought.runtime import Agent, AgentConfig, Event, ExecutorConfig
from forethought.sims import load_scenario, shipped_scenarios
from forethought.sims._vloop import VirtualTimeLoop, run_virtual

EVENTS: list[dict[str, Any]] = [
    {
        "type": "obstacle",
        "params": {"side": ["left", "right"]},
        "deadline_ms": 300,
        "weight": 3,
        "state_fields": ["zone"],
    },
    {"type": "task", "params": {"to": ["a", "b"]}, "deadline_ms": 300, "weight": 1},
    {"type": "estop", "deadline_ms": 100, "weight": 0.5, "state_fields": []},
]
GRIDS = {"battery": Grid(min=0, max=1, step=0.1)}


def abstraction(tolerance: float | None = 0.1) -> StateAbstraction:
    return StateAbstraction(
        fields=["zone", "battery"],
        by_type={e["type"]: e.get("state_fields") for e in EVENTS},
        grids=GRIDS,
        tolerance={"battery": tolerance} if tolerance else None,
    )


def spec_data(**extra: Any) -> dict[str, Any]:
    return {
        "name": "amr",
        "description": "You drive a robot.",
        "action": {
            "type": "object",
            "properties": {"action": {"enum": ["stop", "go", "dock"]}},
            "required": ["action"],
        },
        "default_action": {"action": "stop"},
        "state": {"zone": "aisle", "battery": 0.83, "load": "empty"},
        "state_fields": ["zone", "battery"],
        "state_grids": {"battery": {"min": 0, "max": 1, "step": 0.1}},
        "state_tolerance": {"battery": 0.1},
        "events": EVENTS,
        **extra,
    }


def make_planner(
    backend: Any,
    space: EventSpace,
    schema: ActionSchema,
    *,
    tree: PolicyTree | None = None,
    state: WorldState | None = None,
    description: str = "You steer a warehouse robot.",
    **kw: Any,
) -> Planner:
    """A planner on a fresh forecaster and gate (the tests vary the rest)."""
    return Planner(
        backend=backend,
        gate=ModelGate(),
        space=space,
        schema=schema,
        tree=PolicyTree() if tree is None else tree,
        forecaster=Forecaster(space),
        description=description,
        state=WorldState({}) if state is None else state,
        **kw,
    )


async def plan_until_idle(planner: Planner) -> None:
    """Run the planner until it has nothing valuable left, then stop it."""
    run = asyncio.create_task(planner.run())
    try:
        await asyncio.wait_for(planner.wait_idle(), 120)
    finally:
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run


# -- state abstraction ---------------------------------------------------------------------------


def test_a_type_is_keyed_only_by_the_fields_it_depends_on() -> None:
    s = WorldState({"zone": "aisle", "battery": 0.83, "load": "x"}, abstraction=abstraction())
    drained = s.patched({"battery": 0.41})
    moved = s.patched({"zone": "dock"})
    # obstacle depends on the zone only: the battery does not change its branches
    assert drained.fingerprint_for("obstacle") == s.fingerprint_for("obstacle")
    assert moved.fingerprint_for("obstacle") != s.fingerprint_for("obstacle")
    # task depends on zone and battery (the spec's state_fields), never on load
    assert drained.fingerprint_for("task") != s.fingerprint_for("task")
    assert s.patched({"load": "pallet"}).fingerprint_for("task") == s.fingerprint_for("task")
    # estop depends on nothing
    assert moved.fingerprint_for("estop") == drained.fingerprint_for("estop")


def test_numeric_state_snaps_to_its_grid_and_outside_values_stay_distinct() -> None:
    a = abstraction()
    assert a.view({"zone": "z", "battery": 0.83}, "task") == {"zone": "z", "battery": 0.8}
    assert a.fingerprint({"zone": "z", "battery": 0.83}, "task") == a.fingerprint(
        {"zone": "z", "battery": 0.78}, "task"
    )
    assert a.fingerprint({"zone": "z", "battery": 0.83}, "task") != a.fingerprint(
        {"zone": "z", "battery": 0.74}, "task"
    )
    # out of the grid, or not a number: kept as it is, so never confused with a grid value
    assert a.view({"battery": 7}, "task")["battery"] == 7
    assert a.view({"battery": True}, "task")["battery"] is True


def test_no_declarations_keep_the_old_fingerprint() -> None:
    data = {"zone": "aisle", "battery": 0.83}
    plain = WorldState(data)
    fields = WorldState(data, fields=["zone"])
    assert plain.fingerprint_for("anything") == plain.fingerprint
    assert (
        fields.fingerprint
        == WorldState({"zone": "aisle", "battery": 0.1}, fields=["zone"]).fingerprint
    )
    assert list(plain.near("anything")) == []


def test_near_states_are_one_grid_step_within_tolerance_nearest_first() -> None:
    s = WorldState({"zone": "aisle", "battery": 0.5}, abstraction=abstraction(0.2))
    near = list(s.near("task"))
    expected = {
        WorldState({"zone": "aisle", "battery": b}, abstraction=abstraction(0.2)).fingerprint_for(
            "task"
        ): d
        for b, d in ((0.4, 0.5), (0.6, 0.5), (0.3, 1.0), (0.7, 1.0))
    }
    assert dict(near) == pytest.approx(expected)
    assert [d for _, d in near] == sorted(d for _, d in near)
    assert list(s.near("obstacle")) == []  # obstacle does not depend on the battery


def test_spec_validates_state_tolerance_and_builds_the_abstraction() -> None:
    spec = AgentSpec.from_data(spec_data())
    state = spec.initial_state()
    assert state.fingerprint_for("task") == state.patched({"battery": 0.79}).fingerprint_for("task")
    bad = spec_data(state_tolerance={"zone": 1})
    with pytest.raises(ConfigError, match=r"state_tolerance\.zone"):
        AgentSpec.from_data(bad)


async def test_executor_borrows_from_a_neighbouring_state_and_says_so() -> None:
    spec = AgentSpec.from_data(spec_data())
    config = AgentConfig.defaults(planner=PlannerConfig(enabled=False))
    agent = Agent(spec, backend=ScriptedBackend(), config=config)
    async with agent:
        state = agent.state  # battery 0.83 -> cell 0.8
        key = EventKey("task", (("to", "a"),))
        neighbour = state.patched({"battery": 0.7}).fingerprint_for("task")
        agent.tree.insert(PolicyNode(neighbour, key, {"action": "dock"}, "", 0.5, "m", 1, 0, 0))
        loop = asyncio.get_running_loop()
        d = await agent.decide(Event("1", "task", {"to": "a"}, arrived_at=loop.time()))
        assert (d.tier.value, d.action, d.approximate, d.nearest) == (
            "tree",
            {"action": "dock"},
            True,
            "state",
        )
        assert agent.executor is not None
        assert agent.executor.stats.near_state == 1
    strict = AgentConfig.defaults(
        planner=PlannerConfig(enabled=False),
        executor=ExecutorConfig(near_states=False, use_score=False, use_live=False),
    )
    agent = Agent(spec, backend=ScriptedBackend(), config=strict)
    async with agent:
        fp = agent.state.patched({"battery": 0.7}).fingerprint_for("task")
        agent.tree.insert(PolicyNode(fp, key, {"action": "dock"}, "", 0.5, "m", 1, 0, 0))
        loop = asyncio.get_running_loop()
        d = await agent.decide(Event("1", "task", {"to": "a"}, arrived_at=loop.time()))
        assert (d.tier.value, d.nearest) == ("default", None)


# -- drift and look-ahead ------------------------------------------------------------------------


def test_drift_learns_grid_steps_and_value_transitions() -> None:
    a = abstraction()
    s = WorldState({"zone": "aisle", "battery": 0.9}, abstraction=a)
    drift = StateDrift(a, prior_events=0)
    assert drift.moves(s) == []  # nothing seen, nothing predicted
    b = s
    for i in range(20):
        drift.observe_event()
        if i % 10 == 9:  # the battery drops a cell every 10 events
            nb = b.patched({"battery": round(b.get("battery") - 0.1, 2)})
            drift.observe_change(b, nb)
            b = nb
    drift.observe_change(b, b.patched({"battery": b.get("battery") - 0.04}))  # within a cell
    drift.observe_change(s, s.patched({"zone": "dock"}))
    moves = {
        m.to_json(): p
        for m, p in drift.moves(WorldState({"zone": "aisle", "battery": 0.42}, abstraction=a))
    }
    assert moves == pytest.approx(
        {
            WorldState({"zone": "aisle", "battery": 0.3}).to_json(): 2 / 20,
            WorldState({"zone": "dock", "battery": 0.42}).to_json(): 1 / 20,
        }
    )


def test_look_ahead_values_the_next_battery_cell_before_it_comes() -> None:
    a = abstraction()
    space = EventSpace.from_specs(EVENTS)
    f = Forecaster(space)
    start = WorldState({"zone": "aisle", "battery": 0.5}, abstraction=a)
    drift = StateDrift(a)
    prev = start
    for _ in range(3):  # seen: the battery drops one cell every 5 events
        for _ in range(5):
            drift.observe_event()
        nxt = prev.patched({"battery": round(prev.get("battery") - 0.1, 2)})
        drift.observe_change(prev, nxt)
        prev = nxt
    task_a = EventKey("task", (("to", "a"),))
    lower = start.patched({"battery": 0.4}).fingerprint_for("task")
    without = look_ahead(start, forecaster=f, space=space, drift=None, horizon=8)
    with_drift = look_ahead(start, forecaster=f, space=space, drift=drift, horizon=8)
    assert not any(e.fingerprint == lower for e in without)
    ahead = next(e for e in with_drift if e.fingerprint == lower and e.key == task_a)
    here = next(
        e for e in with_drift if e.fingerprint == start.fingerprint_for("task") and e.key == task_a
    )
    assert 0.05 < ahead.p_used < here.p_used
    # obstacle ignores the battery: its branch is one, and its uses add up across cells
    obstacle = [e for e in with_drift if e.key.type == "obstacle" and e.key.params[0][1] == "left"]
    assert len(obstacle) == 1
    assert obstacle[0].uses == pytest.approx(
        8 * f.distribution(start.fingerprint)[0], rel=1e-3
    )  # (states below 1e-3 mass are pruned)


async def test_planner_plans_the_next_state_on_the_tiny_model(
    running_tiny: TransformersBackend, robot_schema: ActionSchema
) -> None:
    space = EventSpace.from_specs(EVENTS)
    a = abstraction(tolerance=None)
    start = WorldState({"zone": "aisle", "battery": 0.55}, abstraction=a)
    tree = PolicyTree(max_nodes=500)
    planner = make_planner(
        running_tiny,
        space,
        robot_schema,
        tree=tree,
        state=start,
        config=PlannerConfig(batch_size=4, horizon=12, cost_weight=0.0, min_rate=0.002),
    )
    # the world changes from outside: the battery dropped a cell, twice, over 10 events
    state = start
    for _ in range(2):
        for _ in range(5):
            planner.observe(None)
        nxt = state.patched({"battery": round(state.get("battery") - 0.1, 2)})
        planner.set_state(nxt, external=True)
        state = nxt
    await plan_until_idle(planner)
    lower = state.patched({"battery": round(state.get("battery") - 0.1, 2)})
    planned = {(n.fingerprint, n.key) for n in tree.nodes()}
    for to in ("a", "b"):  # ready before the battery gets there
        assert (lower.fingerprint_for("task"), EventKey("task", (("to", to),))) in planned


# -- the forecaster learns the stream ------------------------------------------------------------


def markov_stream(space: EventSpace, n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """Types follow a sticky chain unlike the declared weights; params uniform."""
    rng = np.random.default_rng(seed)
    keys = space.keys()
    types = list(space.types)
    t = len(types)
    trans_t = np.full((t, t), 0.1 / (t - 1))
    np.fill_diagonal(trans_t, 0.9)
    per = {ty: [i for i, k in enumerate(keys) if k.type == ty] for ty in types}
    trans = np.zeros((len(keys), len(keys)))
    for i, k in enumerate(keys):
        for j, ty in enumerate(types):
            trans[i, per[ty]] = trans_t[types.index(k.type), j] / len(per[ty])
    seq = [0]
    for _ in range(n - 1):
        seq.append(int(rng.choice(len(keys), p=trans[seq[-1]])))
    return trans, seq


def test_posterior_beats_the_priors_within_tens_of_events() -> None:
    space = EventSpace.from_specs(EVENTS)
    trans, seq = markov_stream(space, 400, seed=3)
    keys = space.keys()
    stream = [(keys[i], "s") for i in seq]
    learned = calibration(lambda: Forecaster(space), stream, skip=40)
    prior = calibration(lambda: Forecaster(space), stream, learn=False, skip=40)
    best = markov_bound(trans, seq, skip=40)
    assert learned.log_loss < prior.log_loss - 0.3
    assert best.log_loss <= learned.log_loss < best.log_loss + 0.15
    assert best.brier <= learned.brier < prior.brier
    early = calibration(lambda: Forecaster(space), stream[:60], skip=30)
    early_prior = calibration(lambda: Forecaster(space), stream[:60], learn=False, skip=30)
    assert early.log_loss < early_prior.log_loss  # within tens of events


def test_calibration_scores_known_distributions() -> None:
    space = EventSpace.from_specs(
        [{"type": "a", "deadline_ms": 1}, {"type": "b", "deadline_ms": 1}]
    )
    stream = [(EventKey("a"), "s"), (EventKey("b"), "s")]
    c = calibration(lambda: Forecaster(space), stream, learn=False)
    assert c.log_loss == pytest.approx(math.log(2))
    assert c.brier == pytest.approx(0.5)  # (0.5)^2 + (0.5)^2 per event


# -- value against cost --------------------------------------------------------------------------


def _virtual_elapse() -> Callable[[float], None]:
    """Move the running virtual loop's clock on (nothing else is scheduled in between)."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop)
    return loop.advance


def test_branches_below_their_cost_are_not_planned() -> None:
    """On virtual time: the gaps between events are exact, and cost no wall time."""

    async def run() -> None:
        elapse = _virtual_elapse()
        # Deadlines of 2 s, and the live tiers seen to answer the tree's misses: planning
        # displaces their work.
        events = [{**e, "deadline_ms": 2000} for e in EVENTS]
        space = EventSpace.from_specs(events)
        schema = ActionSchema.from_json_schema(spec_data()["action"])
        async with ScriptedBackend(step_s=0.02, prefill_per_token_s=0.002) as backend:

            def planner(weight: float, **kw: Any) -> Planner:
                return make_planner(
                    backend,
                    space,
                    schema,
                    state=WorldState({"zone": "aisle", "battery": 0.5}, abstraction=abstraction()),
                    description="d",
                    config=PlannerConfig(horizon=1, cost_weight=weight),
                    **kw,
                )

            free, costly, no_live = planner(0.0), planner(1.0), planner(1.0, live_tiers=False)
            assert costly.branch_cost() == 0.0  # the event rate is not known yet: plan freely
            now = asyncio.get_running_loop().time()
            for p in (free, costly, no_live):
                for name in space.types:  # four misses of each type, all answered in time
                    for _ in range(4):
                        p.live_record.observe(name, 100, True, now)
                p.observe(None)
            elapse(0.2)  # two events 0.2 s apart: now the planner knows the rate
            for p in (free, costly, no_live):
                p.observe(None)
            assert costly.branch_cost() > 0.1
            assert free.branch_cost() == 0.0
            assert no_live.branch_cost() == 0.0  # no live tier: planning displaces nothing
            kept = {(b.key, round(b.value, 9)) for b in costly.candidates()}
            assert kept < {(b.key, round(b.value, 9)) for b in free.candidates()}
            assert all(v >= costly.branch_cost() for _, v in kept)
            assert costly.stats.below_cost > 0

    run_virtual(run())


def test_before_the_live_tiers_answer_anything_planning_costs_nothing() -> None:
    """On virtual time: the gaps between events are exact, and cost no wall time."""

    async def run() -> None:
        elapse = _virtual_elapse()
        # Deadlines of 2 s: one live call (prefill + 8 steps of 20 ms) fits on paper. That is not
        # an answer: until the live tiers are seen to answer the tree's misses, the planner plans
        # as if they answered none (an unfinished live call loses its event; an unneeded branch
        # only costs idle time).
        space = EventSpace.from_specs([{**e, "deadline_ms": 2000} for e in EVENTS])
        schema = ActionSchema.from_json_schema(spec_data()["action"])
        async with ScriptedBackend(step_s=0.02, prefill_per_token_s=0.002) as backend:
            p = make_planner(backend, space, schema, config=PlannerConfig(horizon=1))
            p.observe(None)
            elapse(0.05)
            p.observe(None)
            assert p.seconds_per_branch()["generate"] / 0.05 > 1  # it would "cost" events...
            assert p.live_success() == dict.fromkeys(space.types, 0.0)
            assert p.branch_cost() == 0.0  # ...but none answered yet: none is displaced

    run_virtual(run())


def test_the_cost_follows_what_the_live_tiers_achieved_per_type_with_decay() -> None:
    # The live tiers answer every task the tree misses and no obstacle (a slow model losing
    # to queues, say): tasks' urgency relaxes and planning displaces their live work;
    # obstacles stay urgent. Outcomes decay: a minute later (one half-life) the evidence
    # counts half, and after a long quiet spell the prior (plan) speaks again.
    # (On the virtual clock: the decay is over minutes.)

    async def body() -> None:
        events = [{**e, "deadline_ms": 2000} for e in EVENTS]
        space = EventSpace.from_specs(events)
        schema = ActionSchema.from_json_schema(spec_data()["action"])
        async with ScriptedBackend(step_s=0.02, prefill_per_token_s=0.002) as backend:
            # p hears the live tiers' outcomes; q sees the same events without them.
            p, q = (
                make_planner(backend, space, schema, config=PlannerConfig(horizon=1)) for _ in "pq"
            )
            obstacle, task = space.keys()[0], space.keys()[2]
            assert (obstacle.type, task.type) == ("obstacle", "task")
            for _ in range(8):
                for key, live in ((obstacle, False), (task, True), (obstacle, None)):
                    # False: the tree missed it and the live tiers did not answer in time;
                    # True: they did; None: the tree answered it (nothing of the live tiers).
                    p.observe(key, live=live)
                    q.observe(key)
                    await elapse(0.1)
            assert q.live_success() == dict.fromkeys(space.types, 0.0)
            success = p.live_success()
            assert success["obstacle"] == 0.0
            assert 0.85 < success["task"] < 1.0  # 8 answers, against the prior's one try
            assert success["estop"] == 0.0  # never tried: the prior (plan) stands
            urgency = p._urgencies(success)
            assert urgency["obstacle"] == 1.0
            assert urgency["task"] == pytest.approx(1 - success["task"] * (1 - 0.3))
            assert q.branch_cost() == 0.0
            assert p.branch_cost() > 0.0
            await elapse(60.0)  # a half-life with no outcome: the 8 count for 4
            assert 0.75 < p.live_success()["task"] < success["task"]
            await elapse(600.0)
            assert p.live_success()["task"] < 0.05

    run_virtual(body())


async def test_with_no_live_tier_beside_it_the_planner_ignores_live_outcomes() -> None:
    space = EventSpace.from_specs([{**e, "deadline_ms": 2000} for e in EVENTS])
    schema = ActionSchema.from_json_schema(spec_data()["action"])
    async with ScriptedBackend(step_s=0.02, prefill_per_token_s=0.002) as backend:
        p = make_planner(backend, space, schema, live_tiers=False)
        p.observe(space.keys()[0], live=True)
        assert p.live_success() == dict.fromkeys(space.types, 0.0)
        assert p._urgencies() == dict.fromkeys(space.types, 1.0)


# -- the generator and the large scenario --------------------------------------------------------


def test_large_scenario_is_large_drifts_and_bursts() -> None:
    path = next(p for p in shipped_scenarios() if p.stem == "amr-night-shift")
    sc = load_scenario(path)
    assert len(sc.spec.event_space()) >= 50
    events = sc.events()
    patches = [i for i, e in enumerate(events) if e.state and "battery" in e.state]
    assert len(patches) > 10
    assert all(b - a == 10 for a, b in itertools.pairwise(patches))
    gaps = np.diff([e.at_ms for e in events])
    assert np.sum(gaps == 150) >= len(events) // 2 - 1  # bursts of two, 150 ms apart
    # deterministic: the same file gives the same trace
    assert [e.model_dump() for e in load_scenario(path).events()] == [
        e.model_dump() for e in events
    ]


def test_generator_follow_and_bad_names(tmp_path: Path) -> None:
    data = spec_data()
    data["generate"] = {
        "seed": 1,
        "count": 400,
        "mean_gap_ms": 100,
        "weights": {"obstacle": 1, "task": 1},
        "follow": {"obstacle": {"estop": 1.0}},
    }
    path = tmp_path / "s.json"
    path.write_bytes(orjson.dumps(data))
    events = load_scenario(path).events()
    assert all(b.type == "estop" for a, b in itertools.pairwise(events) if a.type == "obstacle")
    assert {e.type for e in events} == {"obstacle", "task", "estop"}
    data["generate"]["follow"] = {"obstacle": {"nope": 0.5}}
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(ConfigError, match="nope"):
        load_scenario(path).events()


# -- scoring-based planning ----------------------------------------------------------------------

CHOICE = {
    "type": "object",
    "properties": {"action": {"enum": ["stop", "go", "dock"]}, "lights": {"type": "boolean"}},
    "required": ["action", "lights"],
}


async def test_planner_writes_branches_by_scoring_on_the_tiny_model(
    running_tiny: TransformersBackend,
) -> None:
    schema = ActionSchema.from_json_schema(CHOICE)
    await running_tiny.prepare(schema)
    cands = schema.enumerate(16)
    assert cands is not None
    assert len(cands) == 6
    space = EventSpace.from_specs(EVENTS)
    tree = PolicyTree()
    planner = make_planner(
        running_tiny,
        space,
        schema,
        tree=tree,
        state=WorldState({"zone": "aisle", "battery": 0.5}, abstraction=abstraction()),
        config=PlannerConfig(method="score", horizon=1, min_rate=0.05, cost_weight=0.0),
        candidates=cands,
    )
    assert planner.method() == "score"
    await plan_until_idle(planner)
    nodes = list(tree.nodes())
    readable = [schema.readable(c) for c in cands]
    assert len(nodes) == planner.stats.scored == planner.stats.branches > 0
    assert all(n.action in readable and n.tokens == 0 for n in nodes)
    # what scoring chose is the candidate the backend ranks first for that event
    n = nodes[0]
    context = state_text("You steer a warehouse robot.", planner.state.to_json())
    scores = await running_tiny.score(context, n.key.describe(), cands, schema, deadline=math.inf)
    assert scores.best is not None
    assert readable[scores.best] == n.action


async def test_auto_picks_the_cheaper_way_per_device() -> None:
    schema = ActionSchema.from_json_schema(CHOICE)
    cands = schema.enumerate(16)
    space = EventSpace.from_specs(EVENTS)

    def planner(backend: ScriptedBackend) -> Planner:
        return make_planner(
            backend,
            space,
            schema,
            description="d",
            candidates=cands,
        )

    # a slow step and a fast prefill (a GPU): scoring one pass beats decoding steps
    async with ScriptedBackend(step_s=0.05, prefill_s=0.001, prefill_per_token_s=1e-5) as gpu:
        p = planner(gpu)
        costs = p.seconds_per_branch()
        assert costs["score"] < costs["generate"]
        assert p.method() == "score"
    # a slow prefill per token (a small CPU): batched generation wins
    async with ScriptedBackend(step_s=0.001, prefill_s=0.001, prefill_per_token_s=0.01) as cpu:
        p = planner(cpu)
        assert p.method() == "generate"
    with pytest.raises(ConfigError, match=r"planner\.method"):
        make_planner(
            gpu,
            space,
            schema,
            description="d",
            config=PlannerConfig(method="score"),
        )


def test_look_ahead_counts_a_later_states_events_only_as_far_as_they_beat_the_planner() -> None:
    events = [
        {"type": "block", "deadline_ms": 100, "weight": 1, "effects": {"zone": "blocked"}},
        {"type": "ping", "params": {"n": [1, 2]}, "deadline_ms": 100, "weight": 3},
    ]
    space = EventSpace.from_specs(events)
    f = Forecaster(space)
    start = WorldState({"zone": "aisle"})
    blocked = start.patched({"zone": "blocked"}).fingerprint

    def uses(pace: Pace | None, where: str = blocked) -> float:
        found = look_ahead(start, forecaster=f, space=space, drift=None, horizon=12, pace=pace)
        return sum(e.uses for e in found if e.fingerprint == where)

    full = uses(None)
    slow = uses(Pace(gap_s=1.0, batch=8, batch_s=30.0))  # events far outpace the planner
    fast = uses(Pace(gap_s=1.0, batch=8, batch_s=0.2))
    instant = uses(Pace(gap_s=1.0, batch=8, batch_s=1e-4))
    assert 0 == instant < fast < slow <= full
    assert slow == pytest.approx(full, rel=1e-2)
    # one batch of every key 0.2 gaps after entering: the first event beats it with
    # 1 - e^-0.2, the second with 1 - e^-0.2 (1 + 0.2); entering has mass 1/4 per event
    lam = 0.2
    late = (
        (1 - math.exp(-lam))
        + (1 - math.exp(-lam) * (1 + lam))
        + (1 - math.exp(-lam) * (1 + lam + lam**2 / 2))
    )
    entered = sum((3 / 4) ** t * (1 / 4) for t in range(11))
    assert fast == pytest.approx(entered * late, rel=0.05)
    # the current state's events all count, however fast the planner
    home = start.fingerprint
    assert uses(Pace(gap_s=1.0, batch=8, batch_s=1e-4), home) == pytest.approx(uses(None, home))


@pytest.mark.parametrize("horizon", [1, 4, 16, 64])
async def test_the_value_floor_is_a_rate_so_it_cuts_the_same_keys_at_every_horizon(
    horizon: int,
) -> None:
    # No effects: the state stays, so a key of per-event chance p is expected p x horizon times
    space = EventSpace.from_specs(
        [
            {"type": "often", "deadline_ms": 100, "weight": 0.97},
            {"type": "mid", "deadline_ms": 100, "weight": 0.02},
            {"type": "rare", "deadline_ms": 100, "weight": 0.01, "params": {"k": [1, 2, 3, 4]}},
        ]
    )
    schema = ActionSchema.from_json_schema(spec_data()["action"])
    async with ScriptedBackend() as backend:
        planner = make_planner(
            backend,
            space,
            schema,
            description="d",
            config=PlannerConfig(horizon=horizon, min_rate=0.005, cost_weight=0.0),
            live_tiers=False,
        )
        kept = {b.key.type for b in planner.candidates()}
    # "mid" (0.02 an event) stays at horizon 1, where its chance within the horizon is 0.02;
    # each "rare" key (0.0025) goes at 64, where its chance within the horizon is 0.15
    assert kept == {"often", "mid"}


def test_the_planner_paces_states_to_come_by_the_gaps_it_saw_not_only_their_mean() -> None:
    async def observe_bursts() -> Pace | None:
        async with ScriptedBackend() as backend:
            planner = make_planner(
                backend,
                gap_space(3),
                ActionSchema.from_json_schema(spec_data()["action"]),
                description="d",
                config=PlannerConfig(horizon=4, cost_weight=0.0),
            )
            elapse = _virtual_elapse()
            for gap in (0.15, 2.7) * 5:  # bursts of two, on the loop's (virtual) clock
                planner.observe(None)
                elapse(gap)
            planner.observe(None)
            return planner.pace()

    loop = VirtualTimeLoop()
    try:
        pace = loop.run_until_complete(observe_bursts())
    finally:
        loop.close()
    assert pace is not None
    assert pace.gaps == pytest.approx((0.15, 2.7) * 5)
    assert 0.15 < pace.gap_s < 2.7


def gap_space(top: int) -> EventSpace:
    """One event type, ``gap``, on a grid m = 0..top with a tolerance of one step."""
    return EventSpace.from_specs(
        [
            {
                "type": "gap",
                "params": {"m": {"min": 0, "max": top, "step": 1}},
                "tolerance": {"m": 1},
                "deadline_ms": 100,
            }
        ]
    )


async def test_planner_leaves_to_a_grid_neighbour_the_share_it_answers_as_the_model_would() -> None:
    space = gap_space(3)
    schema = ActionSchema.from_json_schema(spec_data()["action"])
    tree = PolicyTree()
    async with ScriptedBackend() as backend:
        planner = make_planner(
            backend,
            space,
            schema,
            tree=tree,
            description="d",
            config=PlannerConfig(horizon=4, cost_weight=0.0),
        )
        assert len(planner.candidates()) == 4
        fp = planner.state.fingerprint_for("gap")
        tree.insert(
            PolicyNode(fp, EventKey("gap", (("m", 1),)), {"action": "stop"}, "", 1, "m", 1, 0, 0)
        )
        # m=0 and m=2 may borrow m=1 (tolerance 1): with no pair seen yet, half their need
        # is met (agreement 0.5), so m=3, whose need is whole, comes first
        ranked = planner.candidates()
        assert ranked[0].key == EventKey("gap", (("m", 3),))
        values = {b.key: b.value for b in ranked}
        assert values[EventKey("gap", (("m", 0),))] < values[EventKey("gap", (("m", 3),))]


@pytest.mark.parametrize("agree", [True, False])
async def test_planner_learns_whether_neighbours_agree_and_writes_accordingly(
    agree: bool,
) -> None:
    space = gap_space(6)
    schema = ActionSchema.from_json_schema(spec_data()["action"])

    def action(text: str) -> dict[str, Any]:
        if agree:
            return {"action": "stop"}
        return {"action": "stop" if int(text.rsplit("=", 1)[1]) % 2 else "go"}

    tree = PolicyTree()
    async with ScriptedBackend(action=action) as backend:
        planner = make_planner(
            backend,
            space,
            schema,
            tree=tree,
            description="d",
            config=PlannerConfig(horizon=4, batch_size=2, min_rate=0.05, cost_weight=0.0),
            live_tiers=False,
        )
        await plan_until_idle(planner)
    pairs = planner.agreement.pairs("gap")
    assert pairs > 0
    written = len(list(tree.nodes()))
    if agree:
        assert planner.agreement.rate("gap") > 0.5
        assert written < 7  # neighbours answer the rest as the model would
    else:
        assert planner.agreement.rate("gap") < 0.5
        assert written == 7  # every key written: a neighbour's answer would not be the model's


# -- the budget ----------------------------------------------------------------------------------


def test_the_budget_bucket_fills_at_its_rate_and_holds_a_minute() -> None:
    bucket = BudgetBucket(PlannerBudget(branches_per_minute=6), now=0.0)
    assert bucket.branches(0.0, 0.5) == 6  # a minute's worth to start with
    bucket.spend(0.0, branches=6, device_s=3.0)
    assert bucket.branches(0.0, 0.5) == 0
    assert bucket.wait_s(0.0, 0.5) == pytest.approx(10.0)  # one branch each 10 s
    assert bucket.branches(25.0, 0.5) == 2
    assert bucket.branches(1000.0, 0.5) == 6  # never more than a minute's worth
    seconds = BudgetBucket(PlannerBudget(device_s_per_minute=3), now=0.0)
    assert seconds.branches(0.0, 0.5) == 6  # 3 device-s at 0.5 s a branch
    seconds.spend(0.0, branches=2, device_s=4.0)  # a batch may overdraw
    assert seconds.wait_s(0.0, 0.5) == pytest.approx((0.5 + 1.0) / (3 / 60))
    with pytest.raises(ValidationError):
        PlannerBudget()
    with pytest.raises(ValidationError):
        PlannerBudget(branches_per_minute=5, device_s_per_minute=1)


def test_a_budgeted_planner_writes_its_most_valuable_branches_and_no_more() -> None:
    # Five keys, no events: unbounded, the planner writes them all at once; with 2 branches a
    # minute it writes 2 at once (the bucket starts with a minute's worth) and one per 30 s
    # after, the most valuable keys first.
    space = EventSpace.from_specs(EVENTS)
    schema = ActionSchema.from_json_schema(spec_data()["action"])

    async def written(budget: PlannerBudget | None, minutes: float) -> list[EventKey]:
        tree = PolicyTree()
        async with ScriptedBackend(step_s=0.01, prefill_s=0.01, action={"action": "go"}) as backend:
            p = make_planner(
                backend,
                space,
                schema,
                tree=tree,
                config=PlannerConfig(horizon=1, min_rate=0.0, budget=budget),
            )
            ranked = [b.key for b in p.candidates()]
            run = asyncio.create_task(p.run())
            await elapse(minutes * 60)
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
        keys = [n.key for n in sorted(tree.nodes(), key=lambda n: n.created_at)]
        assert set(keys) <= set(ranked)
        return [k for k in ranked if k in keys]

    free = run_virtual(written(None, 1.0))
    capped = run_virtual(written(PlannerBudget(branches_per_minute=2), 0.6))
    assert len(free) == len(space)
    assert len(capped) == 2 + 1  # 2 at once, then one at 30 s (the next is due at 60 s)
    assert capped == free[: len(capped)]  # the most valuable first
