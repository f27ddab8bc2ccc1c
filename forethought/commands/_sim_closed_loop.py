"""``forethought sim`` on a scenario with a ``world``: closed loop, strategies side by side."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from forethought.models import LatencyProfile, TransformersBackend
from forethought.policies import ConfigError, ForethoughtError
from forethought.sims import (
    ClosedLoopRun,
    Scenario,
    closed_loop_replay,
    closed_loop_table,
    scenario_world,
    write_closed_loop,
)
from forethought.sims.internals import closed_loop_json, profile_figures

__all__ = ["open_loop_only", "refuse_open_loop_options", "run_closed_loop"]


def open_loop_only(scenario: Scenario, option: str) -> Scenario:
    """``scenario``, refused by name when it has a world (``option`` replays open loop only)."""
    if scenario.world is not None:
        raise ConfigError(
            option,
            scenario.name,
            "a closed-loop scenario (one with a world) replays with `forethought sim SCENARIO` "
            "(--episodes, --strategy, --profile NAME, --clock virtual|real)",
        )
    return scenario


def refuse_open_loop_options(
    *, mqtt: str | None, planner: str | None, record: Path | None, engine: str, clock: str
) -> None:
    """Options of open-loop replays a closed-loop one does not take: one clear error each."""
    if clock not in ("virtual", "real"):
        raise ConfigError("--clock", clock, "a closed-loop replay runs on virtual or real")
    given = {
        "--mqtt": mqtt,
        "--planner": planner,
        "--record": record,
        "--engine": engine if engine != "torch" else None,
    }
    for option, value in given.items():
        if value is not None:
            raise ConfigError(
                option,
                str(value),
                "not for a closed-loop scenario (one with a world): leave it out",
            )


def _episodes(total: int) -> Callable[[], None]:
    done = [0]

    def tick() -> None:
        done[0] += 1
        print(f"  {done[0]}/{total} episodes", file=sys.stderr, flush=True)

    return tick


def run_closed_loop(
    scenario: Scenario,
    backend: TransformersBackend,
    *,
    names: tuple[str, ...],
    clock: str,
    profile: tuple[str, LatencyProfile],
    model: str,
    seed: int | None,
    episodes: int | None,
    json_path: Path | None,
    report: Path | None,
    decisions: Path | None = None,
    progress: Callable[[int], Callable[[], None]] | None = None,
) -> dict[str, ClosedLoopRun]:
    """Play the scenario's world under each strategy; print the scoreboard; write outputs.

    ``profile`` is the simulated device's name and law (the real clock ignores it);
    ``progress(total)`` makes the per-episode progress tick (default: a line per episode).
    Raises a ForethoughtError after writing everything when a world failed in some episode
    (the other strategies' and episodes' figures are printed and written first).
    """
    block = scenario.world
    assert block is not None
    if clock not in ("virtual", "real"):
        raise ConfigError("--clock", clock, "a closed-loop replay runs on virtual or real")
    n = block.episodes if episodes is None else episodes
    if n < 1:
        raise ConfigError("--episodes", n, "give a positive number of episodes")
    world = scenario_world(scenario)
    pname, prof = profile
    figures = {"name": pname, **profile_figures(prof)} if clock == "virtual" else {}
    base = scenario.seed if seed is None else seed
    print(
        f"closed loop {scenario.name}: {n} episodes (seeds {base}..{base + n - 1}) x "
        f"{', '.join(names)} ({clock} clock, profile {pname})",
        file=sys.stderr,
        flush=True,
    )
    runs = closed_loop_replay(
        scenario,
        backend,
        world,
        strategies=names,
        episodes=n,
        clock=clock,
        profile=prof,
        seed=base,
        max_steps=block.max_steps,
        progress=(progress or _episodes)(n * len(names)),
    )
    print(f"profile: {pname}; model: {model}; clock: {clock}")
    print(closed_loop_table(scenario, runs))
    meta: dict[str, Any] = {"model": model, "clock": clock, "profile": figures, "seed": base}
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        data = closed_loop_json(scenario, runs, **meta)
        json_path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        print(f"json: {json_path}")
    if decisions is not None:  # one JSON line per event, strategy and episode
        decisions.parent.mkdir(parents=True, exist_ok=True)
        with decisions.open("wb") as f:
            for run in runs.values():
                for ep in run.episodes:
                    for r in ep.run.records:
                        f.write(orjson.dumps({"seed": ep.seed, **r.as_json()}) + b"\n")
        print(f"decisions: {decisions}")
    if report is not None:
        print(f"report: {write_closed_loop(report, scenario, runs, **meta)}")
    failed = [(name, e) for name, run in runs.items() for e in run.episodes if e.error]
    if failed:
        name, first = failed[0]
        raise ForethoughtError(
            f"{len(failed)} episode(s) failed; the first, under {name}: {first.error}"
        )
    return runs
