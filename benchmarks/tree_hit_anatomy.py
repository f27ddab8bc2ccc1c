"""Where a tree hit's time goes beside the planner: the path, the interpreter's lock, or the CPU.

    .venv/bin/python benchmarks/tree_hit_anatomy.py [--rounds 3] [--json PATH] [--machine TEXT]

One process, one agent: the executor bench's spec, a scripted backend (no model on the
decision's side), the planner's cover done, so every decision is a tree hit. Its decisions are
timed (wall clock, and the loop thread's own CPU time) with each of these beside it, in turn:

* nothing: decided back to back (the path's own cost, caches warm), and 5 ms apart (as at
  200 Hz: the loop sleeps between events, so each decision starts cold);
* a thread holding the interpreter's lock (pure Python), at the default switch interval (5 ms)
  and at 0.5 ms;
* a thread streaming 64 MB arrays with numpy (the lock released; memory traffic);
* SmolLM2-135M's forward passes on a thread (what the planner does: torch, the lock released
  inside each operator), at normal priority and with that thread and torch's workers at
  ``SCHED_IDLE`` (Linux: they run only when nothing else wants the core).

Each also gives the event loop's wake-up lag (how late a 5 ms sleep returns). Conditions are
interleaved within a round, rounds repeated; medians of the rounds. What the figures tell:
a cost the lock causes shrinks with the switch interval; a cost the CPU scheduler causes
shrinks with ``SCHED_IDLE``; what neither moves is the path's own CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from forethought.bench._executor import SPEC
from forethought.models import ScriptedBackend, TransformersBackend
from forethought.planner import PlannerConfig
from forethought.policies import AgentSpec
from forethought.runtime import Agent, AgentConfig, Event, Tier

ROOT = Path(__file__).resolve().parent.parent
BENCH_PLANNER = PlannerConfig(batch_size=4, horizon=1, min_rate=0.0, cost_weight=0.0)
"""The executor bench's planner, for both agents (the scripted one and the one beside SmolLM2)."""
Work = Callable[[threading.Event], None]


def quantile_us(xs: list[float], p: float) -> float:
    """The ``p`` quantile of ``xs`` (seconds), in µs."""
    return sorted(xs)[int(p * (len(xs) - 1))] * 1e6


def _stream(stop: threading.Event) -> None:
    a = np.ones(64 * 2**20 // 8)
    b = np.empty_like(a)
    while not stop.is_set():
        np.copyto(b, a)


def _pure_python(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i


def _decode(model: Any) -> Work:
    import torch  # noqa: PLC0415 - only these conditions need it

    ids = torch.tensor([[1] * 24] * 4)

    def run(stop: threading.Event) -> None:
        with torch.inference_mode():
            while not stop.is_set():
                model.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0)

    return run


def _forward(model: Any, idle: bool) -> Work:
    import torch  # noqa: PLC0415 - only these conditions need it

    ids = torch.tensor([[1] * 48])

    def run(stop: threading.Event) -> None:
        if idle:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        with torch.inference_mode():
            model(ids)  # torch's workers start here, inheriting this thread's policy
            while not stop.is_set():
                model(ids)

    return run


async def _decisions(
    agent: Agent, n: int, gap_s: float, tag: str, *, again: bool = False
) -> dict[str, float]:
    """``n`` tree hits ``gap_s`` apart: decision wall and CPU time, and the wake-up lag.

    ``again``: after each, one more decided at once (its caches warm from the first).
    """
    loop = asyncio.get_running_loop()
    fp = agent.state.fingerprint
    hits = [node.key for node in agent.tree.branches(fp)]
    rng = random.Random(45)
    wall: list[float] = []
    cpu: list[float] = []
    lag: list[float] = []
    warm: list[float] = []
    executor = agent.executor
    assert executor is not None
    repeats = executor.stats.duplicates
    for i in range(n):
        if gap_s:
            asked = loop.time()
            await asyncio.sleep(gap_s)
            lag.append(loop.time() - asked - gap_s)
        key = rng.choice(hits)
        event = Event(f"{tag}-{i}", key.type, dict(key.params), arrived_at=loop.time())
        c0, t0 = time.thread_time(), time.perf_counter()
        decision = await agent.decide(event)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        if again:
            key = rng.choice(hits)
            event = Event(f"{tag}-{i}b", key.type, dict(key.params), arrived_at=loop.time())
            t0 = time.perf_counter()
            second = await agent.decide(event)
            warm.append(time.perf_counter() - t0)
            if second.tier is not Tier.TREE:
                raise RuntimeError(f"not a tree hit: {second}")
        if decision.tier is not Tier.TREE:
            raise RuntimeError(f"not a tree hit: {decision}")

    if executor.stats.duplicates != repeats:  # an id decided before: not a decision timed
        raise RuntimeError(f"{tag}: event ids repeated")

    out = {
        "wall_p50_us": quantile_us(wall, 0.5),
        "wall_p99_us": quantile_us(wall, 0.99),
        "cpu_p50_us": quantile_us(cpu, 0.5),
    }
    if lag:
        out |= {"lag_p50_us": quantile_us(lag, 0.5), "lag_p99_us": quantile_us(lag, 0.99)}
    if warm:
        out |= {"again_p50_us": quantile_us(warm, 0.5), "again_p99_us": quantile_us(warm, 0.99)}
    return out


async def _beside_the_planner(backend: TransformersBackend, n: int, tag: str) -> dict[str, float]:
    """Tree hits 5 ms apart while the planner generates with SmolLM2 (the executor bench's
    set-up: 400 keys, so it never runs out of work)."""
    cfg = AgentConfig.defaults(planner=BENCH_PLANNER)
    async with Agent(AgentSpec.from_data(SPEC), backend=backend, config=cfg) as agent:
        assert agent.planner is not None
        agent.planner.track_cover()
        await agent.planner.wait_covered()
        return await _decisions(agent, n, 0.005, tag, again=True)


def _conditions(model: Any) -> list[tuple[str, Work | None, float, float]]:
    """(name, what runs beside, gap between decisions, switch interval)."""
    return [
        ("nothing, back to back", None, 0.0, 0.005),
        ("nothing, 5 ms apart", None, 0.005, 0.005),
        ("a pure-Python thread (holds the lock), switch 5 ms", _pure_python, 0.005, 0.005),
        ("a pure-Python thread (holds the lock), switch 0.5 ms", _pure_python, 0.005, 0.0005),
        ("numpy streaming 64 MB (lock released)", _stream, 0.005, 0.005),
        ("SmolLM2 forward passes (torch, 2 threads)", _forward(model, False), 0.005, 0.005),
        ("SmolLM2 forward passes at SCHED_IDLE", _forward(model, True), 0.005, 0.005),
        ("SmolLM2 decoding 4 rows (transformers' generate)", _decode(model), 0.005, 0.005),
    ]


PLANNER = "the planner generating (SmolLM2 on its thread)"


class _Control:
    """Plain Python of a decision's size, no agent: 300 calls over 3,000 small objects."""

    def __init__(self) -> None:
        rng = random.Random(45)
        self.objects = [{"a": i, "b": str(i), "c": {"k": i}} for i in range(3000)]
        self.picks = [rng.randrange(3000) for _ in range(300)]

    def work(self) -> int:
        return sum(self._one(self.objects[k]) for k in self.picks)

    @staticmethod
    def _one(o: dict[str, Any]) -> int:
        return int(o["a"]) + len(o["b"]) + int(o["c"]["k"])

    async def timed(self, n: int, gap_s: float) -> dict[str, float]:
        wall: list[float] = []
        cpu: list[float] = []
        for _ in range(n):
            if gap_s:
                await asyncio.sleep(gap_s)
            c0, t0 = time.thread_time(), time.perf_counter()
            self.work()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)

        return {
            "wall_p50_us": quantile_us(wall, 0.5),
            "wall_p99_us": quantile_us(wall, 0.99),
            "cpu_p50_us": quantile_us(cpu, 0.5),
        }


CONTROLS = (
    ("control: plain Python of that size, no agent, back to back", 0.0),
    ("control: plain Python of that size, no agent, 5 ms apart", 0.005),
)


async def _run(
    backend: TransformersBackend, rounds: int, n: int, say: Callable[[str], None]
) -> dict[str, Any]:
    spec = AgentSpec.from_data(SPEC)
    scripted = ScriptedBackend(action={"action": "stop", "speed": 0}, live_s=0.001, score_s=0.001)
    cfg = AgentConfig.defaults(planner=BENCH_PLANNER)
    runs: dict[str, list[dict[str, float]]] = {}

    def keep(r: int, name: str, got: dict[str, float]) -> None:
        runs.setdefault(name, []).append(got)
        say(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in got.items()))

    async with Agent(spec, backend=scripted, config=cfg) as agent:
        assert agent.planner is not None
        agent.planner.track_cover()
        await agent.planner.wait_covered()  # every key of the start state: all tree hits
        async with asyncio.timeout(120):
            await agent.planner.wait_idle()  # nothing planned on the loop during the timings
        conditions = _conditions(backend.loaded.model)
        for r in range(rounds):
            order = conditions[r % len(conditions) :] + conditions[: r % len(conditions)]
            for c in order:
                name, work, gap_s, switch_s = c
                sys.setswitchinterval(switch_s)
                stop = threading.Event()
                thread = None
                if work is not None:
                    thread = threading.Thread(target=work, args=(stop,), daemon=True)
                    thread.start()
                    await asyncio.sleep(0.5)
                try:
                    got = await _decisions(agent, n, gap_s, f"r{r}-{conditions.index(c)}")
                finally:
                    stop.set()
                    if thread is not None:
                        await asyncio.to_thread(thread.join)
                    sys.setswitchinterval(0.005)
                keep(r, name, got)
            for name, gap_s in CONTROLS:
                keep(r, name, await _Control().timed(n, gap_s))
            keep(r, PLANNER, await _beside_the_planner(backend, n, f"r{r}-planner"))
    return {
        name: {k: statistics.median(run[k] for run in rs) for k in rs[0]}
        for name, rs in runs.items()
    }


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def _commit() -> str:
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return _git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")


def _page(medians: dict[str, Any], rounds: int, n: int, machine: str) -> dict[str, Any]:
    def cell(m: dict[str, float], key: str) -> str:
        return f"{m[key]:.0f}" if key in m else "—"

    rows = [
        [
            name,
            f"{cell(m, 'wall_p50_us')} / {cell(m, 'wall_p99_us')}",
            cell(m, "cpu_p50_us"),
            f"{cell(m, 'lag_p50_us')} / {cell(m, 'lag_p99_us')}",
        ]
        for name, m in medians.items()
    ]
    planner = medians[PLANNER]
    rows.append(
        [
            f"{PLANNER}: a second decision at once",
            f"{planner['again_p50_us']:.0f} / {planner['again_p99_us']:.0f}",
            "—",
            "—",
        ]
    )
    return {
        "title": "Anatomy of a tree hit: the path, the interpreter's lock, the CPU",
        "commit": _commit(),
        "date": dt.date.today().isoformat(),
        "machine": machine,
        "profile": "none (real time; a scripted backend decides, SmolLM2 runs beside)",
        "rounds": rounds,
        "command": f"benchmarks/tree_hit_anatomy.py --rounds {rounds}",
        "intro": (
            f"One agent, every decision a tree hit ({n:,} per condition and round), timed with "
            "each of these beside it in turn; conditions interleaved, medians of the rounds. "
            "Wall time and the loop thread's own CPU time per decision, and how late a 5 ms "
            "sleep of the event loop returns (its wake-up lag). A cost the interpreter's lock "
            "causes shrinks with the switch interval; one the CPU scheduler causes shrinks "
            "with `SCHED_IDLE` beside; what neither moves is the path's own work."
        ),
        "columns": [
            "beside the decisions",
            "decision p50 / p99 (µs)",
            "loop thread's CPU p50 (µs)",
            "wake-up lag p50 / p99 (µs)",
        ],
        "rows": rows,
        "notes": "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decisions", type=int, default=1500)
    parser.add_argument(
        "--json", type=Path, default=ROOT / "docs" / "results" / "tree-hit-anatomy.json"
    )
    parser.add_argument("--machine", default=None, help="how to name the machine in the JSON")
    args = parser.parse_args()
    backend = TransformersBackend()
    backend.load()
    load0 = os.getloadavg()[0]
    medians = _run_sync(backend, args.rounds, args.decisions)
    machine = args.machine or (
        f"{platform.node()}, {os.cpu_count()} cores, {platform.platform()} (load average "
        f"{load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)"
    )
    page = _page(medians, args.rounds, args.decisions, machine)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(page | {"medians": medians}, indent=2) + "\n")
    print(f"wrote {args.json}")


def _run_sync(backend: TransformersBackend, rounds: int, n: int) -> dict[str, Any]:
    return asyncio.run(_run(backend, rounds, n, lambda line: print(line, flush=True)))


if __name__ == "__main__":
    main()
