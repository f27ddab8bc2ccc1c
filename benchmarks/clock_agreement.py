"""Virtual against real clock on this machine: three scenarios, every strategy, one JSON.

    python benchmarks/clock_agreement.py --json docs/results/clock-agreement.json

For each scenario: measure this machine (``cpu-measured``, on the scenario's own calls), replay
on the real clock right after, then on the virtual clock charged by that profile, and record
both figures per strategy, their gap, and each side's per-call log. One run per clock and
scenario (a real-clock replay takes the scenario's own duration). ``--events N`` replays each
scenario's first N events (both clocks the same N), so the whole run fits a quiet window on a
shared machine; the JSON says so.
Then ``python scripts/clock_agreement_md.py`` writes the results page from the JSON.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from forethought.models import TransformersBackend
from forethought.policies import ConfigError
from forethought.sims import load_scenario, measure_profile
from forethought.sims._agreement import compare_clocks

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("conveyor-sorter", "inspection-drone", "warehouse-amr")


def _git(*args: str) -> str:
    git = shutil.which("git") or "git"
    out = subprocess.run([git, *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _machine() -> dict[str, Any]:
    cpu = "unknown"
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def main() -> None:
    """Run the comparison and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=ROOT / "docs/results/clock-agreement.json")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--strategies", default="live,tree,hybrid")
    parser.add_argument("--events", type=int, default=None, help="each scenario's first N events")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the profile measurement")
    parser.add_argument(
        "--max-spread",
        type=float,
        default=1.5,
        help="refuse to measure when the rounds' decode steps vary more than this (busy machine)",
    )
    args = parser.parse_args()
    strategies = tuple(s.strip() for s in args.strategies.split(","))
    backend = TransformersBackend(model=args.model, device="cpu", dtype=args.dtype)
    backend.load()
    started = time.time()
    results = []
    for name in args.scenarios.split(","):
        scenario = load_scenario(ROOT / "sims" / "scenarios" / f"{name}.yaml")
        if args.events is not None:
            scenario = scenario.model_copy(
                update={"trace": scenario.events()[: args.events], "generate": None}
            )
        load = os.getloadavg()[0]
        print(f"{name}: measuring this machine (load {load:.2f})", file=sys.stderr, flush=True)
        for attempt in range(3):  # a busy moment is refused: wait it out, a little
            try:
                profile = measure_profile(
                    backend, scenario=scenario, rounds=args.rounds, max_spread=args.max_spread
                )
                break
            except ConfigError as exc:
                if attempt == 2:
                    raise
                print(f"  {exc}; again in 20 s", file=sys.stderr, flush=True)
                time.sleep(20)
        both = compare_clocks(
            scenario,
            backend,
            strategies=strategies,
            profile_name="cpu-measured",
            profile=profile,
        )
        print(both.table(), flush=True)
        results.append({**both.as_json(), "events": len(scenario.events()), "load_1m": load})
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    data = {
        "title": "The simulator against the real clock",
        "command": "python benchmarks/clock_agreement.py " + " ".join(sys.argv[1:]),
        # The page is written from this file by its own script, not scripts/docs_pages.py.
        "generator": "scripts/clock_agreement_md.py",
        "commit": _git("rev-parse", "HEAD") + ("+dirty" if dirty else ""),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": _machine(),
        "model": args.model,
        "profile": "cpu-measured (measured at the start of each scenario, on its calls; "
        "the real replay runs right after, then the virtual one)",
        "rounds": {
            "profile_measurement": args.rounds,
            "replays": "one per clock, scenario and strategy",
        },
        "events_per_scenario": args.events,
        "wall_s": round(time.time() - started, 1),
        "scenarios": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    print(f"json: {args.json}")


if __name__ == "__main__":
    main()
