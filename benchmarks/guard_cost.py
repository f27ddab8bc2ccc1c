"""What guards add to a tree-hit decision: docs/results/guard-cost.json.

    .venv/bin/python benchmarks/guard_cost.py [--rounds 7] [--events 4000]
    .venv/bin/python scripts/docs_pages.py   # renders guard-cost.md

The executor bench's event space (400 obstacle keys, a raw distance reading per event) with a
tree holding every key, so every decision is a tree hit. Executors on identical trees, one
without guards and one with four (each of whose ``when`` holds for part of the events, all of
which the stored actions keep, so every check runs to its end: the worst case for a hit that is
sent), and a third without guards as an A/A control. Each round decides the same seeded events
on all three, back to back (the order rotating per event), on one loop, so they see the same
moments of a loaded machine. A decision is timed from the call to its return, on the wall clock
(``perf_counter``) and in the thread's CPU time. Figures are the medians over rounds of each
round's p50 and p99, and of the per-round differences.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from forethought.bench._engine import _commit, _machine
from forethought.bench._model import BENCH_ACTION
from forethought.policies import AgentSpec, PolicyNode, PolicyTree
from forethought.runtime import Event, Tier
from forethought.runtime._executor import Executor

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "results" / "guard-cost.json"
GUARDS: list[dict[str, Any]] = [
    {
        "name": "stop-when-close",
        "when": {"distance_m": {"max": 0.5}},
        "allow": [{"action": "stop"}],
    },
    {
        "name": "slow-in-aisles",
        "when": {"state.zone": "aisle_4"},
        "allow": [{"speed": {"max": 0.5}}],
    },
    {"name": "no-reverse-front", "when": {"side": "front"}, "forbid": [{"action": "reverse"}]},
    {"name": "never-fast", "forbid": [{"speed": {"min": 1.2}}]},
]
SPEC: dict[str, Any] = {
    "name": "bench-guards",
    "description": "You drive an autonomous mobile robot in a warehouse. Stop for people.",
    "action": BENCH_ACTION,
    "default_action": {"action": "stop", "speed": 0},
    "state": {"zone": "aisle_4", "battery": 0.72},
    "events": [
        {
            "type": "obstacle",
            "deadline_ms": 600,
            "params": {
                "side": ["left", "right", "front", "rear"],
                "distance_m": {"min": 0.1, "max": 10.0, "step": 0.1},
            },
        }
    ],
}


def _executor(spec: AgentSpec, *, guarded: bool) -> Executor:
    schema, space, state = spec.action_schema(), spec.event_space(), spec.initial_state()
    tree = PolicyTree(max_nodes=10_000)
    for key in space:
        action = {"action": "stop", "speed": 0.2}  # keeps every guard: each check runs whole
        fp = state.fingerprint_for(key.type)
        tree.insert(PolicyNode(fp, key, action, "", 1.0, "bench", 0, 0.0, 0.0))
    return Executor(
        space=space,
        schema=schema,
        tree=tree,
        default_action=spec.default_action,
        description=spec.description,
        guards=spec.guard_set() if guarded else None,
    )


async def _round(
    trio: tuple[Executor, ...], spec: AgentSpec, params: list[dict[str, Any]], tag: str
) -> list[tuple[list[float], list[float]]]:
    """Each event decided by every executor back to back, the order rotating per event.

    Per executor: the wall-clock and the thread CPU time of each decision.
    """
    loop = asyncio.get_running_loop()
    state = spec.initial_state()
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in trio]
    n = len(trio)
    for i, p in enumerate(params):
        for k in (j % n for j in range(i, i + n)):
            now = loop.time()
            event = Event(f"{tag}{k}-{i}", "obstacle", p, arrived_at=now, deadline=now + 0.6)
            c0 = time.thread_time_ns()
            t0 = time.perf_counter()
            d = await trio[k].decide(event, state)
            t1 = time.perf_counter()
            c1 = time.thread_time_ns()
            out[k][0].append(t1 - t0)
            out[k][1].append((c1 - c0) / 1e9)
            if d.tier is not Tier.TREE:
                raise RuntimeError(f"not a tree hit: {d}")
    return out


def _q(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(int(p * len(s)), len(s) - 1)] * 1e6


def measure(rounds: int, events: int) -> dict[str, Any]:
    spec = AgentSpec.from_data({**SPEC, "guards": GUARDS})
    rng = random.Random(47)
    params = [
        {
            "side": rng.choice(["left", "right", "front", "rear"]),
            "distance_m": round(rng.uniform(0.1, 10.0), 3),
        }
        for _ in range(events)
    ]
    # (variant, clock) -> per round (p50, p99), in µs
    variants = ("off", "again", "on")
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {
        (v, c): [] for v in variants for c in ("wall", "cpu")
    }
    check: list[float] = []  # the guard check alone, per call (the same actions and events)

    async def run() -> None:
        trio = tuple(_executor(spec, guarded=v == "on") for v in variants)
        await _round(trio, spec, params[:500], "w-")  # warm them up
        guards, state = spec.guard_set(), spec.initial_state()
        action = {"action": "stop", "speed": 0.2}
        for r in range(rounds):
            got = await _round(trio, spec, params, f"r{r}-")
            for p in params:
                t0 = time.perf_counter()
                guards.refusal(action, p, state)
                check.append(time.perf_counter() - t0)
            for k, v in enumerate(variants):
                for c, xs in zip(("wall", "cpu"), got[k], strict=True):
                    figures[v, c].append((_q(xs, 0.5), _q(xs, 0.99)))

    asyncio.run(run())
    m = _machine()

    def med(v: str, c: str, i: int) -> float:
        return statistics.median(f[i] for f in figures[v, c])

    def diff(c: str, i: int, other: str = "on") -> float:
        return statistics.median(
            b[i] - a[i] for a, b in zip(figures["off", c], figures[other, c], strict=True)
        )

    rows = [
        [
            f"tree hit, {label} {q}",
            f"{med('off', c, i):.1f} µs",
            f"{med('again', c, i):.1f} µs",
            f"{med('on', c, i):.1f} µs",
            f"{diff(c, i):+.1f} µs",
            f"{diff(c, i, 'again'):+.1f} µs",
        ]
        for c, label in (("cpu", "CPU time"), ("wall", "wall clock"))
        for i, q in ((0, "p50"), (1, "p99"))
    ]
    rows.append(
        [
            "the guard check alone, p50 / p99",
            "",
            "",
            f"{_q(check, 0.5):.2f} / {_q(check, 0.99):.2f} µs",
            "",
            "",
        ]
    )
    return {
        "title": "What guards add to a tree hit",
        "commit": _commit(),
        "date": datetime.date.today().isoformat(),
        "machine": (
            f"{m['cpu']}, {m['cores']} cores, load average {m['loadavg_at_start']} at the start"
        ),
        "profile": "none (real time, in process, no model)",
        "rounds": rounds,
        "command": f"benchmarks/guard_cost.py --rounds {rounds} --events {events}",
        "intro": (
            f"{events} tree-hit decisions per round on three executors with identical trees: "
            f"without guards, without guards again (an A/A control: what the tail does with "
            f"no change at all), and with {len(GUARDS)} guards (every one evaluated to its end "
            "on every hit); each event decided by all three back to back, the order rotating "
            "per event; medians over rounds. The guard check alone is timed on the same "
            "events and actions each round. The target: a guard check adds at most 5 µs to a "
            "tree hit's p99."
        ),
        "columns": [
            "figure",
            "no guards",
            "no guards, again",
            f"{len(GUARDS)} guards",
            "guards minus none",
            "again minus none (noise)",
        ],
        "rows": rows,
        "notes": (
            "Differences are medians of per-round differences. CPU time is the deciding "
            "thread's (CLOCK_THREAD_CPUTIME_ID); the wall clock adds the time the thread was "
            "not running. The p99 of a decision of about 15 µs sits on the tail of "
            "preemptions and collector pauses; on a loaded machine it moves by tens of µs "
            "between runs with no change at all: the A/A column is that noise, measured "
            "beside the rest (the machine's load is in its line above). The "
            "guard check alone is what guards add to each decision's own work. "
            "Per round, CPU p99 off / on (µs): "
            + "; ".join(
                f"{a[1]:.1f} / {b[1]:.1f}"
                for a, b in zip(figures["off", "cpu"], figures["on", "cpu"], strict=True)
            )
            + "; wall p99 off / on (µs): "
            + "; ".join(
                f"{a[1]:.1f} / {b[1]:.1f}"
                for a, b in zip(figures["off", "wall"], figures["on", "wall"], strict=True)
            )
            + "."
        ),
        "p99_difference_us": diff("cpu", 1),
        "check_p99_us": _q(check, 0.99),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--events", type=int, default=4000)
    args = parser.parse_args()
    data = measure(args.rounds, args.events)
    TARGET.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(data["rows"], ensure_ascii=False))
    return 0 if data["check_p99_us"] <= 5.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
