"""The tree strategy's figures for two planner pages, as JSON rows (virtual clock, one thread).

``levers``: :func:`forethought.sims.internals.lever_runs` on amr-night-shift, each lever added
to the row above (docs/results/planner-levers.json). ``state-fields``: the scenarios that
declare ``state_fields``, replayed as shipped and with every state field in every fingerprint
(:func:`without_abstraction`), references shared between the two (docs/results/
state-fields.json). Each scenario runs on its own fixed profile, so the rows are the same on
any machine of one torch build and CPU instruction set::

    python scripts/tree_rows.py levers --out build/levers.json
    python scripts/tree_rows.py state-fields --out build/state-fields.json \
        inspection-drone service-kiosk warehouse-amr recorded-amr
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson

from forethought.models import TransformersBackend
from forethought.sims import load_scenario, metrics, replay, replay_threads, shipped_scenarios
from forethought.sims.internals import (
    add_references,
    fixed_profile,
    lever_runs,
    without_abstraction,
)

LARGE = "amr-night-shift"


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], check=False).returncode != 0
    return out.stdout.strip() + ("+dirty" if dirty else "")


def _row(run_metrics: dict[str, Any], wall_s: float) -> dict[str, Any]:
    planner = run_metrics["planner"] or {}
    return {
        "answered_in_time": run_metrics["answered_in_time"],
        "correct_in_time": run_metrics["correct_in_time"],
        "fidelity": run_metrics["fidelity"],
        "used": planner.get("used"),
        "generated": planner.get("generated"),
        "waste": planner.get("waste"),
        "busy_s": planner.get("busy_s"),
        "wall_s": round(wall_s, 1),
    }


def _state_fields(backend: TransformersBackend, names: list[str]) -> list[dict[str, Any]]:
    shipped = {load_scenario(p).name: load_scenario(p) for p in shipped_scenarios()}
    rows = []
    for name in names:
        scenario = shipped[name]
        profile_name, profile = fixed_profile(scenario)
        refs: dict[tuple[str, str], dict[str, Any] | None] = {}
        for keyed, sc in (("every field", without_abstraction(scenario)), ("declared", scenario)):
            t0 = time.monotonic()
            runs = replay(sc, backend, strategies=("tree",), profile=profile)
            add_references(sc, runs, backend, cache=refs)
            row = {"scenario": name, "profile": profile_name, "key": keyed}
            rows.append(row | _row(metrics(runs["tree"]), time.monotonic() - t0))
            print(orjson.dumps(rows[-1]).decode(), flush=True)
    return rows


def main() -> None:
    """Replay, print each row as it finishes, write them all to ``--out``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("levers", "state-fields"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("names", nargs="*", help="state-fields: shipped scenario names")
    args = ap.parse_intermixed_args()  # names may follow --out
    backend = TransformersBackend(model="smollm2-135m", threads=replay_threads("virtual"))
    backend.load()
    started = time.monotonic()
    if args.what == "levers":
        scenario = next(load_scenario(p) for p in shipped_scenarios() if p.stem == LARGE)
        rows = lever_runs(scenario, backend, say=lambda line: print(line, flush=True))
        for row in rows:
            row.pop("planner", None)
    else:
        rows = _state_fields(backend, args.names)
    data = {
        "commit": _commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "what": args.what,
        "threads": 1,
        "wall_s": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
