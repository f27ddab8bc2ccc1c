"""``forethought bench``: load the model, run the chosen suites, check the targets.

Suites: ``model`` (the latency law and each optimisation, :mod:`._model`), ``planner`` and
``executor``. Figures are measured side by side in one run; ``--quick`` trims repetitions and
sweep points for a shorter run (minutes on a 2-core CPU). On a terminal, each wait (loading,
warm-up, every section) shows progress. (The reliability suite, abuse and what must hold under
it, is the repository's ``benchmarks/reliability/``, not a command of the package.)
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from forethought.internals import Bars
from forethought.models import TransformersBackend

from ._model import BENCH_ACTION, ModelBench

__all__ = ["BENCH_ACTION", "run_bench"]


def run_bench(
    *,
    model: str,
    device: str,
    dtype: str,
    grammar: str,
    quick: bool,
    json_path: Path | None,
    suite: str = "model",
    say: Callable[[str], None] = print,
    backend_url: str | None = None,
) -> dict[str, Any]:
    """Run the suite's sections and return (and optionally write) the figures.

    Progress (loading, warm-up, each section) is drawn on standard error when it is a terminal.
    """
    with Bars() as bars:
        return _run_bench(
            model=model,
            device=device,
            dtype=dtype,
            grammar=grammar,
            quick=quick,
            json_path=json_path,
            suite=suite,
            say=say,
            backend_url=backend_url,
            bars=bars,
        )


def _run_bench(
    *,
    model: str,
    device: str,
    dtype: str,
    grammar: str,
    quick: bool,
    json_path: Path | None,
    suite: str,
    say: Callable[[str], None],
    backend_url: str | None,
    bars: Bars,
) -> dict[str, Any]:
    """:func:`run_bench`'s body.

    ``suite``: ``model`` (the latency law and the model layer), ``planner``, ``executor``, or
    ``all`` (the three). ``backend_url`` (an inference server) runs the server suite instead:
    the law's figures for the server, side by side with the in-process model.
    """
    # A measurement script, step after step in the order the report prints: long, linear.
    t_start = time.perf_counter()
    report: dict[str, Any] = {"model": model, "quick": quick, "suite": suite}
    load: dict[str, Any] = {}
    if not quick:  # a converting load in a fresh cache folder, then the cached one
        with tempfile.TemporaryDirectory() as tmp, bars.wait("loading the model (converting)"):
            first = TransformersBackend(
                model=model, device=device, dtype=dtype, cache_dir=Path(tmp)
            )
            load["converting_s"] = first.load(warm_up=False).load_seconds
            del first
    backend = TransformersBackend(model=model, device=device, dtype=dtype, grammar=grammar)
    with bars.wait("loading the model"):
        loaded = backend.load(warm_up=False)
    if loaded.converted or "converting_s" not in load:
        load["converting_s"] = (
            loaded.conversion_seconds if not loaded.converted else loaded.load_seconds
        )
    cached = TransformersBackend(model=model, device=device, dtype=dtype)
    with bars.wait("loading the model again (cached)"):
        load["cached_s"] = cached.load(warm_up=False).load_seconds
    del cached
    t0 = time.perf_counter()
    with bars.wait("warm-up"):
        backend.warm_up()
    load["warm_up_s"] = time.perf_counter() - t0
    conv = load.get("converting_s")
    load["cached_over_converting"] = load["cached_s"] / conv if conv else None
    report["load"] = load
    report["device"], report["dtype"] = loaded.device, loaded.dtype
    say(f"model {model} on {loaded.device} ({loaded.dtype}), grammar {grammar}")
    say(
        f"load: converting {conv and round(conv, 1)} s, cached {load['cached_s']:.1f} s, "
        f"warm-up {load['warm_up_s']:.1f} s"
    )
    targets: dict[str, dict[str, Any]] = {}
    if backend_url is not None:
        from ._server import run_server_bench  # noqa: PLC0415

        report["server"] = run_server_bench(backend_url, backend, quick=quick, say=say)
        suite = "server"
    if suite in ("model", "all"):
        bench = ModelBench(backend, quick, say)
        sections = (
            "law",
            "compact_vs_verbose",
            "constrained",
            "score_vs_generate",
            "batching",
            "live_paths",
            "cancellation",
        )
        advance = bars.bar("model suite (sections)", len(sections))
        for name in sections:
            report[name] = getattr(bench, name)()
            advance(1)
        targets |= _targets(report, grammar)
    if suite in ("planner", "all"):
        from ._planner import (  # noqa: PLC0415
            planner_targets,
            run_planner_bench,
        )

        with bars.wait("planner suite"):
            report["planner"] = run_planner_bench(backend, quick=quick, say=say)
        targets |= {k: _target(*v) for k, v in planner_targets(report["planner"]).items()}
    if suite in ("executor", "all"):
        from ._executor import (  # noqa: PLC0415
            executor_targets,
            run_executor_bench,
        )

        with bars.wait("executor suite"):
            report["executor"] = run_executor_bench(backend, quick=quick, say=say)
        targets |= {k: _target(*v) for k, v in executor_targets(report["executor"]).items()}
    report["latency_profile"] = asdict(backend.latency.profile())
    report["seconds"] = time.perf_counter() - t_start
    report["targets"] = targets
    for k, v in report["targets"].items():
        say(
            f"target {k:38s} {v['value']:.3f} {v['op']} {v['bound']}  "
            f"{'PASS' if v['pass'] else 'MISS'}"
        )
    say(f"bench took {report['seconds']:.0f} s")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_bytes(
            orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        )
        say(f"wrote {json_path}")
    return report


def _target(value: float | None, op: str, bound: float) -> dict[str, Any]:
    v = float("nan") if value is None else float(value)
    ok = v >= bound if op == ">=" else v <= bound
    return {"value": v, "op": op, "bound": bound, "pass": bool(ok)}


def _targets(r: dict[str, Any], grammar: str) -> dict[str, dict[str, Any]]:
    t = _target
    constrained = r["constrained"].get(grammar, {})
    return {
        "T vs N_out fit r2": t(r["law"]["fit"]["r2"], ">=", 0.98),
        "compact / verbose tokens": t(r["compact_vs_verbose"]["token_ratio"], "<=", 0.25),
        "constrained overhead per token": t(constrained.get("overhead"), "<=", 0.05),
        "batch16 / sequential16 branches/s": t(r["batching"]["speedup16"], ">=", 5.0),
        "generate / score8 time": t(r["score_vs_generate"]["speedup"], ">=", 2.0),
        "cancel overshoot p95 (steps)": t(r["cancellation"]["p95_in_steps"], "<=", 1.0),
        "cached / converting load": t(r["load"]["cached_over_converting"], "<=", 0.25),
        "live reuse+jump / neither": t(r["live_paths"]["ratio"], "<=", 0.6),
    }
