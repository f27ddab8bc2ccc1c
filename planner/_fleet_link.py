"""What a planner needs from a fleet: whose states to plan for, and who writes which branch.

A planner alone plans for its own state and writes every branch it ranks. In a fleet many
planners (workers on GPU hosts, and agents cut off from them) share one tree, so three things
change, and this protocol is the whole of it:

* **origins**: the states to look ahead from, each weighted by the robots in it (a branch's
  value becomes its chance of use summed over the fleet, so a state three robots share outranks
  one robot's);
* **taken / claim**: a branch someone else holds is not a candidate, and a batch is written only
  for the branches this planner has claimed (compare-and-set, so no branch is written twice);
* **written**: each branch written goes to the shared tree.

The runtime's NATS fleet tree implements it; the planner layer knows nothing of NATS. It lives
here, not in the fleet's room (``forethought.runtime.fleet``), because the planner uses it and
may not import the runtime layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from forethought.policies import EventKey, PolicyNode, WorldState

if TYPE_CHECKING:
    from ._branch import Branch

__all__ = ["FleetLink"]


class FleetLink(Protocol):
    """The planner's view of a fleet sharing one policy tree."""

    def origins(self, own: WorldState) -> Sequence[tuple[WorldState, float]]:
        """The states to plan for and how many robots are in each (``own``: the planner's)."""
        ...

    def taken(self, fingerprint: str, key: EventKey) -> bool:
        """Whether the branch is not this planner's to write (claimed elsewhere, or not now)."""
        ...

    async def claim(self, branches: Sequence[Branch]) -> list[Branch]:
        """The branches of ``branches`` this planner may write (claimed for it, in order)."""
        ...

    def written(self, node: PolicyNode) -> None:
        """A branch was written into the planner's tree: share it with the fleet."""
        ...
