"""Guard refusals, counted by tier and by guard name (what health, metrics and reports show)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["GuardCounts"]


@dataclass(slots=True)
class GuardCounts:
    """How often guards refused an answer, and what they dropped or could not prevent.

    ``refused[tier][guard]``: answers of that tier (tree, score, live) a guard refused; the
    executor went on to the next tier. ``dropped``: branches of a loaded tree a guard now
    refuses, removed at load. ``default_breaks``: defaults sent although a guard refused them
    (a state or event outside the declared domains ``forethought check`` proves the default
    over: the default is the last answer there is).
    """

    refused: dict[str, dict[str, int]] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    default_breaks: int = 0

    def refuse(self, tier: str, guard: str) -> None:
        """Count one refusal."""
        by_guard = self.refused.setdefault(tier, {})
        by_guard[guard] = by_guard.get(guard, 0) + 1

    def total(self, tier: str | None = None) -> int:
        """Refusals of one tier, or of all."""
        if tier is not None:
            return sum(self.refused.get(tier, {}).values())
        return sum(sum(g.values()) for g in self.refused.values())

    def as_dict(self) -> dict[str, Any]:
        """Plain data: ``{"refused": {tier: {guard: n}}, "dropped": {...}, "default_breaks"}``."""
        return {
            "refused": {t: dict(g) for t, g in self.refused.items()},
            "dropped": dict(self.dropped),
            "default_breaks": self.default_breaks,
        }
