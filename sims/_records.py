"""What a replay records: one line per event and strategy, and each strategy's figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forethought.runtime import Tier

from ._call_log import CallEntry

__all__ = ["Record", "StrategyRun"]


@dataclass(frozen=True, slots=True)
class Record:
    """What happened to one event under one strategy (a line of the decisions file)."""

    strategy: str
    index: int
    type: str
    params: dict[str, Any]
    at_ms: float
    deadline_ms: float
    latency_ms: float
    """From the stimulus (``at_ms``) to the decision, perception included."""
    tier: str
    action: dict[str, Any]
    met: bool
    approximate: bool = False
    out_of_space: bool = False
    correct: bool | None = None
    decide_cpu_ms: float = 0.0
    """Real time the decision took on this machine (tree selection is measured here)."""
    context: str = ""
    """The prompt context (task and state) the decision was made in: for the fidelity check."""
    event_text: str = ""
    """The event as the model is shown it."""
    nearest: str | None = None
    """An approximate tree answer's detail: borrowed across a neighbouring ``event`` key or a
    neighbouring ``state``."""
    skipped: tuple[str, ...] = ()
    """Why each tier before the answering one did not answer (``tier: reason``)."""
    budget_ms: float | None = None
    """What the executor had left when the event reached it (deadline - margin - arrival)."""
    guarded: tuple[tuple[str, str], ...] = ()
    """(tier, guard) for each answer a guard refused before this one was sent: that tier
    did not answer the event."""

    @property
    def model_written(self) -> bool:
        """Whether the model wrote this action for this event (not the default)."""
        return self.tier in (Tier.TREE.value, Tier.SCORE.value, Tier.LIVE.value)

    def as_json(self) -> dict[str, Any]:
        """The JSONL line."""
        return {
            "strategy": self.strategy,
            "index": self.index,
            "type": self.type,
            "params": self.params,
            "at_ms": self.at_ms,
            "deadline_ms": self.deadline_ms,
            "latency_ms": round(self.latency_ms, 3),
            "tier": self.tier,
            "action": self.action,
            "met": self.met,
            "approximate": self.approximate,
            "nearest": self.nearest,
            "out_of_space": self.out_of_space,
            "correct": self.correct,
            "skipped": list(self.skipped),
        } | (
            # Only where a guard refused an answer: other replays' lines stay as they were.
            {"guarded": [{"tier": t, "guard": g} for t, g in self.guarded]} if self.guarded else {}
        )


@dataclass(slots=True)
class StrategyRun:
    """One strategy's records and its planner figures."""

    strategy: str
    records: list[Record] = field(default_factory=list)
    planner: dict[str, Any] = field(default_factory=dict)
    timeline: list[tuple[float, float, float]] = field(default_factory=list)
    """(time s, coverage, planner busy fraction so far) samples."""
    model: dict[str, Any] = field(default_factory=dict)
    """Model-time figures: passes and seconds charged (virtual clock)."""
    reference: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Event index -> what the model writes for that event and state with no deadline."""
    wall_s: float = 0.0
    models: dict[str, str | None] = field(default_factory=dict)
    """Tier -> the model that answers it (the tree's is the planner's)."""
    calls: list[CallEntry] = field(default_factory=list)
    """Every model call as it ran (a replay of the in-process model logs them)."""
