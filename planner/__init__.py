"""The idle-time planner: what to write next, and when to stop.

The agent builds and runs its planner; a user configures it (``AgentConfig.planner``) and
nothing else. The planner's parts (branches, forecaster, calibration) are imported by the
other layers from :mod:`forethought.planner.internals`, never from a private module.
"""

from ._budget import PlannerBudget
from ._live_record import LiveRecord
from ._planner import PlannerConfig

__all__ = [
    "LiveRecord",
    "PlannerBudget",
    "PlannerConfig",
]
