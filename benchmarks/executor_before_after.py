"""The executor bench before and after a change, in one run: interleaved rounds, medians.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/executor_before_after.py \
        [--base REV] [--rounds 3] [--switch-ms 0.5] [--threads 1] [--json PATH] [--machine TEXT]

Each round runs ``forethought bench --suite executor --quick``'s default mode (the model on a
thread: tree hits at 200 Hz in process, MQTT publish -> action and Zenoh put -> action at
50 Hz, the planner generating throughout) once per side, in a fresh process each: the base
commit (checked out with ``git worktree add`` into a temporary folder) and the current tree,
plus, per ``--switch-ms``, the current tree with ``sys.setswitchinterval`` set to that many
milliseconds (the experiment on the event loop's wake-up lag: how long the planner's thread
may hold the interpreter before the loop's thread gets it back), and per ``--threads``, the
current tree with torch decoding on that many threads (``TransformersBackend(threads=N)``:
fewer threads than cores leave the event loop's thread a core). The order of the sides
rotates from round to round, so a machine that gets busier or quieter during the run weighs on
each side alike. Both sides import the package from their own tree (a finder placed before
the editable install's) and share this interpreter's environment.

The JSON names the commits, the date, the machine (cores, load average at start and end),
the rounds and their order, every round's figures and each side's medians. Run it on a quiet
machine for figures to publish; on a busy one it only shows that it works.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {
    "forethought": "forethought",
    "forethought.models": "models",
    "forethought.planner": "planner",
    "forethought.policies": "policies",
    "forethought.runtime": "runtime",
    "forethought.sims": "sims",
}
"""The installed package's layers and their folders (setuptools' package-dir)."""
FIGURES = {
    "tree_hit_p50_ms": ("in_process", "p50_ms"),
    "tree_hit_p99_ms": ("in_process", "p99_ms"),
    "tree_hit_p999_ms": ("in_process", "p999_ms"),
    "loop_lag_p99_ms": ("in_process", "loop_lag_p99_ms"),
    "tree_planner_busy": ("in_process", "planner_busy_fraction"),
    "mqtt_p50_ms": ("mqtt", "p50_ms"),
    "mqtt_p99_ms": ("mqtt", "p99_ms"),
    "zenoh_p50_ms": ("zenoh", "p50_ms"),
    "zenoh_p99_ms": ("zenoh", "p99_ms"),
}
"""The figures compared: name -> (section, key) of the bench's default-mode result."""
TARGETS = {"tree_hit_p99_ms": 0.050, "mqtt_p99_ms": 3.0, "zenoh_p99_ms": 2.0}
"""Issue 45's bounds (a quiet 2-core CPU machine)."""


class _TreeFinder(importlib.abc.MetaPathFinder):
    """Finds the package's layers in one checkout, ahead of the editable install's finder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        folder = LAYERS.get(fullname)
        if folder is None:
            return None
        pkg = self.root / folder
        return importlib.util.spec_from_file_location(
            fullname, pkg / "__init__.py", submodule_search_locations=[str(pkg)]
        )


def _child(root: Path, switch_ms: float | None, threads: int | None, out: Path) -> None:
    """One side of one round, in this (fresh) process: the bench's default mode, as JSON."""
    sys.meta_path.insert(0, _TreeFinder(root))
    if switch_ms is not None:
        sys.setswitchinterval(switch_ms / 1e3)
    import asyncio  # noqa: PLC0415

    import forethought  # noqa: PLC0415
    from forethought.bench._executor import _one_mode  # noqa: PLC0415
    from forethought.models import DEFAULT_MODEL, TransformersBackend  # noqa: PLC0415
    from forethought.testing import MosquittoBroker, mosquitto_path  # noqa: PLC0415

    where = Path(forethought.__file__).resolve().parent.parent
    if where != root.resolve():
        raise SystemExit(f"imported forethought from {where}, not {root}")
    backend = (
        TransformersBackend(model=DEFAULT_MODEL, device="cpu")
        if threads is None  # the base commit may not take the argument
        else TransformersBackend(model=DEFAULT_MODEL, device="cpu", threads=threads)
    )
    backend.load(warm_up=True)
    broker = MosquittoBroker() if mosquitto_path() is not None else None
    if broker is not None:
        broker.start()
    try:
        result = asyncio.run(
            _one_mode(backend, "thread", True, lambda s: print(s, file=sys.stderr), broker)
        )
    finally:
        if broker is not None:
            broker.close()
    result["switchinterval_s"] = sys.getswitchinterval()
    out.write_text(json.dumps(result))


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _figures(result: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, (section, key) in FIGURES.items():
        value = result.get(section, {}).get(key)
        out[name] = None if value is None else float(value)
    return out


def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default=None, help="the 'before' commit (default: merge-base)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--switch-ms",
        type=float,
        action="append",
        default=[],
        help="also run the current tree with sys.setswitchinterval at this many ms (repeatable)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        action="append",
        default=[],
        help="also run the current tree with torch on this many threads (repeatable)",
    )
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "executor-before-after.json")
    parser.add_argument("--machine", default=None, help="how to name the machine in the JSON")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-switch-ms", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-threads", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    if args.child is not None:
        _child(args.child, args.child_switch_ms, args.child_threads, args.child_out)
        return 0

    base = args.base or _git("merge-base", "HEAD", "main")
    base_sha = _git("rev-parse", base)
    head_sha = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    before_dir = Path(tempfile.mkdtemp(prefix="exec-before-"))
    _git("worktree", "add", "--detach", str(before_dir), base_sha)
    sides: list[tuple[str, Path, float | None, int | None]] = [
        ("before", before_dir, None, None),
        ("after", ROOT, None, None),
    ]
    sides += [(f"after, switchinterval {ms:g} ms", ROOT, ms, None) for ms in args.switch_ms]
    sides += [
        (f"after, torch on {n} thread{'s' if n > 1 else ''}", ROOT, None, n) for n in args.threads
    ]
    started = datetime.datetime.now(datetime.UTC)
    load_start = os.getloadavg()
    rounds: list[dict[str, Any]] = []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        for r in range(args.rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for name, root, ms, threads in order:
                with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                    out = Path(f.name)
                cmd = [sys.executable, __file__, "--child", str(root), "--child-out", str(out)]
                if ms is not None:
                    cmd += ["--child-switch-ms", str(ms)]
                if threads is not None:
                    cmd += ["--child-threads", str(threads)]
                print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
                subprocess.run(cmd, check=True, env=env, cwd=root)
                result = json.loads(out.read_text())
                out.unlink()
                rounds.append({"round": r + 1, "side": name, "figures": _figures(result)})
                print(f"  {json.dumps(rounds[-1]['figures'])}", file=sys.stderr, flush=True)
    finally:
        _git("worktree", "remove", "--force", str(before_dir))
    medians = {
        name: {
            fig: _median([x["figures"][fig] for x in rounds if x["side"] == name])
            for fig in FIGURES
        }
        for name, _, _, _ in sides
    }
    report = {
        "command": "forethought bench --suite executor --quick (the model on a thread)",
        "commits": {"before": base_sha, "after": head_sha, "after_dirty": dirty},
        "date": started.isoformat(timespec="seconds"),
        "machine": {
            "name": args.machine or platform.node(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "rounds": args.rounds,
        "sides": [name for name, _, _, _ in sides],
        "switch_ms": args.switch_ms,
        "threads": args.threads,
        "targets": TARGETS,
        "medians": medians,
        "per_round": rounds,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    for name, figs in medians.items():
        shown = ", ".join(f"{k} {v:.3f}" for k, v in figs.items() if v is not None)
        print(f"{name}: {shown}")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
