"""A branch the planner may generate: one event in one state, with its chance and value.

Its own module because the planner ranks and writes branches and the fleet link claims them
across agents: both name the type, and neither should import the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from forethought.policies import EventKey, WorldState

__all__ = ["Branch"]


@dataclass(frozen=True, slots=True)
class Branch:
    """A branch the planner may generate: event ``key`` in state ``state``."""

    state: WorldState
    """The concrete state the model is shown."""
    key: EventKey
    probability: float
    """Chance the branch answers at least one event within the horizon."""
    value: float
    """``probability`` x urgency."""
    next_fingerprint: str | None

    @property
    def fingerprint(self) -> str:
        """The fingerprint the branch is stored under (the state as its event type sees it)."""
        return self.state.fingerprint_for(self.key.type)
