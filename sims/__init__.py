"""Scenario replay in virtual or real time, strategies side by side, reports."""

from pathlib import Path

from ._agreement import FIGURES, ClockComparison, FigureGap, compare_clocks
from ._charged import ChargedClock
from ._fidelity import add_references
from ._grading import Grader, Rule
from ._levers import LEVERS, fixed_profile, lever_line, lever_runs, without_abstraction
from ._mcap import McapMapping, McapTrace, load_mapping, record_replay, trace_from_mcap
from ._mqtt_replay import replay_over_mqtt
from ._profiles import PROFILES, measure_profile, profile_figures, resolve_profile
from ._records import Record, StrategyRun
from ._replay import STRATEGIES, replay
from ._report import metrics, table, write_decisions, write_json, write_report
from ._scenario import (
    SCENARIO_KEYS,
    Drift,
    Generate,
    Scenario,
    TraceEvent,
    load_scenario,
    load_spec,
)
from ._vloop import VirtualTimeLoop, run_virtual

__all__ = [
    "FIGURES",
    "LEVERS",
    "PROFILES",
    "SCENARIO_KEYS",
    "STRATEGIES",
    "ChargedClock",
    "ClockComparison",
    "Drift",
    "FigureGap",
    "Generate",
    "Grader",
    "McapMapping",
    "McapTrace",
    "Record",
    "Rule",
    "Scenario",
    "StrategyRun",
    "TraceEvent",
    "VirtualTimeLoop",
    "add_references",
    "compare_clocks",
    "fixed_profile",
    "lever_line",
    "lever_runs",
    "load_mapping",
    "load_scenario",
    "load_spec",
    "measure_profile",
    "metrics",
    "profile_figures",
    "record_replay",
    "replay",
    "replay_over_mqtt",
    "resolve_profile",
    "run_virtual",
    "shipped_scenarios",
    "table",
    "trace_from_mcap",
    "without_abstraction",
    "write_decisions",
    "write_json",
    "write_report",
]


def shipped_scenarios() -> list[Path]:
    """The scenario files that ship with the package."""
    return sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))
