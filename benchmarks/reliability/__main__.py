"""``python -m benchmarks.reliability``: load the model, run every row, check the targets.

What ``forethought bench --suite reliability`` ran before the suite left the package: the same
rows, targets and report (``--json``), on the model loaded and warmed up once.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from forethought.models import DEFAULT_MODEL, TransformersBackend

from .suite import reliability_targets, run_reliability_bench


def _target(value: float | None, op: str, bound: float) -> dict[str, Any]:
    v = float("nan") if value is None else float(value)
    ok = v >= bound if op == ">=" else v <= bound
    return {"value": v, "op": op, "bound": bound, "pass": bool(ok)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reliability")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="as forethought bench's")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--grammar", default="llguidance", choices=["llguidance", "xgrammar"])
    parser.add_argument("--quick", action="store_true", help="fewer cases, kills and rounds")
    parser.add_argument(
        "--load-minutes",
        type=float,
        default=None,
        metavar="MIN",
        help="how long R1's load and R7's memory watch run (default 10)",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    t_start = time.perf_counter()
    backend = TransformersBackend(
        model=args.model, device=args.device, dtype=args.dtype, grammar=args.grammar
    )
    loaded = backend.load(warm_up=True)
    print(f"model {args.model} on {loaded.device} ({loaded.dtype}), grammar {args.grammar}")
    report: dict[str, Any] = {"model": args.model, "quick": args.quick, "suite": "reliability"}
    report["device"], report["dtype"] = loaded.device, loaded.dtype
    report["reliability"] = run_reliability_bench(
        backend, quick=args.quick, load_minutes=args.load_minutes
    )
    targets = {k: _target(*v) for k, v in reliability_targets(report["reliability"]).items()}
    report["latency_profile"] = asdict(backend.latency.profile())
    report["seconds"] = time.perf_counter() - t_start
    report["targets"] = targets
    for k, v in targets.items():
        print(
            f"target {k:38s} {v['value']:.3f} {v['op']} {v['bound']}  "
            f"{'PASS' if v['pass'] else 'MISS'}"
        )
    print(f"bench took {report['seconds']:.0f} s")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_bytes(
            orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
