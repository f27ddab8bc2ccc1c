"""Start steps: what an agent says while it starts, for whoever shows it to a person.

Starting an agent waits tens of seconds on a small CPU (a model loaded or converted, an engine
started, the grammar compiled and one call timed). :class:`StartSteps` is how the agent names
each wait as it begins and ends, without knowing how it is shown: ``forethought run`` draws
them (or writes a line each), a library caller passes nothing and nothing is said.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Protocol

__all__ = ["NoSteps", "StartSteps"]


class StartSteps(Protocol):
    """Receives an agent's start steps, one context per step."""

    def step(self, description: str) -> contextlib.AbstractContextManager[None]:
        """A context entered as the step ``description`` begins and left when it ends."""
        ...


class NoSteps:
    """Says nothing: an agent's default."""

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """Run the step in silence."""
        yield
