"""The closed-loop scoreboard: episodes' scores beside answered and correct in time.

Per strategy: the episodes' score (mean, standard deviation over seeds, min and max), the
shares of episodes ending in success and in failure, and over every event of every episode the
shares answered in time (a model-written action by the deadline) and correct in time (that,
and accepted by the scenario's rules), and the share of events where the world received the
default. Everything here is a function of the runs (no wall times), so a re-run of a seed on
the virtual clock writes the same bytes.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from ._closed_loop import ClosedLoopRun, Episode
from ._report import metrics
from ._scenario import Scenario

__all__ = ["ClosedLoopScore", "closed_loop_score", "closed_loop_table", "write_closed_loop"]


@dataclass(frozen=True, slots=True)
class ClosedLoopScore:
    """One strategy's closed-loop figures (shares are None where nothing was counted)."""

    strategy: str
    episodes: int
    errors: int
    score_mean: float | None
    score_std: float | None
    """Population standard deviation over the episodes that ran (0 for one)."""
    score_min: float | None
    score_max: float | None
    success_rate: float | None
    failure_rate: float | None
    events: int
    answered_in_time: float | None
    correct_in_time: float | None
    defaults_received: float | None
    """Share of events whose action the world received was the default (fallback or miss)."""

    def as_json(self) -> dict[str, Any]:
        """The JSON form (floats rounded to 6 places)."""
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in asdict(self).items()}


def _share(n: int, d: int) -> float | None:
    return n / d if d else None


def closed_loop_score(run: ClosedLoopRun) -> ClosedLoopScore:
    """The figures of one strategy's episodes (an episode that errored counts in ``errors``)."""
    ok = [e for e in run.episodes if e.error is None]
    scores = [e.score for e in ok]
    m = metrics(run.records_run())
    defaulted = sum(
        1 for e in ok for mo in e.timeline if mo.kind == "action" and "(default" in mo.text
    )
    acted = sum(1 for e in ok for mo in e.timeline if mo.kind == "action")
    return ClosedLoopScore(
        strategy=run.strategy,
        episodes=len(run.episodes),
        errors=len(run.episodes) - len(ok),
        score_mean=statistics.fmean(scores) if scores else None,
        score_std=statistics.pstdev(scores) if scores else None,
        score_min=min(scores) if scores else None,
        score_max=max(scores) if scores else None,
        success_rate=_share(sum(e.success for e in ok), len(ok)),
        failure_rate=_share(sum(e.failure for e in ok), len(ok)),
        events=m["events"],
        answered_in_time=m["answered_in_time"],
        correct_in_time=m["correct_in_time"],
        defaults_received=_share(defaulted, acted),
    )


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def closed_loop_table(scenario: Scenario, runs: Mapping[str, ClosedLoopRun]) -> str:
    """A terminal table, strategies side by side, then each world error on a line of its own."""
    world = next(iter(runs.values())).world if runs else "-"
    head = (
        f"{'strategy':<11}{'episodes':>9}{'score mean':>11}{'± sd':>8}{'min..max':>16}"
        f"{'success':>9}{'failure':>9}{'answered in time':>18}{'correct in time':>17}"
        f"{'default rcvd':>13}"
    )
    lines = [f"closed loop: {scenario.name} against world {world!r}", head, "-" * len(head)]
    errors: list[str] = []
    for name, run in runs.items():
        s = closed_loop_score(run)
        span = f"{_num(s.score_min)}..{_num(s.score_max)}" if s.score_min is not None else "-"
        eps = f"{s.episodes}" + (f" ({s.errors} err)" if s.errors else "")
        lines.append(
            f"{name:<11}{eps:>9}{_num(s.score_mean):>11}{_num(s.score_std):>8}{span:>16}"
            f"{_pc(s.success_rate):>9}{_pc(s.failure_rate):>9}{_pc(s.answered_in_time):>18}"
            f"{_pc(s.correct_in_time):>17}{_pc(s.defaults_received):>13}"
        )
        errors += [f"{name}, seed {e.seed}: {e.error}" for e in run.episodes if e.error]
    lines += [f"error: {e}" for e in errors]
    return "\n".join(lines)


def _episode_json(e: Episode) -> dict[str, Any]:
    return {
        "seed": e.seed,
        "score": round(e.score, 6),
        "outcome": e.outcome.name if e.outcome else None,
        "success": e.success,
        "failure": e.failure,
        "steps": e.steps,
        "duration_ms": round(e.duration_ms, 3),
        "error": e.error,
        "decisions": [r.as_json() for r in e.run.records],
        "timeline": [m.as_json() for m in e.timeline],
    }


def closed_loop_json(
    scenario: Scenario, runs: Mapping[str, ClosedLoopRun], **meta: Any
) -> dict[str, Any]:
    """Scores and every episode (decisions and timeline) by strategy, with ``meta``."""
    return {
        "scenario": scenario.name,
        **meta,
        "strategies": {
            name: {
                "world": run.world,
                "score": closed_loop_score(run).as_json(),
                "episodes": [_episode_json(e) for e in run.episodes],
            }
            for name, run in runs.items()
        },
    }


def _timeline_html(e: Episode) -> str:
    rows = []
    for m in e.timeline:
        if m.kind == "event":
            why = "the world, on its own" if m.cause is None else f"the action on #{m.cause}"
            rows.append(
                f"<tr><td>{m.at_ms:.0f}</td><td>event #{m.index}</td><td>{html.escape(m.text)}</td>"
                f"<td>{why}</td></tr>"
            )
        elif m.kind == "action":
            rows.append(
                f"<tr><td>{m.at_ms:.0f}</td><td>action on #{m.cause}</td>"
                f"<td>{html.escape(m.text)}</td><td></td></tr>"
            )
        else:
            why = "" if m.cause is None else f"the action on #{m.cause}"
            rows.append(
                f"<tr><td>{m.at_ms:.0f}</td><td><b>end</b></td><td><b>"
                f"{html.escape(m.text)}</b></td><td>{why}</td></tr>"
            )
    return (
        "<table><tr><th>ms</th><th>what</th><th>detail</th><th>caused by</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def write_closed_loop(
    directory: Path, scenario: Scenario, runs: Mapping[str, ClosedLoopRun], **meta: Any
) -> Path:
    """``closed_loop.json`` and ``index.html`` (scoreboard, then each episode's timeline)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "closed_loop.json").write_bytes(
        orjson.dumps(closed_loop_json(scenario, runs, **meta), option=orjson.OPT_INDENT_2)
    )
    parts = [
        f"<h1>{html.escape(scenario.name)}: closed loop</h1>",
        f"<pre>{html.escape(closed_loop_table(scenario, runs))}</pre>",
        "<p>Each timeline shows what the world emitted, the action that took effect (the "
        "strategy's, or the default when no decision came by the deadline), and what followed "
        "it: the same seed under two strategies diverges where their actions differ.</p>",
    ]
    for name, run in runs.items():
        parts.append(f"<h2>{html.escape(name)}</h2>")
        for e in run.episodes:
            end = e.outcome.describe() if e.outcome else (e.error or "-")
            parts.append(
                f"<h3>seed {e.seed}: {html.escape(end)}, score {e.score:.3f}</h3>"
                + _timeline_html(e)
            )
    page = (
        "<!doctype html><meta charset=utf-8><title>closed loop</title><style>"
        "body{font-family:sans-serif;max-width:70em;margin:auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}</style>" + "".join(parts)
    )
    index = directory / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
