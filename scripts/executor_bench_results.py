"""Write docs/results/executor-bench.json from a before/after run of the executor bench.

    .venv/bin/python scripts/executor_bench_results.py [build/executor-before-after.json]
    .venv/bin/python scripts/docs_pages.py          # renders executor-bench.md

The input is ``benchmarks/executor_before_after.py``'s JSON (every side's medians over the
interleaved rounds); the page gives one column per side, with the targets beside them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "results" / "executor-bench.json"

_FIGURES = (
    (
        "tree-hit decision p50 / p99 / p99.9",
        ("tree_hit_p50_ms", "tree_hit_p99_ms", "tree_hit_p999_ms"),
        "p99 ≤ 0.050 ms",
    ),
    ("event loop's wake-up lag p99", ("loop_lag_p99_ms",), ""),
    ("planner busy during the tree hits", ("tree_planner_busy",), ""),
    ("MQTT publish → action p50 / p99", ("mqtt_p50_ms", "mqtt_p99_ms"), "p99 ≤ 3 ms"),
    ("Zenoh put → action p50 / p99", ("zenoh_p50_ms", "zenoh_p99_ms"), "p99 ≤ 2 ms"),
)


def _cell(figures: dict[str, float], keys: tuple[str, ...]) -> str:
    if keys == ("tree_planner_busy",):
        return f"{100 * figures[keys[0]]:.0f} %"
    digits = 3 if keys[0].startswith("tree_hit") else 2
    return " / ".join(f"{figures[k]:.{digits}f}" for k in keys) + " ms"


def page(run: dict[str, Any]) -> dict[str, Any]:
    """The results page's JSON for ``run``."""
    sides = run["sides"]
    commits = run["commits"]
    names = {
        side: (
            f"{side} ({commits['before'][:7]})"
            if side == "before"
            else f"{side} ({commits['after'][:7]}{'+dirty' if commits.get('after_dirty') else ''})"
        )
        for side in sides
    }
    load = run["machine"]
    return {
        "title": "The executor bench: the event path before and after",
        "commit": f"{commits['before'][:7]}, {commits['after'][:7]}",
        "date": run["date"][:10],
        "machine": (
            f"{load['name']}, {load['cpus']} cores, {load['platform']} (load average "
            f"{load['loadavg_start'][0]:.1f} at the start, {load['loadavg_end'][0]:.1f} at "
            "the end)"
        ),
        "profile": "none (real time, the embedded model on a thread)",
        "rounds": run["rounds"],
        "command": "benchmarks/executor_before_after.py --base "
        f"{commits['before'][:7]} --rounds {run['rounds']}"
        + "".join(f" --switch-ms {ms:g}" for ms in run.get("switch_ms", [0.5]))
        + "".join(f" --threads {n}" for n in run.get("threads", [])),
        "intro": (
            "`forethought bench --suite executor --quick` in a fresh process per side and "
            "round: 2,000 tree hits at 200 Hz in process, then 500 MQTT events and 500 Zenoh "
            "events at 50 Hz (publish or put → action received), the planner generating "
            "throughout. Sides: the event path before (two queues joined by a copy task, the "
            "deadline resolved twice, the id checked three times, an answer validated up to "
            "three times) and after (one queue, each once)"
            + (
                ", the same code with the interpreter's switch interval at "
                + ", ".join(f"{ms:g} ms" for ms in run["switch_ms"])
                + " instead of 5 ms"
                if run.get("switch_ms", [0.5])
                else ""
            )
            + (
                ", and the same code with torch decoding on fewer threads than the cores "
                "(`TransformersBackend(threads=N)`), which leaves the event loop's thread a core"
                if run.get("threads")
                else ""
            )
            + ". Rounds interleaved, the order rotating; medians of the rounds."
        ),
        "columns": ["figure", *(names[s] for s in sides), "target"],
        "rows": [
            [label, *(_cell(run["medians"][s], keys) for s in sides), target]
            for label, keys, target in _FIGURES
        ],
        "notes": run.get("notes", ""),
    }


def main() -> int:
    """Read the run, write the page's JSON."""
    source = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "executor-before-after.json"
    )
    run = json.loads(source.read_text())
    TARGET.write_text(json.dumps(page(run), indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
