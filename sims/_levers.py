"""Planner levers side by side: what each one buys in coverage and costs in fidelity and waste.

One scenario, the ``tree`` strategy (the tree alone, then the default), replayed once per
lever setting on the scenario's fixed profile, each on a fresh backend; references (the
model's own deadline-free answer per state and event) are shared, so fidelity compares like
with like. Levers are added one at a time, in the order of issue 10:

``none``
    every lever off: the fingerprint covers every state field, the planner looks one event
    ahead in the current state, trusts the declared weights, and plans everything above
    ``min_rate``;
``+abstraction``
    the spec's ``state_fields`` per event type, state grids and state tolerance;
``+look-ahead``
    a horizon of events through effects and learned state drift;
``+learned``
    the forecaster learns the stream;
``+cost``
    branches whose value does not cover their cost are not planned (branches generated);
``+scoring``
    branches written by scoring the candidate actions instead of generating (needs an
    enumerable action space or declared candidates; the default ``auto`` picks whichever the
    latency model says is cheaper per branch on the device).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forethought.models import LatencyProfile
from forethought.planner import PlannerConfig

from ._fidelity import add_references
from ._profiles import PROFILES, resolve_profile
from ._replay import replay
from ._report import metrics
from ._scenario import Scenario

if TYPE_CHECKING:
    # The local model (torch): only named in annotations, so the sims import without it.
    from forethought.models import TransformersBackend

__all__ = ["LEVERS", "fixed_profile", "lever_runs", "without_abstraction"]

DEFAULT_PROFILE = "cpu-2core-smollm2"

LEVERS: tuple[tuple[str, bool, dict[str, Any]], ...] = (
    ("none", False, {"horizon": 1, "drift": False, "learn": False, "cost_weight": 0.0}),
    ("+abstraction", True, {"horizon": 1, "drift": False, "learn": False, "cost_weight": 0.0}),
    ("+look-ahead", True, {"learn": False, "cost_weight": 0.0}),
    ("+learned", True, {"cost_weight": 0.0}),
    ("+cost", True, {"method": "generate"}),
    ("+scoring", True, {"method": "score"}),
)
"""(name, abstraction on, PlannerConfig fields): each row adds one lever to the one above."""


def fixed_profile(scenario: Scenario) -> tuple[str, LatencyProfile]:
    """The scenario's own device profile (its ``profile``, else the 2-core CPU one)."""
    if isinstance(scenario.profile, str):
        return scenario.profile, resolve_profile(scenario.profile)
    if scenario.profile is not None:
        return "scenario", LatencyProfile.from_figures(
            step_ms=scenario.profile.step_ms,
            prefill_us_per_token=scenario.profile.prefill_us_per_token,
        )
    return DEFAULT_PROFILE, PROFILES[DEFAULT_PROFILE]


def without_abstraction(scenario: Scenario) -> Scenario:
    """The scenario with every state field in every fingerprint, unsnapped.

    The spec-wide ``state_fields`` go as well as each type's: either alone leaves a key that
    is not the whole state.
    """
    spec = scenario.spec
    plain = spec.model_copy(
        update={
            "state_fields": None,
            "state_grids": {},
            "state_tolerance": {},
            "events": [e.model_copy(update={"state_fields": None}) for e in spec.events],
        }
    )
    return scenario.model_copy(update={"spec": plain})


def lever_runs(
    scenario: Scenario,
    backend: TransformersBackend,
    *,
    levers: tuple[tuple[str, bool, dict[str, Any]], ...] = LEVERS,
    say: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """One row of figures per lever setting (tree strategy, the scenario's fixed profile)."""
    _, profile = fixed_profile(scenario)
    refs: dict[tuple[str, str], dict[str, Any] | None] = {}
    rows = []
    for name, abstraction, fields in levers:
        sc = scenario if abstraction else without_abstraction(scenario)
        runs = replay(
            sc,
            backend,
            strategies=("tree",),
            profile=profile,
            planner=PlannerConfig(**fields),
        )
        add_references(sc, runs, backend, cache=refs)
        m = metrics(runs["tree"])
        p = m["planner"] or {}
        row = {
            "lever": name,
            "answered_in_time": m["answered_in_time"],
            "correct_in_time": m["correct_in_time"],
            "fidelity": m["fidelity"],
            "fidelity_by_detail": m["fidelity_by_detail"],
            "tree_exact": m["tree_exact"],
            "tree_near_event": m["tree_near_event"],
            "tree_near_state": m["tree_near_state"],
            "generated": p.get("generated"),
            "used": p.get("used"),
            "waste": p.get("waste"),
            "busy_s": p.get("busy_s"),
            "tree_answers_per_planner_s": p.get("tree_answers_per_planner_s"),
            "planner": p,
        }
        rows.append(row)
        say(lever_line(row))
    return rows


def lever_line(row: dict[str, Any]) -> str:
    """One row as the bench prints it."""

    def pc(x: float | None) -> str:
        return "   -  " if x is None else f"{100 * x:5.1f}%"

    per_s = row["tree_answers_per_planner_s"]
    return (
        f"  {row['lever']:<13} answered {pc(row['answered_in_time'])}  correct "
        f"{pc(row['correct_in_time'])}  fidelity {pc(row['fidelity'])}  branches "
        f"{row['used']}/{row['generated']} used, waste {pc(row['waste'])}  "
        f"model busy {row['busy_s'] or 0:.0f} s, "
        f"{'-' if per_s is None else f'{per_s:.2f}'} answers per planner-s"
    )
