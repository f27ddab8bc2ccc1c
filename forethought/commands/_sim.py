"""``forethought sim``: replay a scenario (or every shipped one), strategies side by side."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from forethought._progress import Bars
from forethought.commands._sim_closed_loop import (
    open_loop_only,
    refuse_open_loop_options,
    run_closed_loop,
)
from forethought.commands._sim_side_by_side import first_events
from forethought.models import (
    LatencyProfile,
    ManagedServerBackend,
    ModelBackend,
    ServerBackend,
    TransformersBackend,
)
from forethought.models.internals import is_server_url
from forethought.policies import ConfigError
from forethought.runtime import AgentConfig
from forethought.sims import (
    PROFILES,
    STRATEGIES,
    Scenario,
    StrategyRun,
    load_scenario,
    metrics,
    record_replay,
    replay,
    replay_over_mqtt,
    replay_threads,
    resolve_profile,
    shipped_scenarios,
    table,
    write_decisions,
    write_json,
    write_report,
)
from forethought.sims.internals import (
    add_references,
    compare_clocks,
    profile_figures,
    record_ros2,
    scenario_ros2_map,
    validate_profiles,
)

__all__ = ["run_matrix", "run_sim", "strategy_names", "wall_share"]

DEFAULT_PROFILE = "cpu-2core-smollm2"


def _progress(bars: Bars, description: str, total: int) -> Callable[[], None]:
    """A no-argument tick for the replay, on ``bars`` (drawn, or a line every 10 s)."""
    advance = bars.bar(description, total)
    return lambda: advance(1)


def strategy_names(text: str) -> tuple[str, ...]:
    """``--strategy``'s value as strategy names (all: every one)."""
    if text == "all":
        return STRATEGIES
    names = tuple(s.strip() for s in text.split(","))
    bad = [n for n in names if n not in STRATEGIES]
    if bad:
        raise ConfigError("--strategy", text, f"unknown {bad}; choose from {STRATEGIES} or all")
    return names


def _profile(
    given: str | None, scenario: Scenario, backend: TransformersBackend
) -> tuple[str, LatencyProfile]:
    if given == "cpu-measured":
        # The simulator computes every pass in process and charges it by the profile, so
        # cpu-measured measures the in-process torch decoder (not a managed llama-server).
        return "cpu-measured (torch decoder)", resolve_profile(given, backend, scenario)
    if given is not None:
        name = given if given in PROFILES else "given"
        return name, resolve_profile(given, backend, scenario)
    if isinstance(scenario.profile, str):
        return scenario.profile, resolve_profile(scenario.profile, backend, scenario)
    if scenario.profile is not None:
        return "scenario", LatencyProfile.from_figures(
            step_ms=scenario.profile.step_ms,
            prefill_us_per_token=scenario.profile.prefill_us_per_token,
        )
    return DEFAULT_PROFILE, PROFILES[DEFAULT_PROFILE]


def _load(model: str, device: str, dtype: str, *, threads: int | None) -> TransformersBackend:
    backend = TransformersBackend(model=model, device=device, dtype=dtype, threads=threads)
    backend.load()
    return backend


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
    seed: int | None = None,
    planner: str | None = None,
    record: Path | None = None,
    mapping: Path | None = None,
    spec: Path | None = None,
    engine: str = "torch",
    events: int | None = None,
    episodes: int | None = None,
) -> dict[str, Any]:
    """Load, replay, print the table, write the outputs.

    With ``planner`` (a server URL) the strategies that plan (tree, hybrid) run twice, side by
    side: all in-process, and with the planner on the server (``<name>@server``) while the
    live tiers stay in-process.
    """
    scenario = _scenario(scenario_path, spec, mapping, events, profile)
    names = strategy_names(strategy)
    if scenario.world is not None:  # the world answers the actions: closed loop
        refuse_open_loop_options(
            mqtt=mqtt, planner=planner, record=record, engine=engine, clock=clock
        )
        with Bars() as bars, bars.wait(f"loading {model}"):
            loaded = _load(
                model, device, dtype, threads=replay_threads(clock, profile, scenario.profile)
            )
        named = ("-", PROFILES[DEFAULT_PROFILE]) if clock == "real" else None
        loop_runs = run_closed_loop(
            scenario, loaded, names=names, clock=clock,
            profile=named or _profile(profile, scenario, loaded), model=model, seed=seed,
            episodes=episodes, json_path=json_path, report=report, decisions=decisions,
        )  # fmt: skip
        return {"closed_loop": loop_runs}
    if clock not in ("virtual", "real", "both"):
        raise ConfigError("--clock", clock, "choose virtual, real or both")
    outputs = {"json_path": json_path, "decisions": decisions, "report": report}
    if mqtt is not None:
        if clock != "real":
            raise ConfigError("--mqtt", mqtt, "replaying through a broker needs --clock real")
        run = _over_mqtt(scenario, mqtt, agent_id, speed)
        return _outputs(
            scenario, {"agent": run}, model="(remote agent)", clock=clock, profile={}, **outputs
        )
    _check_engine(engine, clock)
    with Bars() as bars, bars.wait(f"loading {model}"):
        backend = _load(
            model, device, dtype, threads=replay_threads(clock, profile, scenario.profile)
        )
    if clock == "both":
        return _both(scenario, backend, names, profile, seed, model, json_path)
    n = len(scenario.events()) * len(names)
    if clock == "real":  # passes take the time they take: no profile is used, none is named
        pname, prof, used = "-", PROFILES[DEFAULT_PROFILE], "no profile"
    else:
        with Bars() as bars, bars.wait(f"profile {profile or scenario.profile or 'default'}"):
            pname, prof = _profile(profile, scenario, backend)
        used = (
            f"profile {pname}: step {prof.step_base_s * 1e3:.2f} ms, prefill "
            f"{prof.prefill_per_token_s * 1e6:.0f} us/token"
        )
    print(
        f"replaying {scenario.name}: {len(scenario.events())} events x {', '.join(names)} "
        f"({clock} clock, {used}; seed {scenario.seed if seed is None else seed}; "
        f"engine {engine})",
        file=sys.stderr,
        flush=True,
    )
    with Bars() as bars:
        runs = replay(
            scenario,
            backend if engine == "torch" else _managed(model, names),
            strategies=names,
            clock=clock,
            profile=prof,
            speed=speed,
            progress=_progress(bars, f"replay ({', '.join(names)})", n),
            seed=seed,
        )
    if planner is not None:
        runs.update(_with_server_planner(scenario, backend, names, planner, clock, prof, speed))
    with Bars() as bars, bars.wait("fidelity references"):
        add_references(scenario, runs, backend)
    figures = {"name": pname, **profile_figures(prof)} if clock == "virtual" else {}
    if record is not None:
        _record(record, scenario, runs, scenario_path, mapping)
    return _outputs(scenario, runs, model=model, clock=clock, profile=figures, **outputs)


def _record(
    record: Path,
    scenario: Scenario,
    runs: dict[str, StrategyRun],
    scenario_path: Path,
    mapping: Path | None,
) -> None:
    """``--record``: a ROS 2 recording in gives the decisions as a ROS 2 recording out."""
    ros2_map = scenario_ros2_map(scenario_path, mapping)
    if ros2_map is not None:
        n = record_ros2(record, runs, ros2_map)
        print(f"mcap: {record} ({n} messages, ROS 2 CDR on {ros2_map.actions.topic}/*)")
    else:
        n = record_replay(record, scenario, runs)
        print(f"mcap: {record} ({n} messages)")


def _scenario(
    path: Path, spec: Path | None, mapping: Path | None, events: int | None, profile: str | None
) -> Scenario:
    """The scenario to replay (its first ``events``), its profile checked before any load."""
    recording = path.suffix == ".mcap" or (path / "metadata.yaml").is_file()
    if recording:  # a robot's recording (an MCAP, a rosbag2 folder): the spec and map say how
        if spec is None or mapping is None:
            raise ConfigError("scenario", str(path), "replaying a recording needs --spec and --map")
        scenario = load_scenario(spec, recording=(path, mapping))
    else:
        scenario = load_scenario(path)
    # Every profile is checked before the model loads (a minute on a busy machine).
    if profile is not None:
        validate_profiles(profile)
    elif isinstance(scenario.profile, str):
        validate_profiles(scenario.profile)
    return first_events(scenario, events)


def _check_engine(engine: str, clock: str) -> None:
    """The live tiers' engine: any on the real clock, only the in-process one on virtual time."""
    if engine not in ("torch", "llama-server"):
        raise ConfigError("--engine", engine, "choose torch or llama-server")
    if engine == "llama-server" and clock != "real":
        raise ConfigError(
            "--engine", engine, "a server's time cannot be charged to virtual time: --clock real"
        )


def _managed(model: str, names: tuple[str, ...]) -> Callable[[], ModelBackend]:
    """A managed llama-server per strategy (live-naive's verbose baseline stays in process)."""
    if "live-naive" in names:
        raise ConfigError(
            "--engine", "llama-server", "live-naive is the in-process baseline: leave it out"
        )
    return lambda: ManagedServerBackend(model=model)


def _both(
    scenario: Scenario,
    backend: TransformersBackend,
    names: tuple[str, ...],
    profile: str | None,
    seed: int | None,
    model: str,
    json_path: Path | None,
) -> dict[str, Any]:
    """Replay on the real clock, then on the virtual one; print both and the gap.

    The virtual clock is charged by ``profile``, by default one measured here, now.
    """
    print(f"measuring this machine ({profile or 'cpu-measured'})", file=sys.stderr, flush=True)
    with Bars() as bars, bars.wait(f"measuring ({profile or 'cpu-measured'})"):
        pname, prof = _profile(profile or "cpu-measured", scenario, backend)
    n = 2 * len(scenario.events()) * len(names)
    print(
        f"replaying {scenario.name}: {len(scenario.events())} events x {', '.join(names)} on "
        f"the real clock, then the virtual clock (profile {pname})",
        file=sys.stderr,
        flush=True,
    )
    with Bars() as bars:
        both = compare_clocks(
            scenario,
            backend,
            strategies=names,
            profile_name=pname,
            profile=prof,
            seed=seed,
            progress=_progress(bars, "replay, real then virtual clock", n),
        )
    print(f"model: {model}")
    print(both.table())
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_bytes(
            orjson.dumps({"model": model, **both.as_json()}, option=orjson.OPT_INDENT_2)
        )
        print(f"json: {json_path}")
    return {"runs": both.real, "virtual": both.virtual, "comparison": both}


def _with_server_planner(
    scenario: Scenario,
    backend: TransformersBackend,
    names: tuple[str, ...],
    planner: str,
    clock: str,
    profile: LatencyProfile,
    speed: float,
) -> dict[str, StrategyRun]:
    """The planning strategies again, with the planner on the server at ``planner``."""
    if not is_server_url(planner):
        raise ConfigError("--planner", planner, "give an inference server's URL (http://...)")
    if clock != "real":
        raise ConfigError("--planner", planner, "a planner on a server replays with --clock real")
    planning = tuple(n for n in names if n in ("tree", "hybrid"))
    if not planning:
        raise ConfigError("--planner", planner, "choose a strategy that plans (tree, hybrid)")
    server = AgentConfig.load().server

    def make() -> ServerBackend:
        return ServerBackend(
            url=planner,
            api_key=server.key(),
            ca_file=server.ca_file,
            timeout_s=server.timeout_s,
            poll_s=server.poll_s,
        )

    n = len(scenario.events()) * len(planning)
    print(f"again with the planner on {planner}", file=sys.stderr, flush=True)
    with Bars() as bars:
        remote = replay(
            scenario,
            backend,
            strategies=planning,
            clock=clock,
            profile=profile,
            speed=speed,
            progress=_progress(bars, "replay, planner on the server", n),
            planner_source=make,
        )
    return {f"{name}@server": run for name, run in remote.items()}


def _over_mqtt(scenario: Scenario, url: str, agent_id: str, speed: float) -> StrategyRun:
    n = len(scenario.events())
    print(
        f"replaying {scenario.name}: {n} events to agent {agent_id!r} on {url}",
        file=sys.stderr,
        flush=True,
    )
    with Bars() as bars:
        tick = _progress(bars, "replay over MQTT", n)
        return asyncio.run(
            replay_over_mqtt(scenario, url=url, agent_id=agent_id, speed=speed, progress=tick)
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
    print(f"profile: {profile.get('name', '-')}; model: {model}; clock: {clock}")
    print(table(scenario, runs))
    share = wall_share(runs)
    if share:
        print(share)
    if any(run.models.get("tree") != run.models.get("live") for run in runs.values()):
        for name, run in runs.items():  # the models differ by tier: say which wrote what
            tiers = ", ".join(f"{tier}: {m}" for tier, m in run.models.items() if m is not None)
            print(f"models of {name}: {tiers}")
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


def wall_share(runs: dict[str, StrategyRun]) -> str:
    """One line: each strategy's share of the replay's wall-clock time (where it went).

    Empty when no run took measurable time (a replay through a broker, say).
    """
    total = sum(run.wall_s for run in runs.values())
    if total <= 0:
        return ""
    parts = ", ".join(
        f"{name} {run.wall_s:.1f} s ({100 * run.wall_s / total:.0f} %)"
        for name, run in runs.items()
    )
    return f"wall clock of the replay: {parts}; total {total:.1f} s"


def run_matrix(
    *,
    scenarios: list[Path] | None,
    profiles: list[str] | None,
    model: str,
    device: str,
    dtype: str,
    json_path: Path | None,
    strategy: str = "all",
) -> list[dict[str, Any]]:
    """Every scenario under every profile, each strategy; one summary table (and JSON).

    ``strategy``: all, or a comma list (as ``--strategy`` takes it): the planner's strategies
    alone skip ``live-naive``, which decodes every verbose answer and dominates the run.

    (A loop that prints its table row by row as replays finish: a long run shows progress.)
    """
    strategies = strategy_names(strategy)
    names = profiles or list(PROFILES)
    backend = _load(model, device, dtype, threads=replay_threads("virtual", *names))
    paths = scenarios or shipped_scenarios()
    rows: list[dict[str, Any]] = []
    header = (
        f"{'scenario':<22}{'profile':<19}{'strategy':<11}"
        f"{'correct_in_time':>16}{'answered_in_time':>17}{'fallback':>9}{'fidelity':>9}"
        f"{'waste':>9}{'ref':>9}{'cov/br':>8}"
    )
    print(header)
    for path in paths:
        scenario = open_loop_only(load_scenario(path), "--matrix")
        memo: dict[Any, Any] = {}  # the model's outputs do not depend on the profile
        refs: dict[Any, Any] = {}
        for pname in names:
            prof = resolve_profile(pname, backend)
            runs = replay(scenario, backend, strategies=strategies, profile=prof, memo=memo)
            add_references(scenario, runs, backend, refs)
            for sname, run in runs.items():
                m = metrics(run)
                planned = m["planner"] or {}
                row = {
                    "scenario": scenario.name,
                    "profile": pname,
                    "strategy": sname,
                    **{
                        k: m[k]
                        for k in (
                            "correct_in_time",
                            "answered_in_time",
                            "fallback_rate",
                            "correct",
                            "fidelity",
                            "deadline_hit_rate",
                            "events",
                            "graded",
                        )
                    },
                    # Planner work nobody asked for (None: the strategy runs no planner).
                    "waste": planned.get("waste"),
                    # ...beside what a planner knowing the stream would waste at its coverage.
                    "reference_waste": planned.get("reference_waste"),
                    "coverage_per_branch": planned.get("coverage_per_branch"),
                    "branches_used": planned.get("used"),
                    "branches_generated": planned.get("generated"),
                }
                rows.append(row)
                print(
                    f"{scenario.name:<22}{pname:<19}{sname:<11}"
                    f"{_pc(m['correct_in_time']):>16}{_pc(m['answered_in_time']):>17}"
                    f"{_pc(m['fallback_rate']):>9}{_pc(m['fidelity']):>9}"
                    f"{_pc(row['waste']):>9}{_pc(row['reference_waste']):>9}"
                    f"{_fmt(row['coverage_per_branch']):>8}",
                    flush=True,
                )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_bytes(
            orjson.dumps({"model": model, "rows": rows}, option=orjson.OPT_INDENT_2)
        )
        print(f"json: {json_path}")
    return rows


def _pc(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"
