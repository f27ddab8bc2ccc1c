"""Virtual against real: one scenario replayed on both clocks, the gap per strategy and figure.

The virtual clock is only evidence if it agrees with the wall clock where both can run. This
replays a scenario on the real clock (right after a profile of this machine was measured,
normally), then on the virtual clock charged by that profile, and lines the figures up, with
each side's per-call log (``calls``) to read a gap by.
A virtual report names the profile it was charged by; a real one names none: it used none.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from forethought.models import LatencyProfile

from ._profiles import profile_figures
from ._records import StrategyRun
from ._replay import replay
from ._report import metrics, table
from ._scenario import Scenario

if TYPE_CHECKING:
    # The local model (torch): only named in annotations, so the sims import without it.
    from forethought.models import TransformersBackend

__all__ = [
    "FIGURES",
    "ClockComparison",
    "FigureGap",
    "calls",
    "compare_clocks",
    "defaults",
]

FIGURES: dict[str, Callable[[dict[str, Any]], float | None]] = {
    "answered_in_time": lambda m: m["answered_in_time"],
    "correct_in_time": lambda m: m["correct_in_time"],
    "fallback_rate": lambda m: m["fallback_rate"],
    "deadline_hit_rate": lambda m: m["deadline_hit_rate"],
}
"""The figures compared (shares of events): the gap is in percentage points."""


@dataclass(frozen=True, slots=True)
class FigureGap:
    """One figure of one strategy on both clocks (shares in [0, 1]; None: not defined)."""

    strategy: str
    figure: str
    virtual: float | None
    real: float | None

    @property
    def points(self) -> float | None:
        """Virtual minus real, in percentage points."""
        if self.virtual is None or self.real is None:
            return None
        return 100.0 * (self.virtual - self.real)


@dataclass(frozen=True, slots=True)
class ClockComparison:
    """A scenario replayed on both clocks."""

    scenario: Scenario
    profile_name: str
    profile: LatencyProfile
    virtual: dict[str, StrategyRun]
    real: dict[str, StrategyRun]

    def gaps(self) -> list[FigureGap]:
        """Every strategy's figures side by side."""
        out: list[FigureGap] = []
        for name in self.virtual:
            mv, mr = metrics(self.virtual[name]), metrics(self.real[name])
            out.extend(
                FigureGap(name, figure, read(mv), read(mr)) for figure, read in FIGURES.items()
            )
        return out

    def table(self) -> str:
        """Both clocks' tables, each naming its clock (the virtual one its profile), and the gap."""
        lines = [
            f"virtual clock, profile {self.profile_name}",
            table(self.scenario, self.virtual),
            "",
            "real clock (no profile: passes take the time they take)",
            table(self.scenario, self.real),
            "",
            "gap (virtual - real), percentage points",
            f"{'strategy':<12}{'figure':<20}{'virtual':>10}{'real':>10}{'gap':>8}",
        ]
        lines += [
            f"{g.strategy:<12}{g.figure:<20}{_pc(g.virtual):>10}{_pc(g.real):>10}"
            f"{_pts(g.points):>8}"
            for g in self.gaps()
        ]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        """Both clocks' figures and the gaps (the virtual side names its profile)."""
        return {
            "scenario": self.scenario.name,
            "seed": self.scenario.seed,
            "virtual": {
                "clock": "virtual",
                "profile": {"name": self.profile_name, **profile_figures(self.profile)},
                "strategies": {k: metrics(v) for k, v in self.virtual.items()},
                "defaults": {k: defaults(v) for k, v in self.virtual.items()},
                "calls": {k: calls(v) for k, v in self.virtual.items()},
            },
            "real": {
                "clock": "real",
                "strategies": {k: metrics(v) for k, v in self.real.items()},
                "defaults": {k: defaults(v) for k, v in self.real.items()},
                "calls": {k: calls(v) for k, v in self.real.items()},
            },
            "gaps": [
                {
                    "strategy": g.strategy,
                    "figure": g.figure,
                    "virtual": g.virtual,
                    "real": g.real,
                    "points": g.points,
                }
                for g in self.gaps()
            ],
        }


def defaults(run: StrategyRun) -> dict[str, Any]:
    """Why each event that got the default got it: the last reason of a tier that was on.

    Counted by kind (figures left out) and listed per event (index, reason with its figures,
    the budget it had); with what the live calls that did answer took, stimulus to action.
    """
    events = []
    for r in run.records:
        if not r.model_written:
            on = [s for s in r.skipped if not s.endswith(": disabled")]
            events.append((r.index, on[-1] if on else "-", r.budget_ms))
    kinds = Counter(re.sub(r"[0-9.]+ ms", "N ms", why) for _, why, _ in events)
    answered = [r.latency_ms for r in run.records if r.tier == "live"]
    return {
        "by_reason": dict(kinds.most_common()),
        "events": [{"index": i, "reason": why, "budget_ms": b} for i, why, b in events],
        "live_answers_ms": {
            "n": len(answered),
            "p50": float(np.quantile(answered, 0.5)) if answered else None,
            "p95": float(np.quantile(answered, 0.95)) if answered else None,
            "max": max(answered, default=None),
        },
    }


def calls(run: StrategyRun) -> dict[str, Any]:
    """Every model call of the run (see :class:`CallEntry`) and the live calls' medians."""
    live = [c for c in run.calls if c.kind == "live" and c.steps > 0]

    def median(xs: list[float]) -> float | None:
        return round(float(np.median(xs)) * 1e3, 1) if xs else None

    return {
        "live_summary": {
            "n": len(live),
            "predicted_p95_ms": median([c.predicted_p95_s for c in live if c.predicted_p95_s]),
            "took_ms": median([c.took_s for c in live]),
            "forward_ms": median([c.forward_s for c in live]),
            "idle_before_ms": median([c.idle_before_s for c in live if c.idle_before_s]),
            "idle_charged": sum(c.idle_charged_s > 0 for c in live),
        },
        "plan_calls": sum(c.kind == "plan" for c in run.calls),
        "log": [c.as_json() for c in run.calls],
    }


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _pts(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}"


def compare_clocks(
    scenario: Scenario,
    backend: TransformersBackend,
    *,
    strategies: tuple[str, ...],
    profile_name: str,
    profile: LatencyProfile,
    seed: int | None = None,
    progress: Callable[[], None] = lambda: None,
) -> ClockComparison:
    """Replay ``scenario`` on the real clock, then on the virtual one (charged by ``profile``).

    Real first: the profile is measured just before (normally), so the real replay runs on
    the machine as it was measured; the virtual replay's figures do not depend on when it runs
    (its passes are charged, not timed).
    """
    real = replay(
        scenario, backend, strategies=strategies, clock="real", seed=seed, progress=progress
    )
    virtual = replay(
        scenario,
        backend,
        strategies=strategies,
        clock="virtual",
        profile=profile,
        seed=seed,
        progress=progress,
    )
    return ClockComparison(scenario, profile_name, profile, virtual, real)
