"""The simulator layer's internals, for the other layers of this package: not a stable API.

The one door through which another layer (or the test kit, or the benches) reaches a name this
layer keeps out of its public ``__init__``: a collaborator, not something a user should build
on. Its names may change without notice; the import contract "A layer's private modules are
its own" (pyproject.toml) keeps every other layer to this module and the ``__init__``.

A name is imported from its module on first use, so importing this door loads nothing more
than the names asked for.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._agreement import compare_clocks
    from ._closed_loop_report import closed_loop_json
    from ._fidelity import add_references
    from ._file_schema import spec_file_schema
    from ._fleet_replay import FleetStates
    from ._levers import LEVERS, fixed_profile, lever_runs, without_abstraction
    from ._naive_cache import decode_naive, decode_references, naive_prompts
    from ._profiles import profile_figures, validate_profiles
    from ._ros2_record import record_ros2
    from ._ros2_recording import scenario_ros2_map
    from ._scenario import SCENARIO_KEYS
    from ._scenario_check import check_accept, check_scenario

__all__ = [
    "LEVERS",
    "SCENARIO_KEYS",
    "FleetStates",
    "add_references",
    "check_accept",
    "check_scenario",
    "closed_loop_json",
    "compare_clocks",
    "decode_naive",
    "decode_references",
    "fixed_profile",
    "lever_runs",
    "naive_prompts",
    "profile_figures",
    "record_ros2",
    "scenario_ros2_map",
    "spec_file_schema",
    "validate_profiles",
    "without_abstraction",
]

# Name -> the private module that defines it (relative to this package).
_WHERE = {
    "FleetStates": "._fleet_replay",
    "LEVERS": "._levers",
    "SCENARIO_KEYS": "._scenario",
    "add_references": "._fidelity",
    "check_accept": "._scenario_check",
    "check_scenario": "._scenario_check",
    "closed_loop_json": "._closed_loop_report",
    "compare_clocks": "._agreement",
    "decode_naive": "._naive_cache",
    "decode_references": "._naive_cache",
    "fixed_profile": "._levers",
    "lever_runs": "._levers",
    "naive_prompts": "._naive_cache",
    "profile_figures": "._profiles",
    "record_ros2": "._ros2_record",
    "scenario_ros2_map": "._ros2_recording",
    "spec_file_schema": "._file_schema",
    "validate_profiles": "._profiles",
    "without_abstraction": "._levers",
}


def __getattr__(name: str) -> _typing.Any:
    # Imported on first use: a name's module (and what it needs) loads only when asked for.
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(_WHERE[name], __package__), name)
