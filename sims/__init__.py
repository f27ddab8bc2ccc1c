"""Scenario replay in virtual or real time, strategies side by side, reports."""

from pathlib import Path

from ._agreement import FIGURES, ClockComparison, FigureGap, compare_clocks
from ._charged import ChargedClock
from ._fidelity import add_references
from ._file_schema import spec_file_schema
from ._fleet_replay import FleetRun, RobotRun, fleet_replay
from ._grading import Grader, Rule
from ._levers import LEVERS, fixed_profile, lever_line, lever_runs, without_abstraction
from ._mcap import McapMapping, McapTrace, load_mapping, record_replay, trace_from_mcap
from ._mqtt_replay import replay_over_mqtt
from ._naive_cache import decode_naive, decode_references, naive_prompts
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
from ._scenario_check import TRACE_HINT, check_scenario
from ._vloop import VirtualTimeLoop, run_virtual
from ._waste import (
    WasteReference,
    event_distribution,
    reference_waste,
    state_visits,
    waste_figures,
)

__all__ = [
    "FIGURES",
    "LEVERS",
    "PROFILES",
    "SCENARIO_KEYS",
    "STRATEGIES",
    "TRACE_HINT",
    "ChargedClock",
    "ClockComparison",
    "Drift",
    "FigureGap",
    "FleetRun",
    "Generate",
    "Grader",
    "McapMapping",
    "McapTrace",
    "Record",
    "RobotRun",
    "Rule",
    "Scenario",
    "StrategyRun",
    "TraceEvent",
    "VirtualTimeLoop",
    "WasteReference",
    "add_references",
    "check_scenario",
    "compare_clocks",
    "decode_naive",
    "decode_references",
    "event_distribution",
    "fixed_profile",
    "fleet_replay",
    "lever_line",
    "lever_runs",
    "load_mapping",
    "load_scenario",
    "load_spec",
    "measure_profile",
    "metrics",
    "naive_prompts",
    "profile_figures",
    "record_replay",
    "reference_waste",
    "replay",
    "replay_over_mqtt",
    "resolve_profile",
    "run_virtual",
    "shipped_scenarios",
    "spec_file_schema",
    "state_visits",
    "table",
    "trace_from_mcap",
    "waste_figures",
    "without_abstraction",
    "write_decisions",
    "write_json",
    "write_report",
]


def shipped_scenarios() -> list[Path]:
    """The scenario files that ship with the package."""
    return sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))
