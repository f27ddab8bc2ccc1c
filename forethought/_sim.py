"""``forethought sim``: replay a scenario, strategies side by side, and report."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from forethought.planner import LatencyProfile, TransformersBackend
from forethought.policies import ConfigError
from forethought.sims import (
    STRATEGIES,
    Scenario,
    StrategyRun,
    load_scenario,
    replay,
    replay_over_mqtt,
    table,
    write_decisions,
    write_json,
    write_report,
)

__all__ = ["parse_profile", "run_sim"]


def parse_profile(text: str) -> LatencyProfile:
    """``step_ms=8.6,prefill_us_per_token=50`` -> a profile."""
    try:
        pairs = dict(item.split("=", 1) for item in text.split(",") if item)
        return LatencyProfile.from_figures(
            step_ms=float(pairs.pop("step_ms")),
            prefill_us_per_token=float(pairs.pop("prefill_us_per_token")),
        )
    except (KeyError, ValueError) as exc:
        raise ConfigError(
            "--profile", text, f"expected step_ms=X,prefill_us_per_token=Y ({exc})"
        ) from None


def _progress(total: int) -> Callable[[], None]:
    done = [0]
    tty = sys.stderr.isatty()

    def tick() -> None:
        done[0] += 1
        if tty:
            print(f"\r  {done[0]}/{total} decisions", end="", file=sys.stderr, flush=True)
            if done[0] == total:
                print(file=sys.stderr)
        elif done[0] % max(total // 4, 1) == 0:
            print(f"  {done[0]}/{total} decisions", file=sys.stderr, flush=True)

    return tick


def run_sim(
    *,
    mqtt: str | None = None,
    agent_id: str = "agent",
    scenario_path: Path,
    strategy: str,
    clock: str,
    speed: float,
    profile: str | None,
    model: str,
    device: str,
    dtype: str,
    json_path: Path | None,
    decisions: Path | None,
    report: Path | None,
) -> dict[str, Any]:
    """Load, replay, print the table, write the outputs."""
    scenario = load_scenario(scenario_path)
    if strategy == "all":
        names = STRATEGIES + (("live-compact",) if scenario.live_form == "verbose" else ())
    else:
        names = tuple(s.strip() for s in strategy.split(","))
        bad = [n for n in names if n not in (*STRATEGIES, "live-compact")]
        if bad:
            raise ConfigError(
                "--strategy",
                strategy,
                f"unknown {bad}; choose from {', '.join(STRATEGIES)}, live-compact or all",
            )
    if clock not in ("virtual", "real"):
        raise ConfigError("--clock", clock, "choose virtual or real")
    if mqtt is not None:
        if clock != "real":
            raise ConfigError("--mqtt", mqtt, "replaying through a broker needs --clock real")
        n = len(scenario.events())
        print(
            f"replaying {scenario.name}: {n} events to agent {agent_id!r} on {mqtt}",
            file=sys.stderr,
            flush=True,
        )
        run = asyncio.run(
            replay_over_mqtt(
                scenario, url=mqtt, agent_id=agent_id, speed=speed, progress=_progress(n)
            )
        )
        return _outputs(
            scenario,
            {"agent": run},
            model="(remote agent)",
            clock=clock,
            profile={},
            json_path=json_path,
            decisions=decisions,
            report=report,
        )
    backend = TransformersBackend(model=model, device=device, dtype=dtype)
    backend.load()
    if profile is not None:
        prof = parse_profile(profile)
        source = "given"
    elif scenario.profile is not None:
        prof = LatencyProfile.from_figures(
            step_ms=scenario.profile.step_ms,
            prefill_us_per_token=scenario.profile.prefill_us_per_token,
        )
        source = "scenario"
    else:
        prof = backend.latency.profile()
        source = "measured"
    n = len(scenario.events()) * len(names)
    print(
        f"replaying {scenario.name}: {len(scenario.events())} events x {', '.join(names)} "
        f"({clock} clock, {source} profile: step {prof.step_base_s * 1e3:.2f} ms, prefill "
        f"{prof.prefill_per_token_s * 1e6:.0f} us/token)",
        file=sys.stderr,
        flush=True,
    )
    runs = replay(
        scenario,
        backend,
        strategies=names,
        clock=clock,
        profile=prof,
        speed=speed,
        progress=_progress(n),
    )
    pdict = {k: round(v, 9) for k, v in asdict(prof).items()} | {"source": source}
    return _outputs(
        scenario,
        runs,
        model=model,
        clock=clock,
        profile=pdict,
        json_path=json_path,
        decisions=decisions,
        report=report,
    )


def _outputs(
    scenario: Scenario,
    runs: dict[str, StrategyRun],
    *,
    model: str,
    clock: str,
    profile: dict[str, Any],
    json_path: Path | None,
    decisions: Path | None,
    report: Path | None,
) -> dict[str, Any]:
    print(table(scenario, runs))
    if json_path is not None:
        write_json(json_path, scenario, runs, model=model, clock=clock, profile=profile)
        print(f"json: {json_path}")
    if decisions is not None:
        write_decisions(decisions, runs)
        print(f"decisions: {decisions}")
    if report is not None:
        index = write_report(report, scenario, runs)
        print(f"report: {index}")
    return {"runs": runs}
