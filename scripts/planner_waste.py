"""Planner waste beside the reference, per scenario: the figures of docs/results/planner-waste.

    .venv/bin/python scripts/planner_waste.py --out docs/results/planner-waste.json \\
        [--profile cpu-2core-smollm2] [--strategy tree,hybrid] [--budget 0,10,30] [NAME|PATH ...]

One virtual-clock replay per scenario, strategy and budget (SmolLM2; virtual time makes a
replay's figures a function of scenario, seed, model and profile, so one round is the
figure): answered in time, planner waste, the reference waste at the tree's coverage
(:mod:`forethought.sims._waste`) and coverage per branch. Fidelity references are not computed
(they need a deadline-free answer per event and change nothing here). Rows are appended to
the JSON as they finish, with the commit, date, machine, profile and rounds, so a long run
can be read while it goes; ``scripts/results_tables.py`` turns the JSON into markdown.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from forethought.models import TransformersBackend
from forethought.planner import PlannerBudget, PlannerConfig
from forethought.sims import (
    load_scenario,
    metrics,
    replay,
    replay_threads,
    resolve_profile,
    shipped_scenarios,
)


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], check=False).returncode != 0
    return out.stdout.strip() + ("+dirty" if dirty else "")


def _paths(names: list[str]) -> list[Path]:
    shipped = {load_scenario(p).name: p for p in shipped_scenarios()}
    if not names:
        return list(shipped.values())
    return [shipped[n] if n in shipped else Path(n) for n in names]


def main() -> None:
    """Replay, and append one row per scenario, strategy and budget to ``--out``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--profile", default="cpu-2core-smollm2")
    ap.add_argument("--strategy", default="tree")
    ap.add_argument("--budget", default="0", help="branches per minute, comma list (0: none)")
    ap.add_argument("--note", default="", help="said beside each row (say, 'written after')")
    ap.add_argument("names", nargs="*", help="shipped scenario names or scenario files")
    args = ap.parse_args()
    backend = TransformersBackend(
        model="smollm2-135m", threads=replay_threads("virtual", args.profile)
    )
    backend.load()
    profile = resolve_profile(args.profile, backend)
    data: dict[str, Any] = {
        "commit": _commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''} "
        f"{os.cpu_count()} CPUs ({platform.platform()})".replace("  ", " "),
        "model": "smollm2-135m",
        "profile": args.profile,
        "clock": "virtual",
        "rounds": 1,
        "rows": [],
    }
    if args.out.exists():
        old = orjson.loads(args.out.read_bytes())
        data["rows"] = old.get("rows", [])
    for path in _paths(args.names):
        sc = load_scenario(path)
        for budget in (float(b) for b in args.budget.split(",")):
            planner = PlannerConfig(
                budget=PlannerBudget(branches_per_minute=budget) if budget > 0 else None
            )
            t0 = time.perf_counter()
            runs = replay(
                sc,
                backend,
                strategies=tuple(args.strategy.split(",")),
                profile=profile,
                planner=planner,
            )
            for name, run in runs.items():
                m = metrics(run)
                p = m["planner"] or {}
                row = {
                    "scenario": sc.name,
                    "strategy": name,
                    "budget_branches_per_minute": budget or None,
                    "note": args.note,
                    "events": m["events"],
                    "answered_in_time": m["answered_in_time"],
                    "tree_coverage": p.get("tree_coverage"),
                    "branches": p.get("generated"),
                    "used": p.get("used"),
                    "waste": p.get("waste"),
                    "reference_waste": p.get("reference_waste"),
                    "reference_planned": p.get("reference_planned"),
                    "coverage_per_branch": p.get("coverage_per_branch"),
                    "planner_busy_s": p.get("busy_s"),
                    "wall_s": round(time.perf_counter() - t0, 1),
                }
                data["rows"].append(row)
                print(orjson.dumps(row).decode(), flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    print(f"json: {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
