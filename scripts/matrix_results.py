"""Write docs/results/matrix.json from the JSON of ``forethought sim --matrix`` runs.

The planner's strategies and the live ones are run apart (``live-naive`` decodes every verbose
answer and dominates a run; the live strategies run no planner, so they need no re-run when
only the planner changes). Each run is one source, named with its commit, date, command and
wall time; every cell is taken from the source that ran its strategy::

    forethought sim --matrix --strategy live-naive,live --json build/matrix-live.json
    forethought sim --matrix --strategy tree,hybrid --json build/matrix-tree.json
    python scripts/matrix_results.py \
        --source build/matrix-live.json "--strategy live-naive,live" 1530 \
        --source build/matrix-tree.json "--strategy tree,hybrid" 610

A source's commit is the one checked out when this runs, unless ``--commit`` names it (one per
source, in order). ``--keep live`` carries the ``live`` cells, and the run they came from, over
from the matrix.json being replaced (for a change that leaves the live strategy's code path as
it was). ``scripts/docs_pages.py`` renders the page and the README's headline.
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
TARGET = ROOT / "docs" / "results" / "matrix.json"
STRATEGIES = ("live-naive", "live", "tree", "hybrid")
_CELL = ("correct_in_time", "answered_in_time", "fallback_rate")
_PLANNER = ("waste", "reference_waste", "coverage_per_branch", "branches_used")


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return out.stdout.strip()


def _wall(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s} s" if minutes else f"{s} s"


def _pc(x: float | None) -> float | None:
    return None if x is None else round(100 * x, 1)


def _cell(row: dict[str, Any]) -> dict[str, Any]:
    cell: dict[str, Any] = {k: round(100 * row[k]) for k in _CELL}
    if row.get("waste") is not None:
        cell["waste"] = _pc(row["waste"])
        cell["reference_waste"] = _pc(row["reference_waste"])
        cell["coverage_per_branch"] = row["coverage_per_branch"]
        cell["branches"] = [row["branches_used"], row["branches_generated"]]
    return cell


def results(
    sources: list[tuple[dict[str, Any], str, float, str]],
    notes: str | None,
    kept: tuple[dict[str, Any], tuple[str, ...]] | None = None,
    title: str = "Every shipped scenario under every shipped profile",
) -> dict[str, Any]:
    """matrix.json's content: ``sources`` are (run JSON, command options, wall s, commit).

    ``kept``: a previous matrix.json and the strategies whose cells (and sources) it gives.
    """
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    described = []
    models = set()
    if kept is not None:
        old, strategies = kept
        for row in old["rows"]:
            for strategy in strategies:
                if row.get(strategy) is not None:
                    cells.setdefault((row["scenario"], row["profile"]), {})[strategy] = row[
                        strategy
                    ]
        described += [d for d in old["sources"] if set(d["strategies"]) <= set(strategies)]
        models.update(m.strip() for m in old["machine"].split(";")[-1].split(","))
    for run, options, wall, commit in sources:
        models.add(run["model"])
        ran = sorted({r["strategy"] for r in run["rows"]}, key=STRATEGIES.index)
        for r in run["rows"]:
            cells.setdefault((r["scenario"], r["profile"]), {})[r["strategy"]] = _cell(r)
        described.append(
            {
                "strategies": ran,
                "commit": commit,
                "date": datetime.date.today().isoformat(),
                "rounds": 1,
                "command": f"forethought sim --matrix {options}",
                "wall": _wall(wall),
            }
        )
    rows = [
        {"scenario": s, "profile": p, **{k: got.get(k) for k in STRATEGIES}}
        for (s, p), got in sorted(cells.items())
    ]
    commits = sorted({d["commit"] for d in described})
    return {
        "title": title,
        "commit": ", ".join(commits),
        "date": datetime.date.today().isoformat(),
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} (no GPU); "
            f"{', '.join(sorted(models))}"
        ),
        "profile": "all four shipped profiles: "
        + ", ".join(dict.fromkeys(r["profile"] for r in rows)),
        "rounds": 1,
        "command": "; ".join(d["command"] for d in described),
        "sources": described,
        "unit": "percent, rounded; each cell: correct_in_time / answered_in_time / fallback_rate",
        "rows": rows,
        "notes": notes or "",
        "stale": None,
    }


def main() -> int:
    """Read the runs, write matrix.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source",
        nargs=3,
        action="append",
        required=True,
        metavar=("JSON", "OPTIONS", "WALL_S"),
        help="a sim --matrix JSON, the options it ran with, its wall time in seconds",
    )
    parser.add_argument("--commit", action="append", help="each source's commit, in order")
    parser.add_argument(
        "--keep",
        action="append",
        choices=STRATEGIES,
        help="carry this strategy's cells and source over from the matrix.json being replaced",
    )
    parser.add_argument("--notes", type=Path, help="a Markdown file of notes under the table")
    parser.add_argument("--out", type=Path, default=TARGET)
    parser.add_argument("--title", default="Every shipped scenario under every shipped profile")
    args = parser.parse_args()
    commits = args.commit or [_commit()] * len(args.source)
    if len(commits) != len(args.source):
        parser.error(f"--commit: {len(commits)} given for {len(args.source)} sources")
    sources = [
        (json.loads(Path(path).read_text()), options, float(wall), commit)
        for (path, options, wall), commit in zip(args.source, commits, strict=True)
    ]
    notes = args.notes.read_text().strip() if args.notes else None
    kept = (json.loads(args.out.read_text()), tuple(args.keep)) if args.keep else None
    data = results(sources, notes, kept, args.title)
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
