"""Write docs/results/main-job.json from the JSON of one ``scripts/main`` run.

``scripts/main`` writes ``build/sim/warehouse-amr.json`` (both profiles, every strategy); this
turns it into the results file the main-job page is generated from (``scripts/docs_pages.py``),
naming the commit, date, machine and the wall times measured around the runs::

    python scripts/main_job_results.py build/sim/warehouse-amr.json --wall-s 299.2 --wall-s 301.0
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "results" / "main-job.json"
_FIGURES = ("correct_in_time", "answered_in_time", "fallback_rate", "fidelity")


def _pc(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def _cell(strategy: dict[str, Any]) -> str:
    return " / ".join(_pc(strategy[f]) for f in _FIGURES)


def _waste(strategy: dict[str, Any]) -> str:
    planned = strategy.get("planner")
    if not planned:
        return "—"
    return (
        f"{_pc(planned['waste'])} ({planned['used']} / {planned['generated']}); "
        f"reference {_pc(planned.get('reference_waste'))}"
    )


def results(run: dict[str, Any], walls: list[float], commit: str) -> dict[str, Any]:
    """The results file's content for one run's JSON."""
    profiles = list(run["profiles"])
    strategies = list(run["profiles"][profiles[0]]["strategies"])
    columns = ["strategy"]
    for p in profiles:
        columns += [f"{p}: correct / answered in time / fallback / fidelity", f"{p}: waste"]
    rows = []
    for s in strategies:
        row = [s]
        for p in profiles:
            fig = run["profiles"][p]["strategies"][s]
            row += [_cell(fig), _waste(fig)]
        rows.append(row)
    wall = ", ".join(f"{w:.0f} s" for w in walls)
    return {
        "title": f"The main job: {run['scenario']}, every strategy under two devices",
        "commit": commit,
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} (no GPU)",
        "profile": ", ".join(profiles),
        "rounds": len(walls),
        "command": "scripts/main",
        "intro": (
            f"The first 60 events of {run['scenario']} on {run['model']}, virtual clock, seed "
            f"{run['seed']}, replayed under the embedded model's own profile and a slow "
            f"model's, every strategy side by side. Wall time after set-up: {wall} "
            f"({len(walls)} runs; their outputs were byte-identical)."
        ),
        "columns": columns,
        "rows": rows,
        "notes": (
            "A fallback is never a hit. Waste: planner branches never used over those written "
            "(used / generated), beside the reference waste of a planner that knows the "
            "stream at the same coverage."
        ),
    }


def main() -> None:
    """Parse the arguments and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the JSON scripts/main wrote")
    parser.add_argument("--wall-s", type=float, action="append", required=True)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    data = results(json.loads(args.run.read_text()), args.wall_s, commit)
    TARGET.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
