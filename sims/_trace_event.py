"""One event of a scenario's trace: when it comes, what it is, how its answer is graded.

Its own module because a scenario file's ``trace`` and a robot's MCAP recording (:mod:`._mcap`)
both become a list of these, and the scenario loader reads recordings: neither of the two
modules imports the other for the type.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._grading import Grader

__all__ = ["TraceEvent"]


class TraceEvent(BaseModel):
    """One event of the trace."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    at_ms: float = Field(ge=0)
    type: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    deadline_ms: float | None = Field(default=None, gt=0)
    state: dict[str, Any] | None = None
    accept: list[Any] | None = None
    """Grading rules of this event (override its type's): see :mod:`._grading`."""
    grader: Grader | None = Field(default=None, exclude=True)
    """``accept`` as checked rules (set by :func:`load_scenario`)."""

    def describe(self) -> str:
        """The event as shown to a model when it is outside the declared space."""
        params = " ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.type}: {params}" if params else self.type
