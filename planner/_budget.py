"""The planner's budget: how much model work it may spend per minute, set by the user.

Left alone, the planner writes every branch whose value clears its floor and cost, whenever
the model is idle. On a shared inference server, or a battery, a user may want less: at most
so many branches per minute, or so many device-seconds per minute. The budget is a bucket
that fills at that rate and holds at most one minute's worth (so a quiet start may spend a
minute's worth at once). Each batch spends from it; an empty bucket puts the planner to sleep
until it holds enough for the next branch.

Where the budget goes: the planner always writes its most valuable branches first (value =
the chance the branch is used within the horizon x urgency), and in one writing mode every
branch costs the same device time, so that order is the order of expected gain per second.
A batch is cut to what the bucket holds.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["BudgetBucket", "PlannerBudget"]


class PlannerBudget(BaseModel):
    """``planner.budget``: a limit on the planner's model work per minute (one of the two)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    branches_per_minute: float | None = Field(default=None, gt=0)
    """Branches written per minute, at most."""
    device_s_per_minute: float | None = Field(default=None, gt=0, le=60)
    """Seconds of model time per minute, at most (on a shared server: its share of it)."""

    @model_validator(mode="after")
    def _one(self) -> PlannerBudget:
        if (self.branches_per_minute is None) == (self.device_s_per_minute is None):
            raise ValueError("give branches_per_minute or device_s_per_minute (one of them)")
        return self


class BudgetBucket:
    """A bucket filling at the budget's rate, holding at most one minute's worth.

    Units are branches or device-seconds, as the budget says. Times are the caller's clock
    (the event loop's), so a virtual replay spends virtual minutes.
    """

    def __init__(self, budget: PlannerBudget, now: float) -> None:
        per_minute = budget.branches_per_minute or budget.device_s_per_minute or 0.0
        self.in_branches = budget.branches_per_minute is not None
        self._rate = per_minute / 60.0
        self._cap = per_minute
        self._level = per_minute
        self._at = now

    def level(self, now: float) -> float:
        """What the bucket holds now."""
        self._level = min(self._cap, self._level + (now - self._at) * self._rate)
        self._at = now
        return self._level

    def branches(self, now: float, seconds_per_branch: float) -> int:
        """Branches the bucket pays for now (whole ones)."""
        held = self.level(now)
        if self.in_branches:
            return int(held + 1e-9)
        return int(held / seconds_per_branch + 1e-9) if seconds_per_branch > 0 else 0

    def wait_s(self, now: float, seconds_per_branch: float) -> float:
        """Seconds until the bucket pays for one branch."""
        need = 1.0 if self.in_branches else seconds_per_branch
        return max(0.0, (need - self.level(now)) / self._rate)

    def spend(self, now: float, *, branches: int, device_s: float) -> None:
        """Take a batch's work out (device time may overdraw it: a batch is not cut mid-way)."""
        self.level(now)
        self._level -= branches if self.in_branches else device_s
