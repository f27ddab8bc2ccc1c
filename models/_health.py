"""PlannerHealth: whether the planner does its job, said truthfully, with backoff after failures.

The planner must never stop because its model failed (a worker killed, an exception, a hang, a
batch of malformed or runaway outputs): the tree it fills is what answers events in time, and an
agent whose planner task died would go on answering from a tree that never grows again. So every
failed round is caught, counted here, and followed by a pause that doubles with each failure in
a row (``retry_base_s`` up to ``retry_max_s``) -- a broken model is not hammered, a transient
fault is retried soon -- and the first round that writes a branch again ends the streak.

What "healthy" means is narrow on purpose, so an operator can trust it:

* ``starting``: no round has finished yet;
* ``ok``: the last round that ran wrote at least one branch (or found nothing to write);
* ``backing_off``: the last round failed -- it raised, hung past its time limit, or every branch
  it tried came back unusable -- and the next try waits until ``retry_at``.

Time is the caller's (the planner passes its loop's clock), so replays stay deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["HealthStatus", "PlannerHealth"]

HealthStatus = Literal["starting", "ok", "backing_off"]


@dataclass(slots=True)
class PlannerHealth:
    """The planner's health and its failure streak (see the module docstring)."""

    retry_base_s: float
    retry_max_s: float
    status: HealthStatus = "starting"
    failures: int = 0
    """Failed rounds, all told."""
    streak: int = 0
    """Failed rounds in a row (0 once a round succeeds)."""
    recoveries: int = 0
    """Streaks that ended with a good round: the planner came back."""
    last_error: str | None = None
    last_error_at: float | None = None
    last_ok_at: float | None = None
    retry_at: float | None = None
    streak_started_at: float | None = None
    recovery_s: list[float] | None = None
    """Per recovery: from the first failure of the streak to the good round that ended it."""

    def failed(self, kind: str, detail: str, now: float) -> float:
        """Count a failed round; returns how long to wait before the next one."""
        self.failures += 1
        if self.streak == 0:
            self.streak_started_at = now
        self.streak += 1
        self.status = "backing_off"
        self.last_error = f"{kind}: {detail}"[:300]
        self.last_error_at = now
        delay: float = min(self.retry_base_s * 2.0 ** (self.streak - 1), self.retry_max_s)
        self.retry_at = now + delay
        return delay

    def succeeded(self, now: float) -> None:
        """Count a good round: the streak (if any) ends and the planner is ``ok``."""
        if self.streak and self.streak_started_at is not None:
            self.recoveries += 1
            if self.recovery_s is None:
                self.recovery_s = []
            self.recovery_s.append(now - self.streak_started_at)
        self.streak = 0
        self.streak_started_at = None
        self.retry_at = None
        self.status = "ok"
        self.last_ok_at = now

    def as_dict(self, now: float) -> dict[str, Any]:
        """Plain data for the health report; times as seconds before ``now``."""

        def ago(t: float | None) -> float | None:
            return None if t is None else round(now - t, 3)

        return {
            "status": self.status,
            "failures": self.failures,
            "streak": self.streak,
            "recoveries": self.recoveries,
            "last_error": self.last_error,
            "last_error_s_ago": ago(self.last_error_at),
            "last_ok_s_ago": ago(self.last_ok_at),
            "retry_in_s": None if self.retry_at is None else round(max(self.retry_at - now, 0), 3),
        }
