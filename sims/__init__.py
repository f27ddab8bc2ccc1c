"""Scenario replay in virtual or real time, strategies side by side, reports.

Public: the simulator's entry points (load a spec or a scenario, replay it on one robot, a
fleet or a real broker, record it) and its report types and writers. The virtual-time loop,
the profiles' measurement parts, the levers, the waste reference and the rest are the CLI's
and the benchmarks' business: they import them from :mod:`forethought.sims.internals`, never
from a private module.
"""

from pathlib import Path

from ._closed_loop import ClosedLoopRun, Episode, Moment, closed_loop_replay, scenario_world
from ._closed_loop_report import (
    ClosedLoopScore,
    closed_loop_score,
    closed_loop_table,
    write_closed_loop,
)
from ._fleet_replay import FleetRun, RobotRun, fleet_replay
from ._gym import GymWorld, Observed
from ._mcap import McapMapping, load_mapping, trace_from_mcap
from ._mcap_record import record_replay
from ._measure import measure_profile
from ._minigrid import minigrid_world
from ._mqtt_replay import replay_over_mqtt
from ._profiles import PROFILES, replay_threads, resolve_profile
from ._records import Record, StrategyRun
from ._replay import STRATEGIES, replay
from ._report import metrics, table, write_decisions, write_json, write_report
from ._scenario import Scenario, load_scenario, load_spec
from ._trace_event import TraceEvent
from ._world import Applied, Emission, Outcome, World, WorldError, WorldEvent, WorldStep

__all__ = [
    "PROFILES",
    "STRATEGIES",
    "Applied",
    "ClosedLoopRun",
    "ClosedLoopScore",
    "Emission",
    "Episode",
    "FleetRun",
    "GymWorld",
    "McapMapping",
    "Moment",
    "Observed",
    "Outcome",
    "Record",
    "RobotRun",
    "Scenario",
    "StrategyRun",
    "TraceEvent",
    "World",
    "WorldError",
    "WorldEvent",
    "WorldStep",
    "closed_loop_replay",
    "closed_loop_score",
    "closed_loop_table",
    "fleet_replay",
    "load_mapping",
    "load_scenario",
    "load_spec",
    "measure_profile",
    "metrics",
    "minigrid_world",
    "record_replay",
    "replay",
    "replay_over_mqtt",
    "replay_threads",
    "resolve_profile",
    "scenario_world",
    "shipped_scenarios",
    "table",
    "trace_from_mcap",
    "write_closed_loop",
    "write_decisions",
    "write_json",
    "write_report",
]


def shipped_scenarios() -> list[Path]:
    """The scenario files that ship with the package."""
    return sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))
