"""The ``forethought`` command line.

Errors Forethought raises on purpose print one line (``error: ...``) and exit 2: a user of the
CLI never sees a traceback for bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from forethought.planner import DEFAULT_MODEL
from forethought.policies import ForethoughtError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="forethought",
        description="Act on LLM decisions within hard deadlines.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench", help="measure the latency law and each optimisation on this device"
    )
    bench.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="alias, local directory, .gguf file or cached Hugging Face id",
    )
    bench.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    bench.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    bench.add_argument("--grammar", default="llguidance", choices=["llguidance", "xgrammar"])
    bench.add_argument("--quick", action="store_true", help="about a minute on a 2-core CPU")
    bench.add_argument(
        "--suite",
        default="model",
        choices=["model", "planner", "all"],
        help="model: the latency law and the model layer; planner: the idle-time planner",
    )
    bench.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="also write the figures as JSON"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "bench":
            from forethought._bench import run_bench  # noqa: PLC0415 - loads torch

            run_bench(
                model=args.model,
                device=args.device,
                dtype=args.dtype,
                grammar=args.grammar,
                quick=args.quick,
                json_path=args.json,
                suite=args.suite,
            )
    except ForethoughtError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
