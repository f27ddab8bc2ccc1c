"""Decisions: what the executor answered for one event, and how."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from forethought.policies import EventKey

__all__ = ["Decision", "Tier"]


class Tier(enum.Enum):
    """Where an action came from, cheapest first."""

    TREE = "tree"
    """Selected from the precomputed policy tree (microseconds)."""
    SCORE = "score"
    """The best of the enumerable candidates, scored in one forward pass."""
    LIVE = "live"
    """Generated now, constrained and compact, from the cached state prefix."""
    DEFAULT = "default"
    """The declared safe action."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The one decision for an event."""

    event_id: str
    tier: Tier
    action: dict[str, Any]
    """The validated, readable action."""
    latency_s: float
    """From arrival to decision."""
    budget_s: float
    """Deadline minus arrival minus the configured margin."""
    met: bool
    """Whether the decision came before the deadline (margin included)."""
    approximate: bool = False
    """A tree answer borrowed from a neighbouring grid key or a neighbouring state."""
    nearest: str | None = None
    """For an approximate tree answer, what was borrowed across: ``"event"`` (a neighbouring
    grid key in this state) or ``"state"`` (this key in a neighbouring state)."""
    out_of_space: bool = False
    key: EventKey | None = None
    skipped: tuple[tuple[str, str], ...] = ()
    """(tier, why) for each tier passed over."""
    decided_at: float = 0.0

    def payload(self) -> dict[str, Any]:
        """The actions-topic payload."""
        return {
            "id": self.event_id,
            "action": self.action,
            "tier": self.tier.value,
            "latency_ms": round(self.latency_s * 1e3, 3),
            "met": self.met,
            "approximate": self.approximate,
            "nearest": self.nearest,
            "out_of_space": self.out_of_space,
        }
