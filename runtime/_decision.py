"""Decisions: what the executor answered for one event, and how."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forethought.policies import EventKey

from ._skipped import skipped_payload

if TYPE_CHECKING:
    from ._event import Event

__all__ = ["Decision", "Tier", "late_reason", "wall_ns"]


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
    """Whether the decision came before the deadline (margin included), the deadline counted
    from when the event was sent; never for an event of unknown age answered by default."""
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
    late: str | None = None
    """Why the decision is not met (``late: selection 0.4 ms, but the event arrived ...``)."""
    deadline_ns: int | None = None
    """The deadline on the wall clock: an actuator drops an action that arrives after it."""
    decided_at_ns: int | None = None
    """When the decision was made, on the wall clock."""
    guarded: tuple[tuple[str, str], ...] = ()
    """(tier, guard) for each answer a guard refused before this one was sent."""
    by_watchdog: bool = False
    """Sent by the stall watchdog while the loop was stalled (``on_stall``): already acted on,
    so publishing it later is a report of what was sent, never a late action."""

    def payload(self) -> dict[str, Any]:
        """The actions-topic payload (``guarded`` only when a guard refused an answer)."""
        out = {
            "id": self.event_id,
            "action": self.action,
            "tier": self.tier.value,
            "latency_ms": round(self.latency_s * 1e3, 3),
            "met": self.met,
            "approximate": self.approximate,
            "nearest": self.nearest,
            "out_of_space": self.out_of_space,
            "late": self.late,
            "skipped": skipped_payload(self.skipped),
            "deadline_ns": self.deadline_ns,
            "decided_at_ns": self.decided_at_ns,
        }
        if self.guarded:
            out["guarded"] = [{"tier": t, "guard": g} for t, g in self.guarded]
        return out


def wall_ns(at: float | None, event: Event) -> int | None:
    """A time on the loop's clock as wall-clock nanoseconds (the event's arrival offset)."""
    return None if at is None else round((at - event.wall_offset_s) * 1e9)


def late_reason(event: Event, tier: Tier, now: float, margin_ms: float) -> str:
    """Why a decision made at ``now`` missed ``event``'s deadline (minus the margin)."""
    assert event.deadline is not None
    took = (now - event.arrived_at) * 1e3
    what = "selection" if tier is Tier.TREE else tier.value
    behind = (event.arrived_at - event.deadline) * 1e3
    if behind >= 0:
        return (
            f"late: {what} {took:.1f} ms, but the event arrived {behind:.1f} ms after its deadline"
        )
    if -behind <= margin_ms:
        return (
            f"late: {what} {took:.1f} ms, but the event arrived {-behind:.1f} ms before its "
            f"deadline, inside the {margin_ms:g} ms margin kept for publishing"
        )
    waited = (event.arrived_at - event.counted_from) * 1e3
    return (
        f"late: {what} {took:.1f} ms, past the {-behind - margin_ms:.1f} ms left of its "
        f"deadline when it arrived ({waited:.1f} ms after it was sent)"
    )
