"""Replay metrics and outputs: a terminal table, JSON, JSONL decisions, an HTML report."""

from __future__ import annotations

import functools
import html
import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ._records import StrategyRun
from ._report_figures import draw_cdf, draw_timeline, report_data, type_table_html
from ._scenario import Scenario

__all__ = [
    "CAPTIONS",
    "TABLE_ROWS",
    "metrics",
    "table",
    "write_decisions",
    "write_json",
    "write_report",
]


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.quantile(np.asarray(xs), q)) if xs else None


def _share(hits: int, n: int) -> float | None:
    return hits / n if n else None


def metrics(run: StrategyRun) -> dict[str, Any]:
    """The figures of one strategy.

    ``correct_in_time`` is the headline: over graded events, the share whose action the model
    wrote for that event (tree, score or live), was emitted by the deadline, and is accepted
    by the scenario's rules. A ``default`` decision is a fallback, never a hit.
    """
    recs = run.records
    n = len(recs)
    lat = [r.latency_ms for r in recs]
    tiers: dict[str, int] = {"tree": 0, "score": 0, "live": 0, "default": 0}
    for r in recs:
        tiers[r.tier] = tiers.get(r.tier, 0) + 1
    graded = [r for r in recs if r.correct is not None]
    in_time = [r for r in recs if r.model_written and r.met]
    tree = [r for r in recs if r.tier == "tree"]
    tree_cpu = [r.decide_cpu_ms for r in tree]
    refused: dict[str, dict[str, int]] = {}
    for r in recs:
        for tier, guard in r.guarded:
            by_guard = refused.setdefault(tier, {})
            by_guard[guard] = by_guard.get(guard, 0) + 1
    by_type: dict[str, dict[str, float | None]] = {}
    for t in sorted({r.type for r in recs}):
        rs = [r for r in recs if r.type == t]
        gs = [r for r in rs if r.correct is not None]
        by_type[t] = {
            "events": len(rs),
            "answered_in_time": _share(sum(r.model_written and r.met for r in rs), len(rs)),
            "correct_in_time": _share(
                sum(bool(r.correct) and r.model_written and r.met for r in gs), len(gs)
            ),
        }
    ref = run.reference
    return {
        "events": n,
        "graded": len(graded),
        "correct_in_time": _share(
            sum(bool(r.correct) and r.model_written and r.met for r in graded), len(graded)
        ),
        "answered_in_time": _share(len(in_time), n),
        "fallback_rate": _share(sum(not r.model_written for r in recs), n),
        "correct": _share(sum(bool(r.correct) for r in graded), len(graded)),
        "fidelity": (_share(sum(ref.get(r.index) == r.action for r in recs), n) if ref else None),
        "deadline_hit_rate": _share(sum(r.met for r in recs), n),
        "latency_ms": {
            "p50": _pct(lat, 0.5),
            "p95": _pct(lat, 0.95),
            "p99": _pct(lat, 0.99),
            "max": max(lat) if lat else None,
        },
        "tiers": tiers,
        "tree_hit_rate": _share(len(tree), n),
        "tree_exact": sum(not r.approximate for r in tree),
        "tree_approximate": sum(r.approximate for r in tree),
        "tree_near_event": sum(r.nearest == "event" for r in tree),
        "tree_near_state": sum(r.nearest == "state" for r in tree),
        "fidelity_by_detail": {
            detail: (
                _share(sum(ref.get(r.index) == r.action for r in rs), len(rs)) if ref else None
            )
            for detail, rs in (
                ("tree_exact", [r for r in tree if not r.approximate]),
                ("tree_near_event", [r for r in tree if r.nearest == "event"]),
                ("tree_near_state", [r for r in tree if r.nearest == "state"]),
            )
        },
        "tree_selection_ms": {"p50": _pct(tree_cpu, 0.5), "p99": _pct(tree_cpu, 0.99)},
        "out_of_space": sum(r.out_of_space for r in recs),
        # Answers a guard refused, by tier and guard: that tier did not answer those events
        # (the record's tier is the one that did).
        "guard_refusals": refused,
        "by_type": by_type,
        "planner": run.planner or None,
        "model_time": run.model or None,
        "models": run.models or None,
        "wall_s": run.wall_s,
    }


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


_ROWS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("CORRECT IN TIME", lambda m: _pc(m["correct_in_time"])),
    ("answered in time", lambda m: _pc(m["answered_in_time"])),
    ("fallback rate", lambda m: _pc(m["fallback_rate"])),
    ("correct (graded)", lambda m: _pc(m["correct"])),
    ("fidelity", lambda m: _pc(m["fidelity"])),
    ("events / graded", lambda m: f"{m['events']}/{m['graded']}"),
    ("deadline hit rate", lambda m: _pc(m["deadline_hit_rate"])),
    ("latency p50 ms", lambda m: _fmt(m["latency_ms"]["p50"], ".2f")),
    ("latency p95 ms", lambda m: _fmt(m["latency_ms"]["p95"], ".2f")),
    ("latency p99 ms", lambda m: _fmt(m["latency_ms"]["p99"], ".2f")),
    ("latency max ms", lambda m: _fmt(m["latency_ms"]["max"], ".2f")),
    (
        "tiers t/s/l/d",
        lambda m: "/".join(str(m["tiers"][t]) for t in ("tree", "score", "live", "default")),
    ),
    (
        "tree hits exact/near key/near state",
        lambda m: f"{m['tree_exact']}/{m['tree_near_event']}/{m['tree_near_state']}",
    ),
    ("tree selection p99 ms", lambda m: _fmt(m["tree_selection_ms"]["p99"], ".3f")),
    ("out of space", lambda m: str(m["out_of_space"])),
    ("planner branches", lambda m: str((m["planner"] or {}).get("branches", "-"))),
    ("planner idle used", lambda m: _fmt((m["planner"] or {}).get("idle_used"), ".2f")),
    (
        "planner used/generated",
        lambda m: (
            f"{(m['planner'] or {}).get('used', '-')}/{(m['planner'] or {}).get('generated', '-')}"
        ),
    ),
    ("planner waste", lambda m: _pc((m["planner"] or {}).get("waste"))),
    # What a planner knowing the stream would waste at the same coverage (sims._waste).
    ("reference waste", lambda m: _pc((m["planner"] or {}).get("reference_waste"))),
    (
        "coverage per branch",
        lambda m: _fmt((m["planner"] or {}).get("coverage_per_branch"), ".2f"),
    ),
    ("replay wall s", lambda m: _fmt(m["wall_s"], ".1f")),
)
"""The sim table's rows: label, and the figure from :func:`metrics`."""

TABLE_ROWS = tuple(label for label, _ in _ROWS)
"""Every row label the sim table prints (docs/concepts/scoreboard.md defines each)."""


def _guard_rows(names: list[str]) -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    """Guard refusals per tier, then per guard (tree/score/live each)."""

    def per_tier(m: dict[str, Any], guard: str | None) -> str:
        counts = m["guard_refusals"]
        return "/".join(
            str(
                sum(counts.get(t, {}).values())
                if guard is None
                else counts.get(t, {}).get(guard, 0)
            )
            for t in ("tree", "score", "live")
        )

    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("guard refused t/s/l", lambda m: per_tier(m, None))
    ]
    rows += [(f"  {name[:20]}", functools.partial(_per_guard, per_tier, name)) for name in names]
    return rows


def _per_guard(
    per_tier: Callable[[dict[str, Any], str | None], str], guard: str, m: dict[str, Any]
) -> str:
    return per_tier(m, guard)


def table(scenario: Scenario, runs: Mapping[str, StrategyRun]) -> str:
    """A terminal table, strategies side by side."""
    ms = {k: metrics(v) for k, v in runs.items()}
    rows = list(_ROWS)
    if scenario.spec.guards:  # only a scenario with guards shows their rows
        rows += _guard_rows([g.name for g in scenario.spec.guards])
    names = list(ms)
    width = max(14, *(len(n) + 2 for n in names))
    lines = [f"{scenario.name}".ljust(24) + "".join(n.rjust(width) for n in names)]
    lines += [label.ljust(24) + "".join(f(ms[n]).rjust(width) for n in names) for label, f in rows]
    return "\n".join(lines)


def write_json(
    path: Path,
    scenario: Scenario,
    runs: Mapping[str, StrategyRun],
    *,
    model: str,
    clock: str,
    profile: Mapping[str, Any],
) -> None:
    """The JSON report (``strategies.<name>`` holds :func:`metrics`)."""
    data = {
        "scenario": scenario.name,
        "model": model,
        "clock": clock,
        "profile": dict(profile),
        "seed": scenario.seed,
        "strategies": {k: metrics(v) for k, v in runs.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def write_decisions(path: Path, runs: Mapping[str, StrategyRun]) -> None:
    """One JSON line per event and strategy (deterministic for a virtual replay)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for run in runs.values():
            for r in run.records:
                fh.write(orjson.dumps(r.as_json(), option=orjson.OPT_SORT_KEYS) + b"\n")


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def write_report(directory: Path, scenario: Scenario, runs: Mapping[str, StrategyRun]) -> Path:
    """An HTML page with PNG plots: latency CDFs, the timeline, answers per type."""
    import matplotlib as mpl  # noqa: PLC0415 - optional, only for reports

    mpl.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    directory.mkdir(parents=True, exist_ok=True)
    data = report_data(scenario, runs)
    images: dict[str, bytes] = {}
    draws: tuple[tuple[str, Callable[[Any], Any]], ...] = (
        ("latency_cdf.png", lambda p: draw_cdf(p, data)),
        ("timeline.png", lambda p: draw_timeline(p, data)),
        ("hit_rate_by_type.png", lambda p: _by_type(p, runs)),
    )
    for name, draw in draws:
        fig = draw(plt)
        images[name] = _png(fig)
        plt.close(fig)
    for name, blob in images.items():
        (directory / name).write_bytes(blob)
    index = directory / "index.html"
    index.write_text(_page(scenario, runs, list(images), type_table_html(data)), encoding="utf-8")
    return index


def _by_type(plt: Any, runs: Mapping[str, StrategyRun]) -> Any:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    types = sorted({r.type for run in runs.values() for r in run.records})
    width = 0.8 / max(len(runs), 1)
    for i, (name, run) in enumerate(runs.items()):
        rates = []
        for etype in types:
            rs = [r for r in run.records if r.type == etype]
            rates.append(sum(r.model_written and r.met for r in rs) / len(rs) if rs else 0.0)
        ax.bar(np.arange(len(types)) + i * width, rates, width=width, label=name)
    ax.set_xticks(np.arange(len(types)) + width * (len(runs) - 1) / 2, types, rotation=20)
    ax.set_ylabel("answered in time")
    ax.set_title("Model answers in time, per event type (fallbacks excluded)")
    ax.legend()
    return fig


CAPTIONS = {
    "latency_cdf.png": "Latency per strategy: the share of events decided within each latency "
    "(stimulus to decision, perception included). Read where each curve crosses a dashed "
    "deadline: the height there is the share of that type's events decided in time. A curve "
    "far left is mostly tree answers; a step at a deadline is the default sent at the budget.",
    "timeline.png": "Each strategy over the scenario's time: one lane per event type, a mark per "
    "event coloured by the tier that answered in time (black x: late). The top band is the "
    "planner, 0-100 %: tree coverage (black, share of keys planned in the current state) and "
    "planner busy (grey dotted, share of time so far). Read how fast coverage recovers after "
    "each state change (blue line).",
    "hit_rate_by_type.png": "Per event type, the share of its events the model answered in time "
    "(fallbacks excluded). Read which types a strategy cannot serve: a low bar means defaults.",
}
"""What to read from each figure of the report (its caption)."""


def _page(
    scenario: Scenario, runs: Mapping[str, StrategyRun], images: list[str], types: str
) -> str:
    figures = "".join(
        f'<figure><img src="{n}" alt="{html.escape(CAPTIONS.get(n, n))}">'
        f"<figcaption>{html.escape(CAPTIONS.get(n, n))}</figcaption></figure>"
        for n in images
    )
    summary = html.escape(table(scenario, runs))
    title = html.escape(scenario.name)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title><style>"
        "body{font-family:sans-serif;max-width:900px;margin:2em auto}"
        "pre{background:#f4f4f4;padding:1em}img{max-width:100%}"
        "table.types{border-collapse:collapse;font-size:90%}"
        "table.types td,table.types th{border:1px solid #ccc;padding:2px 6px}</style>"
        "</head><body>"
        f"<h1>Forethought replay: {title}</h1>"
        f"<p>{html.escape(scenario.spec.description)}</p><pre>{summary}</pre>{types}{figures}"
        "</body></html>"
    )
