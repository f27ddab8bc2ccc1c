"""Coverage against waste as the planner's floor rises, per scenario (strategy ``tree``).

    .venv/bin/python scripts/waste_frontier.py [--floors 0.0001,0.003,0.01] [NAME ...]

With no live tier to displace, the planner writes every branch whose expected uses per event
of the horizon reach ``planner.min_rate``. Raising that floor trades
answered events for fewer never-used branches; this prints the trade per shipped scenario
(one replay per floor on the scenario's fixed profile, SmolLM2, references shared so fidelity
compares like with like), so a claim about waste can be read next to what it costs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from forethought.models import TransformersBackend
from forethought.planner import PlannerConfig
from forethought.sims import load_scenario, metrics, replay, replay_threads, shipped_scenarios
from forethought.sims._fidelity import add_references
from forethought.sims._levers import fixed_profile


def main() -> None:
    """Print one line per scenario and floor."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--floors", default="0.0001,0.003,0.01")
    ap.add_argument("names", nargs="*", help="scenario names (default: every shipped one)")
    args = ap.parse_args()
    floors = [float(f) for f in args.floors.split(",")]
    backend = TransformersBackend(model="smollm2-135m", threads=replay_threads("virtual"))
    backend.load()
    for path in shipped_scenarios():
        sc = load_scenario(path)
        if args.names and sc.name not in args.names:
            continue
        _, profile = fixed_profile(sc)
        refs: dict[tuple[str, str], dict[str, Any] | None] = {}
        for floor in floors:
            runs = replay(
                sc,
                backend,
                strategies=("tree",),
                profile=profile,
                planner=PlannerConfig(min_rate=floor),
            )
            add_references(sc, runs, backend, cache=refs)
            m = metrics(runs["tree"])
            p = m["planner"] or {}
            print(
                f"{sc.name:<18} floor {floor:<6g} answered {m['answered_in_time']:6.1%}  "
                f"fidelity {m['fidelity']:6.1%}  correct {m['correct_in_time']:6.1%}  "
                f"used/generated {p['used']}/{p['generated']}  waste {p['waste']:6.1%}  "
                f"(unused in states that came {p['unused_state_visited']}, "
                f"that did not {p['unused_state_never']}; near key/state "
                f"{m['tree_near_event']}/{m['tree_near_state']})",
                flush=True,
            )


if __name__ == "__main__":
    main()
