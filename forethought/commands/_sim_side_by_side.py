"""One scenario under several device profiles, every strategy side by side (the main job).

The same events, the same model, two or more simulated devices: the embedded model's own
profile and a slow model's. What does not depend on timing is computed once for all of them:
live-naive's verbose answers (batched, then charged to each replay) and the deadline-free
references fidelity compares with. Each profile gets one line saying what its figures show,
worded from the figures. Everything printed is a pure function of the scenario, seed, model and
profiles (no wall times), so a re-run prints the same bytes.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from forethought._progress import Bars
from forethought.commands._sim_closed_loop import open_loop_only
from forethought.models import LatencyProfile, TransformersBackend
from forethought.policies import ConfigError
from forethought.sims import (
    STRATEGIES,
    Scenario,
    StrategyRun,
    load_scenario,
    metrics,
    replay,
    replay_threads,
    resolve_profile,
    write_report,
)
from forethought.sims.internals import (
    add_references,
    decode_naive,
    decode_references,
    naive_prompts,
    profile_figures,
)

__all__ = ["first_events", "run_profiles", "run_side_by_side", "verdict"]

_ROWS = (
    ("correct in time", "correct_in_time"),
    ("answered in time", "answered_in_time"),
    ("fallback", "fallback_rate"),
    ("fidelity", "fidelity"),
)
_MEASURED = frozenset({"wall_s", "tree_selection_ms"})
"""Metrics measured on this machine's clock, left out of the JSON (a re-run differs)."""
_CLOSE = 0.05
"""Two shares within five points are "about the same" in a verdict."""


def first_events(scenario: Scenario, count: int | None) -> Scenario:
    """The scenario cut to its first ``count`` events (None: all), as a fixed trace."""
    if count is None:
        return scenario
    if count < 1:
        raise ConfigError("--events", count, "give a positive number of events")
    events = scenario.events()[:count]
    return scenario.model_copy(update={"trace": events, "generate": None})


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def verdict(profile: str, figures: Mapping[str, Mapping[str, Any]], step_ms: float) -> str:
    """One line on what a profile's figures show, worded from them (not from expectation)."""

    def cit(name: str) -> float:
        value = figures.get(name, {}).get("correct_in_time")
        return float(value) if value is not None else 0.0

    live, tree, hybrid = cit("live"), cit("tree"), cit("hybrid")
    best_tree = max(tree, hybrid)
    where = "hybrid" if hybrid >= tree else "tree"
    shares = f"live {_pc(live)}, tree {_pc(tree)}, hybrid {_pc(hybrid)} correct in time"
    if best_tree > live + _CLOSE:
        return (
            f"{profile} ({step_ms:g} ms/token): the tree pays: {shares}; a live call of this "
            f"model does not fit the deadlines, a precomputed answer does ({where} best)"
        )
    if live > best_tree + _CLOSE:
        return (
            f"{profile} ({step_ms:g} ms/token): live is ahead: {shares}; the planner had not "
            "covered what came"
        )
    return (
        f"{profile} ({step_ms:g} ms/token): a good live caller suffices: {shares}; the model "
        "is fast next to the deadlines, the tree adds little"
    )


def _table(names: Sequence[str], figures: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """Strategies down, profiles across; each cell the four shares of :data:`_ROWS`."""
    profiles = list(figures)
    sub = " / ".join(label for label, _ in _ROWS)
    cells = [
        [name, *(" / ".join(_pc(figures[p][name][key]) for _, key in _ROWS) for p in profiles)]
        for name in names
    ]
    heads = [["strategy", *profiles], ["", *[sub] * len(profiles)]]
    widths = [max(len(r[i]) for r in [*cells, *heads]) for i in range(len(profiles) + 1)]
    lines = [
        "  ".join(
            h.ljust(w) if i == 0 else h.center(w)
            for i, (h, w) in enumerate(zip(head, widths, strict=True))
        ).rstrip()
        for head in heads
    ]
    lines += [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
    return "\n".join(lines)


def run_side_by_side(
    scenario: Scenario,
    backend: TransformersBackend,
    profiles: Sequence[str],
    *,
    strategies: Sequence[str] = STRATEGIES,
    seed: int | None = None,
    json_path: Path | None = None,
    report: Path | None = None,
    model: str,
    bars: Bars,
) -> dict[str, dict[str, StrategyRun]]:
    """Replay ``scenario`` under each profile; print the table and each profile's line."""
    # Names or figures (step_ms=X,prefill_us_per_token=Y), each its own column.
    with bars.wait("profiles"):
        resolved = {p: resolve_profile(p, backend, scenario) for p in profiles}
    events = scenario.events()
    memo: dict[Any, Any] = {}
    if "live-naive" in strategies:
        advance = bars.bar("live-naive answers (once, batched)", len(naive_prompts(scenario)))
        decode_naive(scenario, backend, memo, progress=advance)
    all_runs: dict[str, dict[str, StrategyRun]] = {}
    for pname in profiles:
        tick = bars.bar(f"replay under {pname}", len(events) * len(strategies))
        all_runs[pname] = replay(
            scenario,
            backend,
            strategies=tuple(strategies),
            profile=resolved[pname],
            seed=seed,
            memo=memo,
            progress=functools.partial(tick, 1),
        )
    refs: dict[Any, Any] = {}
    pending = {
        (r.context, r.event_text)
        for runs in all_runs.values()
        for run in runs.values()
        for r in run.records
    }
    advance = bars.bar("fidelity references (once, batched)", len(pending))
    decode_references(scenario, all_runs.values(), backend, refs, progress=advance)
    figures: dict[str, dict[str, dict[str, Any]]] = {}
    for pname, runs in all_runs.items():
        add_references(scenario, runs, backend, refs)
        figures[pname] = {name: metrics(run) for name, run in runs.items()}
    _print(scenario, model, resolved, strategies, figures, len(events))
    if json_path is not None:
        _write_json(json_path, scenario, model, resolved, figures)
        print(f"json: {json_path}")
    if report is not None:
        for pname, runs in all_runs.items():
            index = write_report(report / pname, scenario, runs)
            print(f"report ({pname}): {index}")
    return all_runs


def _print(
    scenario: Scenario,
    model: str,
    profiles: Mapping[str, LatencyProfile],
    strategies: Sequence[str],
    figures: Mapping[str, Mapping[str, Mapping[str, Any]]],
    n_events: int,
) -> None:
    deadlines = sorted({t.deadline_ms for t in scenario.spec.events})
    print(
        f"{scenario.name}: {n_events} events (deadlines {deadlines[0]:g}-{deadlines[-1]:g} ms), "
        f"model {model}, virtual clock, seed {scenario.seed}"
    )
    for pname, prof in profiles.items():
        fig = profile_figures(prof)
        print(
            f"  {pname}: step {fig['step_ms']:g} ms, prefill {fig['prefill_us_per_token']:g} "
            "us/token"
        )
    print(_table(strategies, figures))
    wall = {s: sum(figures[p][s]["wall_s"] or 0.0 for p in profiles) for s in strategies}
    total = sum(wall.values())
    if total > 0:
        parts = ", ".join(f"{s} {w:.1f} s ({100 * w / total:.0f} %)" for s, w in wall.items())
        # Standard error: the table on standard output stays the same bytes on a re-run.
        print(f"wall clock of the replays: {parts}; total {total:.1f} s", file=sys.stderr)
    for pname, prof in profiles.items():
        step = profile_figures(prof)["step_ms"]
        print(verdict(pname, figures[pname], step))


def _write_json(
    path: Path,
    scenario: Scenario,
    model: str,
    profiles: Mapping[str, LatencyProfile],
    figures: Mapping[str, Mapping[str, Mapping[str, Any]]],
) -> None:
    """Per profile and strategy, the metrics without wall times (a re-run writes the same)."""
    data = {
        "scenario": scenario.name,
        "model": model,
        "clock": "virtual",
        "seed": scenario.seed,
        "profiles": {
            p: {
                "figures": profile_figures(profiles[p]),
                "strategies": {
                    s: {k: v for k, v in m.items() if k not in _MEASURED} for s, m in runs.items()
                },
            }
            for p, runs in figures.items()
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))


def run_profiles(
    *,
    scenario_path: Path,
    profiles: Sequence[str],
    events: int | None,
    strategy: Sequence[str],
    seed: int | None,
    model: str,
    device: str,
    dtype: str,
    json_path: Path | None,
    report: Path | None,
) -> dict[str, dict[str, StrategyRun]]:
    """``forethought sim SCENARIO --profile A,B``: load, then :func:`run_side_by_side`."""
    scenario = first_events(open_loop_only(load_scenario(scenario_path), "--profile"), events)
    with Bars() as bars:
        with bars.wait(f"loading {model} (the first load converts it)"):
            backend = TransformersBackend(
                model=model,
                device=device,
                dtype=dtype,
                threads=replay_threads("virtual", *profiles),
            )
            backend.load()
        return run_side_by_side(
            scenario,
            backend,
            profiles,
            strategies=strategy,
            seed=seed,
            json_path=json_path,
            report=report,
            model=model,
            bars=bars,
        )
