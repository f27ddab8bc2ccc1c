"""``forethought sim SCENARIO --fleet N[,N...]``: fleets of N robots sharing one planner."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import orjson

from forethought.commands._sim import _load, _profile
from forethought.commands._sim_closed_loop import open_loop_only
from forethought.policies import ConfigError
from forethought.sims import FleetRun, fleet_replay, load_scenario, replay_threads
from forethought.sims.internals import FleetStates

__all__ = ["fleet_sizes", "fleet_table", "run_fleet_sim"]


def fleet_sizes(text: str) -> list[int]:
    """``1,4,16,64`` -> [1, 4, 16, 64]; a clear error naming ``--fleet`` otherwise."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(n < 1 or n > 1024 for n in sizes):
        raise ConfigError("--fleet", text, "give robot counts from 1 to 1024, e.g. 1,4,16,64")
    return sizes


def fleet_table(runs: list[FleetRun]) -> str:
    """One line per fleet size (fleet-wide figures)."""
    head = (
        "| robots | events | answered in time | correct in time | branches | waste | "
        "planning s / robot | wall s |\n|---|---|---|---|---|---|---|---|"
    )
    rows = [
        f"| {r.size} | {r.events} | {r.answered_in_time:.1%} | {r.correct_in_time:.1%} | "
        f"{r.branches} | {r.waste:.1%} | {r.planning_s_per_robot:.2f} | {r.wall_s:.0f} |"
        for r in runs
    ]
    return "\n".join([head, *rows])


def _as_json(run: FleetRun) -> dict[str, Any]:
    return {
        "robots": run.size,
        "events": run.events,
        "answered_in_time": run.answered_in_time,
        "correct_in_time": run.correct_in_time,
        "branches": run.branches,
        "planned_states": run.planned_states,
        "used": run.used,
        "waste": run.waste,
        "planner_busy_s": run.planner_busy_s,
        "planning_s_per_robot": run.planning_s_per_robot,
        "wall_s": run.wall_s,
        "per_robot": [
            {
                "robot": r.robot,
                "seed": r.seed,
                "events": r.events,
                "answered_in_time": r.answered_in_time,
                "correct_in_time": r.correct_in_time,
                "graded": r.graded,
                "planning_s": run.planning_s_per_robot,
            }
            for r in run.robots
        ],
    }


def run_fleet_sim(
    *,
    scenario_path: Path,
    sizes: list[int],
    states: FleetStates = "shared",
    profile: str | None,
    model: str,
    device: str,
    dtype: str,
    json_path: Path | None,
) -> list[FleetRun]:
    """Replay each fleet size in turn, print the table, write the JSON (if asked)."""
    scenario = open_loop_only(load_scenario(scenario_path), "--fleet")
    backend = _load(
        model, device, dtype, threads=replay_threads("virtual", profile, scenario.profile)
    )
    pname, prof = _profile(profile, scenario, backend)
    runs = []
    for n in sizes:
        run = fleet_replay(scenario, backend, robots=n, profile=prof, states=states)
        runs.append(run)
        print(fleet_table([run]).splitlines()[-1], flush=True)
    print(fleet_table(runs))
    if json_path is not None:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607  (the checkout's own git)
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        data = {
            "scenario": scenario.name,
            "model": model,
            "profile": pname,
            "states": states,
            "commit": commit or None,
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
            "rounds": 1,
            "fleets": [_as_json(r) for r in runs],
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return runs
