"""Play the shipped closed-loop scenarios under every strategy; write docs/results/closed_loop.json.

The matrix page's closed-loop section (rendered by ``scripts/docs_pages.py``) reads it::

    python scripts/closed_loop_results.py --episodes 2 [--profile cpu-2core-smollm2]
    python scripts/docs_pages.py

Each scenario: every strategy plays ``--episodes`` episodes (seeds the scenario's seed, +1,
...) on the embedded model in virtual time charged by the profile; the figures are each
strategy's closed-loop scoreboard (:func:`forethought.sims.closed_loop_score`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

from forethought.models import DEFAULT_MODEL, TransformersBackend
from forethought.sims import (
    STRATEGIES,
    ClosedLoopRun,
    closed_loop_replay,
    closed_loop_score,
    closed_loop_table,
    load_scenario,
    replay_threads,
    resolve_profile,
    scenario_world,
)

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "results" / "closed_loop.json"
SCENARIOS = sorted((ROOT / "sims" / "scenarios" / "closed_loop").glob("*.yaml"))


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _actions(run: ClosedLoopRun) -> dict[str, int]:
    """How often each model-written action was emitted in time, over every episode."""
    counts = Counter(
        " ".join(f"{k}={v}" for k, v in r.action.items())
        for r in run.records_run().records
        if r.model_written and r.met
    )
    return dict(sorted(counts.items()))


def main() -> int:
    """Run, print each scoreboard, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--profile", default="cpu-2core-smollm2")
    parser.add_argument("--notes", default=None)
    args = parser.parse_args()
    backend = TransformersBackend(
        model=DEFAULT_MODEL,
        device="cpu",
        dtype="float32",
        threads=replay_threads("virtual", args.profile),
    )
    backend.load()
    profile = resolve_profile(args.profile, backend)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for path in SCENARIOS:
        scenario = load_scenario(path)
        s0 = time.perf_counter()
        runs = closed_loop_replay(
            scenario,
            backend,
            scenario_world(scenario),
            strategies=STRATEGIES,
            episodes=args.episodes,
            profile=profile,
        )
        print(closed_loop_table(scenario, runs), flush=True)
        for name, run in runs.items():
            rows.append(
                {
                    "scenario": scenario.name,
                    "world": run.world,
                    "profile": args.profile,
                    **closed_loop_score(run).as_json(),
                    "strategy": name,
                    "seeds": [e.seed for e in run.episodes],
                    # what the model wrote, over every episode: why a score is what it is
                    "model_actions": _actions(run),
                }
            )
        print(f"{scenario.name}: {time.perf_counter() - s0:.0f} s", flush=True)
    wall = time.perf_counter() - t0
    cores = os.cpu_count()
    data = {
        "title": "Closed loop: the shipped worlds under every strategy",
        "generator": "scripts/closed_loop_results.py",
        "page": "matrix.md",
        "commit": _commit(),
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {cores} cores, {platform.system()} (no GPU); "
        f"{DEFAULT_MODEL}; shared and loaded by other jobs while measured",
        "profile": args.profile,
        "rounds": 1,
        "episodes": args.episodes,
        "command": f"python scripts/closed_loop_results.py --episodes {args.episodes} "
        f"--profile {args.profile}",
        "wall_s": round(wall),
        "rows": rows,
        "notes": args.notes,
    }
    TARGET.write_text(json.dumps(data, indent=2) + "\n")
    print(f"json: {TARGET} ({wall:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
