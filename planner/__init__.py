"""The idle-time planner: what to write next, and when to stop."""

from ._budget import BudgetBucket, PlannerBudget
from ._calibration import Calibration, calibration, markov_bound
from ._cover import BorrowAgreement, cover
from ._drift import StateDrift
from ._fleet_link import FleetLink
from ._forecaster import Forecaster
from ._lookahead import Expected, Pace, look_ahead
from ._planner import Branch, Planner, PlannerConfig, PlannerStats

__all__ = [
    "BorrowAgreement",
    "Branch",
    "BudgetBucket",
    "Calibration",
    "Expected",
    "FleetLink",
    "Forecaster",
    "Pace",
    "Planner",
    "PlannerBudget",
    "PlannerConfig",
    "PlannerStats",
    "StateDrift",
    "calibration",
    "cover",
    "look_ahead",
    "markov_bound",
]
