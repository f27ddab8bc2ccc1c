"""The report's figures as data, then drawn: per event type, latency CDF, timeline.

Every figure is computed first as plain data (:class:`ReportData`), so a test can check what a
plot shows without reading pixels: every declared event type has a row (a type no event had
says so), a deadline label in the CDF and a lane in the timeline. Tree answers are selected in
microseconds, which the virtual clock does not charge (their latency is the perception time,
often 0): the CDF places them at their measured selection time, so they show on a log axis.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._records import StrategyRun
from ._scenario import Scenario

__all__ = [
    "LATENCY_AXIS",
    "TIER_COLORS",
    "ReportData",
    "TypeRow",
    "draw_cdf",
    "draw_timeline",
    "report_data",
    "type_table_html",
]

# Okabe-Ito colours: four hues told apart with any colour vision (green, blue, orange, pink),
# none of them the black of a late mark or the grey of the planner's busy curve.
TIER_COLORS = {"tree": "#009E73", "score": "#0072B2", "live": "#E69F00", "default": "#CC79A7"}
LATENCY_AXIS = (
    "latency, stimulus to decision (ms, log scale; perception included, tree selection as measured)"
)
"""The one latency definition of the report: the table's rows and the CDF's axis."""
_FLOOR_MS = 1e-3
"""The CDF's left edge: a latency below a microsecond is drawn there."""


@dataclass(frozen=True, slots=True)
class TypeRow:
    """One event type under one strategy: events, and the shares answered and correct in time."""

    type: str
    strategy: str
    events: int
    answered_in_time: float | None
    correct_in_time: float | None
    """Over graded events of the type (None: none graded, or no events)."""


@dataclass(frozen=True, slots=True)
class Lane:
    """One event type's lane of one strategy's timeline: (seconds, tier, met) per event."""

    type: str
    points: tuple[tuple[float, str, bool], ...]


@dataclass(frozen=True, slots=True)
class ReportData:
    """What the report's figures show, per declared type and per strategy."""

    types: tuple[str, ...]
    """Declared types in declaration order, then any undeclared type that occurred."""
    deadlines_ms: Mapping[str, float]
    rows: tuple[TypeRow, ...]
    latencies_ms: Mapping[str, tuple[float, ...]]
    """Per strategy, each event's latency; tree answers at their selection time."""
    lanes: Mapping[str, tuple[Lane, ...]]
    state_changes_s: Mapping[str, tuple[float, ...]]
    """Per strategy, the times of the first event to see a state other than the previous one."""
    planner: Mapping[str, tuple[tuple[float, float, float], ...]]
    """Per strategy, (seconds, tree coverage, planner busy share) samples."""


def _share(hits: int, n: int) -> float | None:
    return hits / n if n else None


def report_data(scenario: Scenario, runs: Mapping[str, StrategyRun]) -> ReportData:
    """The figures' data for ``runs`` of ``scenario``."""
    declared = [t.type for t in scenario.spec.events]
    seen = sorted({r.type for run in runs.values() for r in run.records} - set(declared))
    types = (*declared, *seen)
    deadlines = {t.type: t.deadline_ms for t in scenario.spec.events}
    rows = []
    latencies: dict[str, tuple[float, ...]] = {}
    lanes: dict[str, tuple[Lane, ...]] = {}
    changes: dict[str, tuple[float, ...]] = {}
    for name, run in runs.items():
        recs = sorted(run.records, key=lambda r: r.index)
        for t in types:
            rs = [r for r in recs if r.type == t]
            graded = [r for r in rs if r.correct is not None]
            rows.append(
                TypeRow(
                    t,
                    name,
                    len(rs),
                    _share(sum(r.model_written and r.met for r in rs), len(rs)),
                    _share(
                        sum(bool(r.correct) and r.model_written and r.met for r in graded),
                        len(graded),
                    ),
                )
            )
        latencies[name] = tuple(
            r.latency_ms + (r.decide_cpu_ms if r.tier == "tree" else 0.0) for r in recs
        )
        lanes[name] = tuple(
            Lane(t, tuple((r.at_ms / 1e3, r.tier, r.met) for r in recs if r.type == t))
            for t in types
        )
        changes[name] = tuple(
            b.at_ms / 1e3 for a, b in itertools.pairwise(recs) if a.context != b.context
        )
    return ReportData(
        types=types,
        deadlines_ms=deadlines,
        rows=tuple(rows),
        latencies_ms=latencies,
        lanes=lanes,
        state_changes_s=changes,
        planner={name: tuple(run.timeline) for name, run in runs.items()},
    )


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def type_table_html(data: ReportData) -> str:
    """Per type, per strategy: correct / answered in time (events); "no events" when none."""
    import html  # noqa: PLC0415

    strategies = list(data.latencies_ms)
    cell = {(r.type, r.strategy): r for r in data.rows}
    head = "".join(f"<th>{html.escape(s)}</th>" for s in strategies)
    body = []
    for t in data.types:
        deadline = data.deadlines_ms.get(t)
        label = f"{t} ({deadline:g} ms)" if deadline is not None else f"{t} (undeclared)"
        tds = []
        for s in strategies:
            r = cell[t, s]
            text = (
                "no events"
                if r.events == 0
                else f"{_pc(r.correct_in_time)} / {_pc(r.answered_in_time)} ({r.events})"
            )
            tds.append(f"<td>{text}</td>")
        body.append(f"<tr><th>{html.escape(label)}</th>{''.join(tds)}</tr>")
    return (
        "<table class='types'><caption>Correct in time / answered in time (events), per event "
        f"type and strategy</caption><tr><th>type (deadline)</th>{head}</tr>"
        f"{''.join(body)}</table>"
    )


def draw_cdf(plt: Any, data: ReportData) -> Any:
    """Latency CDF per strategy on a log axis, each type's deadline drawn and labelled."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for name, lat in data.latencies_ms.items():
        xs = np.sort(np.maximum(np.asarray(lat, dtype=float), _FLOOR_MS))
        if len(xs):
            ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=name)
    by_deadline: dict[float, list[str]] = {}
    for t, d in data.deadlines_ms.items():
        by_deadline.setdefault(d, []).append(t)
    for i, (d, names) in enumerate(sorted(by_deadline.items())):
        ax.axvline(d, color="grey", linestyle="--", linewidth=0.8)
        ax.text(
            d,
            0.02 + 0.09 * (i % 4),
            " " + ", ".join(names),
            rotation=90,
            fontsize=7,
            color="dimgrey",
            va="bottom",
            ha="right",
        )
    ax.set_xscale("log")
    ax.set_xlabel(LATENCY_AXIS)
    ax.set_ylabel("share of events decided by then (0-1)")
    ax.set_title("Latency CDF per strategy; dashed: each event type's deadline")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def draw_timeline(plt: Any, data: ReportData) -> Any:
    """Per strategy: a lane per event type, the state changes and the planner's activity."""
    names = list(data.lanes)
    n_types = len(data.types)
    heights = [n_types + 2 for _ in names]
    fig, axes = plt.subplots(
        len(names),
        1,
        figsize=(9, 0.6 + 0.28 * sum(heights)),
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for ax, name in zip(axes[:, 0], names, strict=True):
        for y, lane in enumerate(data.lanes[name]):
            for tier, color in TIER_COLORS.items():
                xs = [t for t, tr, met in lane.points if tr == tier and met]
                ax.scatter(xs, [y] * len(xs), s=14, color=color, marker="|", label=tier)
            late = [t for t, _, met in lane.points if not met]
            ax.scatter(late, [y] * len(late), s=12, color="black", marker="x", label="late")
        for x in data.state_changes_s[name]:
            ax.axvline(x, color="#457b9d", linewidth=0.6, alpha=0.6)
        samples = data.planner[name]
        base = n_types + 0.2
        if samples:
            t, cov, busy = zip(*samples, strict=True)
            ax.plot(t, [base + c for c in cov], color="black", linewidth=1, label="tree coverage")
            ax.plot(
                t,
                [base + b for b in busy],
                color="grey",
                linewidth=1,
                linestyle=":",
                label="planner busy",
            )
        # The planner band has its own scale: 0 at its bottom, 100 % at its top.
        ax.set_yticks(
            [*range(n_types), base, base + 1],
            [*data.types, "planner 0 %", "planner 100 %"],
            fontsize=7,
        )
        ax.set_ylim(-0.7, base + 1.2)
        ax.set_title(name, fontsize=9, loc="left")
    seen: dict[str, Any] = {}
    for ax in axes[:, 0]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    seen.setdefault("state change", plt.Line2D([], [], color="#457b9d", linewidth=0.6))
    seen = {
        (
            "tree coverage (share of keys planned)"
            if k == "tree coverage"
            else "planner busy (share of time so far)"
            if k == "planner busy"
            else k
        ): v
        for k, v in seen.items()
    }
    fig.legend(list(seen.values()), list(seen), loc="upper center", ncol=8, fontsize=7)
    axes[-1, 0].set_xlabel(
        "scenario time (s); marks: each event, coloured by the tier that answered it in time"
    )
    return fig
