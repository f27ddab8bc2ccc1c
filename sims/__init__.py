"""Scenario replay in virtual or real time, strategies side by side, reports."""

from ._charged import ChargedBackend
from ._mqtt_replay import replay_over_mqtt
from ._replay import STRATEGIES, Record, StrategyRun, replay
from ._report import metrics, table, write_decisions, write_json, write_report
from ._scenario import Generate, Scenario, TraceEvent, load_scenario
from ._vloop import VirtualTimeLoop, run_virtual

__all__ = [
    "STRATEGIES",
    "ChargedBackend",
    "Generate",
    "Record",
    "Scenario",
    "StrategyRun",
    "TraceEvent",
    "VirtualTimeLoop",
    "load_scenario",
    "metrics",
    "replay",
    "replay_over_mqtt",
    "run_virtual",
    "table",
    "write_decisions",
    "write_json",
    "write_report",
]
