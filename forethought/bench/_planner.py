"""``forethought bench --suite planner``: the idle-time planner on the embedded model.

A shipped-style warehouse event space of 30 keys. Figures: time to cover the 8 most likely
events after a state change, coverage reached with idle time, how busy the planner keeps the
model while work remains, CPU used while asleep, how long an urgent caller waits for the model,
the forecaster's calibration (log loss, Brier) on a Markov stream against the best possible and
on the shipped traces, snapshot speed, and the planner's levers one by one on the large
scenario (coverage, fidelity, waste: :mod:`forethought.sims._levers`).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from forethought.models import TransformersBackend
from forethought.models.internals import ModelGate
from forethought.planner import PlannerConfig
from forethought.planner.internals import Forecaster, Planner, calibration, markov_bound
from forethought.policies import (
    ActionSchema,
    EventKey,
    EventSpace,
    PolicyNode,
    PolicyTree,
    WorldState,
)
from forethought.sims import load_scenario, shipped_scenarios
from forethought.sims.internals import LEVERS, fixed_profile, lever_runs

from ._model import BENCH_ACTION as ACTION

__all__ = ["WAREHOUSE_EVENTS", "run_planner_bench"]

LARGE = "amr-night-shift"
"""The large unseen-style scenario the levers are measured on."""

WAREHOUSE_EVENTS: list[dict[str, Any]] = [
    {
        "type": "obstacle",
        "deadline_ms": 600,
        "weight": 4,
        "effects": {"zone": "blocked"},
        "params": {
            "side": ["left", "right", "front"],
            "distance_m": {"min": 0.5, "max": 2.0, "step": 0.5},
        },
    },
    {
        "type": "person",
        "deadline_ms": 400,
        "weight": 3,
        "params": {"side": ["left", "right", "front"], "distance_m": [1, 2]},
    },
    {
        "type": "battery_low",
        "deadline_ms": 3000,
        "weight": 1,
        "effects": {"battery": "$level"},
        "params": {"level": [0.1, 0.2, 0.3]},
    },
    {"type": "path_clear", "deadline_ms": 1500, "weight": 2, "effects": {"zone": "aisle"}},
    {"type": "forklift", "deadline_ms": 500, "weight": 2, "params": {"side": ["left", "right"]}},
    {"type": "dock_free", "deadline_ms": 5000, "weight": 1, "params": {"dock": [1, 2, 3]}},
    {"type": "estop", "deadline_ms": 200, "weight": 0.5},
    {"type": "spill", "deadline_ms": 800, "weight": 1, "params": {"distance_m": [1, 2]}},
]
DESCRIPTION = (
    "You drive an autonomous mobile robot in a warehouse. Keep people and goods "
    "safe; prefer stopping when unsure."
)


async def _cpu_per_s(seconds: float) -> float:
    cpu0 = time.process_time()
    await asyncio.sleep(seconds)
    return (time.process_time() - cpu0) / seconds


async def _planner_run(
    backend: TransformersBackend, quick: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    async with backend:
        return await _planner_session(backend, quick, say)


async def _planner_session(
    backend: TransformersBackend, quick: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    space = EventSpace.from_specs(WAREHOUSE_EVENTS)
    schema = ActionSchema.from_json_schema(ACTION)
    await backend.prepare(schema)
    box: list[Planner] = []
    tree = PolicyTree(max_nodes=2_000, on_evict=lambda _: box[0].wake())
    gate = ModelGate()
    start_state = WorldState({"zone": "aisle", "battery": 0.8})
    planner = Planner(
        backend=backend,
        gate=gate,
        space=space,
        schema=schema,
        tree=tree,
        forecaster=Forecaster(space),
        description=DESCRIPTION,
        state=start_state,
        config=PlannerConfig(horizon=1 if quick else 2, batch_size=8),
    )
    box.append(planner)
    out: dict[str, Any] = {"keys": len(space)}
    loop = asyncio.get_running_loop()
    # Baseline: what this process burns with the model loaded and nothing running at all.
    out["baseline_cpu_s_per_s"] = await _cpu_per_s(2.0)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(planner.run(), name="forethought.planner")
        # 1. cold start: time until the first state's 8 most likely events are covered
        t0 = loop.time()
        planner.track_cover()
        out["cover8_cold_s"] = await planner.wait_covered()
        # 2. an urgent caller takes the model from a busy planner
        waits = []
        for _ in range(3 if quick else 8):
            await asyncio.sleep(0.15)
            if planner.sleeping:
                break
            t1 = loop.time()
            async with gate.urgent():
                waits.append(loop.time() - t1)
        out["urgent_wait_ms"] = [round(w * 1e3, 1) for w in waits]
        # 3. until asleep: coverage and how busy the model was
        await planner.wait_idle()
        wall = loop.time() - t0
        out["first_state"] = {
            "wall_s": wall,
            "busy_s": planner.stats.busy_s,
            "busy_fraction": planner.stats.busy_s / wall,
            "coverage": planner.coverage(),
            "branches": len(tree),
        }
        # 4. asleep: CPU used by this process while nothing is left to plan (after torch's
        # OpenMP workers, which spin briefly after their last op, have gone idle)
        await asyncio.sleep(0.5)
        out["asleep_cpu_s_per_s"] = await _cpu_per_s(2.0)
        # 5. a state change: time to cover the new state's 8 most likely events
        busy0 = planner.stats.busy_s
        t2 = loop.time()
        planner.set_state(start_state.patched({"zone": "loading", "battery": 0.6}))
        await planner.wait_idle()
        wall2 = loop.time() - t2
        out["state_change"] = {
            "cover8_s": planner.stats.cover_times_s[-1],
            "wall_s": wall2,
            "busy_fraction": (planner.stats.busy_s - busy0) / wall2,
            "coverage": planner.coverage(),
        }
        task.cancel()
    out["stats"] = planner.stats.as_dict()
    out["max_tree_size"] = len(tree)
    say(
        f"planner: {len(space)} keys; cold cover of top-8 {out['cover8_cold_s']:.2f} s; "
        f"after a state change {out['state_change']['cover8_s']:.2f} s"
    )
    say(
        f"  coverage when asleep {out['first_state']['coverage']:.3f} / "
        f"{out['state_change']['coverage']:.3f}; model busy "
        f"{out['first_state']['busy_fraction']:.2f} / {out['state_change']['busy_fraction']:.2f}"
        f" of the wall time while work remained"
    )
    say(
        f"  asleep: {out['asleep_cpu_s_per_s'] * 1e3:.1f} ms CPU per s (idle process baseline "
        f"{out['baseline_cpu_s_per_s'] * 1e3:.1f}); urgent caller waited "
        f"{out['urgent_wait_ms']} ms for a busy planner"
    )
    return out


def _markov(space: EventSpace, n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """A stream whose types follow a sticky chain unlike the declared weights."""
    rng = np.random.default_rng(seed)
    keys = space.keys()
    types = list(space.types)
    t = len(types)
    trans_t = rng.dirichlet(np.full(t, 0.3), size=t)
    per = {ty: [i for i, k in enumerate(keys) if k.type == ty] for ty in types}
    trans = np.zeros((len(keys), len(keys)))
    for i, k in enumerate(keys):
        row = trans_t[types.index(k.type)]
        for j, ty in enumerate(types):
            trans[i, per[ty]] = row[j] / len(per[ty])
    seq = [0]
    for _ in range(n - 1):
        seq.append(int(rng.choice(len(keys), p=trans[seq[-1]])))
    return trans, seq


def _forecaster_calibration(say: Callable[[str], None]) -> dict[str, Any]:
    """One-step-ahead log loss and Brier score: priors only, learned, and the best possible."""
    space = EventSpace.from_specs(WAREHOUSE_EVENTS)
    keys = space.keys()
    out: dict[str, Any] = {}
    trans, seq = _markov(space, 1500, seed=11)
    stream = [(keys[i], "s") for i in seq]
    for after in (30, 100, 500):
        window = stream[: after + 100]
        out[f"markov_after_{after}"] = {
            "prior": calibration(
                lambda: Forecaster(space), window, learn=False, skip=after
            ).as_dict(),
            "learned": calibration(lambda: Forecaster(space), window, skip=after).as_dict(),
            "best": markov_bound(trans, seq[: after + 100], skip=after).as_dict(),
        }
    m = out["markov_after_500"]
    say(
        f"forecaster on a Markov stream, events 500-600: log loss learned "
        f"{m['learned']['log_loss']:.3f} / priors {m['prior']['log_loss']:.3f} / best "
        f"{m['best']['log_loss']:.3f} nats; Brier {m['learned']['brier']:.3f} / "
        f"{m['prior']['brier']:.3f} / {m['best']['brier']:.3f}"
    )
    m = out["markov_after_30"]
    say(
        f"  after 30 events: log loss learned {m['learned']['log_loss']:.3f} / priors "
        f"{m['prior']['log_loss']:.3f} / best {m['best']['log_loss']:.3f}"
    )
    traces: dict[str, Any] = {}
    for path in shipped_scenarios():
        sc = load_scenario(path)
        sp = sc.spec.event_space()
        st = sc.key_stream()
        traces[sc.name] = {
            "events": len(st),
            "prior": calibration(partial(Forecaster, sp), st, learn=False).as_dict(),
            "learned": calibration(partial(Forecaster, sp), st).as_dict(),
        }
        t = traces[sc.name]
        say(
            f"  trace {sc.name:<18} {t['events']:>4} events: log loss learned "
            f"{t['learned']['log_loss']:.3f} / priors {t['prior']['log_loss']:.3f}"
        )
    out["traces"] = traces
    return out


def _levers(
    backend: TransformersBackend, quick: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    """The planner levers one by one on the large scenario (tree strategy, fixed profile)."""
    path = next(p for p in shipped_scenarios() if p.stem == LARGE)
    scenario = load_scenario(path)
    levers = tuple(lv for lv in LEVERS if not quick or lv[0] in ("none", "+scoring"))
    say(
        f"planner levers on {LARGE} ({len(scenario.events())} events, "
        f"{len(scenario.spec.event_space())} keys), strategy tree, profile "
        f"{fixed_profile(scenario)[0]}:"
    )
    rows = lever_runs(scenario, backend, levers=levers, say=say)
    return {"scenario": LARGE, "rows": rows}


def _snapshot_speed(say: Callable[[str], None]) -> dict[str, float]:
    tree = PolicyTree(max_nodes=10_000)
    for i in range(12_000):  # past the cap: it must hold
        tree.insert(
            PolicyNode(
                f"s{i % 40}",
                EventKey("obstacle", (("i", i),)),
                {"action": "stop", "speed": 0.0},
                '{"a":"stop","s":0}',
                (i % 97) / 97,
                "smollm2-135m",
                9,
                0.3,
                float(i),
            )
        )
    assert len(tree) == 10_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree.json"
        t0 = time.perf_counter()
        tree.save(path, schema="s", model_id="m")
        save = time.perf_counter() - t0
        t0 = time.perf_counter()
        back = PolicyTree.load(path, schema="s", model_id="m")
        load = time.perf_counter() - t0
    say(f"snapshot of {len(back)} nodes: save {save * 1e3:.0f} ms, load {load * 1e3:.0f} ms")
    return {"nodes": len(back), "save_s": save, "load_s": load}


def run_planner_bench(
    backend: TransformersBackend, *, quick: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    """Run the planner suite on a loaded backend."""
    # A measurement script, step after step in the order the report prints: long, linear.
    out = asyncio.run(_planner_run(backend, quick, say))
    out["forecaster"] = _forecaster_calibration(say)
    out["snapshot"] = _snapshot_speed(say)
    out["levers"] = _levers(backend, quick, say)
    return out


def planner_targets(r: dict[str, Any]) -> dict[str, tuple[float, str, float]]:
    """(value, op, bound) per issue-3 target."""
    return {
        "cover top-8 after state change (s)": (r["state_change"]["cover8_s"], "<=", 2.0),
        "coverage with idle time": (
            min(r["first_state"]["coverage"], r["state_change"]["coverage"]),
            ">=",
            0.95,
        ),
        "model busy while work remains": (
            min(r["first_state"]["busy_fraction"], r["state_change"]["busy_fraction"]),
            ">=",
            0.90,
        ),
        "CPU asleep above idle baseline (s/s)": (
            r["asleep_cpu_s_per_s"] - r["baseline_cpu_s_per_s"],
            "<=",
            0.005,
        ),
        "forecaster log-loss gap to best (500 ev)": (
            r["forecaster"]["markov_after_500"]["learned"]["log_loss"]
            - r["forecaster"]["markov_after_500"]["best"]["log_loss"],
            "<=",
            0.1,
        ),
        f"{LARGE}: tree answered in time (all levers)": (
            r["levers"]["rows"][-1]["answered_in_time"],
            ">=",
            0.90,
        ),
        f"{LARGE}: planner waste (all levers)": (r["levers"]["rows"][-1]["waste"], "<=", 0.50),
        "snapshot 10k save+load (s)": (
            r["snapshot"]["save_s"] + r["snapshot"]["load_s"],
            "<=",
            1.0,
        ),
    }
