"""The engine measurement, one command: writes docs/results/engine.json and engine.md.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/engine.py [--rounds 5] [--sim-speed 4]

Runs ``forethought bench --suite engine``'s measurements (t_step of the torch decoder, the
managed llama-server and a plain llama-server beside the bandwidth floor, interleaved; score 8
/ generate 1; branches/s at 1, 4, 8, 16 in flight; restarts after SIGKILL), then replays the
warehouse scenario on the real clock with the live strategy on each engine (the same as
``forethought sim sims/scenarios/warehouse-amr.yaml --clock real --strategy live --engine E
--speed S``), and renders the Markdown page from the JSON (benchmarks/engine_md.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

from forethought.bench import run_engine_bench
from forethought.models import DEFAULT_MODEL, ManagedServerBackend, TransformersBackend
from forethought.sims import load_scenario, metrics, replay

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "sims" / "scenarios" / "warehouse-amr.yaml"


def _sim(model: str, speed: float) -> dict[str, Any]:
    """The warehouse scenario, live strategy, real clock, on each engine in turn."""
    scenario = load_scenario(SCENARIO)
    decoder = TransformersBackend(model=model, device="cpu")
    decoder.load()
    out: dict[str, Any] = {"scenario": scenario.name, "speed": speed, "strategy": "live"}
    sources = {"torch": decoder, "llama-server": lambda: ManagedServerBackend(model=model)}
    for engine, source in sources.items():
        print(f"replaying {scenario.name} (live, real clock, speed {speed}) on {engine}")
        runs = replay(scenario, source, strategies=("live",), clock="real", speed=speed)
        m = metrics(runs["live"])
        out[engine] = {
            k: m[k]
            for k in (
                "events",
                "answered_in_time",
                "correct_in_time",
                "fallback_rate",
                "deadline_hit_rate",
                "latency_ms",
                "tiers",
                "by_type",
                "wall_s",
            )
        }
        deadlines = {t: s.deadline_ms for t, s in scenario.spec.event_space().types.items()}
        out[engine]["deadline_ms_by_type"] = deadlines
    return out


def main() -> int:
    """Measure, write the JSON, render the page."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sim-speed", type=float, default=4.0)
    parser.add_argument("--no-sim", action="store_true")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "results" / "engine.json")
    args = parser.parse_args()
    run_engine_bench(
        model=args.model,
        rounds=args.rounds,
        json_path=args.json,
        sim=None if args.no_sim else (lambda: _sim(args.model, args.sim_speed)),
        command=" ".join(["python benchmarks/engine.py", *sys.argv[1:]]),
    )
    md = args.json.with_suffix(".md")
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "engine_md.py"), str(args.json), str(md)],
        check=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
