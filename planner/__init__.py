"""The idle-time planner: what to write next, and when to stop.

The agent builds and runs its planner; a user configures it (``AgentConfig.planner``) and
nothing else. The planner's parts (branches, forecaster, cover, calibration) are imported by
the other layers from their private modules.
"""

from ._budget import PlannerBudget
from ._live_record import LiveRecord
from ._planner import PlannerConfig

__all__ = [
    "LiveRecord",
    "PlannerBudget",
    "PlannerConfig",
]
