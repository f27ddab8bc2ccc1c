"""Which branches to write when a neighbouring key can answer for another.

An event type may declare a ``tolerance`` on a numeric parameter: then the executor, finding
no branch for ``obstacle at 1.0 m``, serves the one for ``0.5 m`` or ``1.5 m`` (a *near-event*
answer). Planning every key then writes many answers twice over; planning one key in two
answers most events -- but a borrowed answer is only as good as the model's agreement with
itself across the step. On a parcel sorter the lane does not change between 9 and 13 kg; on a
robot the speed does change between 0.5 and 1.0 m.

So the planner learns that agreement (:class:`BorrowAgreement`: how often two neighbouring
branches it wrote hold the same action, per event type) and chooses branches by a weighted
set cover (:func:`cover`): each open branch has a *need*, the events expected to ask for it
within the horizon; writing a branch meets all of its own need and the agreement's share of
each open neighbour's, whose rest stays open (the exact answer is still worth writing where
the model disagrees with itself). Greedy by need met, which is what a planner that writes the
best branch first and re-ranks after each batch does anyway, and within a factor
``1 - 1/e`` of the best cover of that size.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from forethought.policies import EventKey, EventSpace, PolicyTree

__all__ = ["BorrowAgreement", "cover"]

Ident = tuple[str, EventKey]
"""A branch: (fingerprint, key)."""


class BorrowAgreement:
    """How often a key's answer equals a grid neighbour's, per event type.

    Counted over pairs of neighbouring branches in the tree as they are written, with one
    pseudo-pair each way: 0.5 before any pair, so a fresh planner neither trusts nor rules
    out borrowing and writes both sides of its first pairs -- which is what it learns from.
    """

    def __init__(self) -> None:
        self._same: dict[str, int] = {}
        self._pairs: dict[str, int] = {}

    def observe(
        self,
        tree: PolicyTree,
        space: EventSpace,
        fingerprint: str,
        key: EventKey,
        action: Mapping[str, Any],
    ) -> None:
        """A branch was written: compare it with its neighbours already in the tree."""
        for near, _ in space.neighbours(key):
            other = tree.lookup(fingerprint, near)
            if other is None:
                continue
            self._pairs[key.type] = self._pairs.get(key.type, 0) + 1
            if dict(other.action) == dict(action):
                self._same[key.type] = self._same.get(key.type, 0) + 1

    def rate(self, event_type: str) -> float:
        """The estimated chance a neighbour's answer equals the key's own (0.5 with no data)."""
        same = self._same.get(event_type, 0)
        return (same + 1) / (self._pairs.get(event_type, 0) + 2)

    def pairs(self, event_type: str) -> int:
        """Neighbouring pairs seen for ``event_type``."""
        return self._pairs.get(event_type, 0)


def cover(
    need: Mapping[Ident, float],
    space: EventSpace,
    agreement: BorrowAgreement,
) -> list[tuple[Ident, float]]:
    """Open branches in the order to write them, each with the need it meets.

    ``need``: per open branch, the events expected to ask for it (already reduced where a
    neighbour in the tree answers it). Every open branch comes back once; one whose need its
    neighbours met comes back with what is left (possibly near zero), so the caller's value
    floor decides.
    """
    left = dict(need)
    near: dict[Ident, list[Ident]] = {}
    for fp, key in need:
        near[fp, key] = [(fp, n) for n, _ in space.neighbours(key) if (fp, n) in need]

    def gain(ident: Ident) -> float:
        share = agreement.rate(ident[1].type)
        return left[ident] + share * sum(left[n] for n in near[ident])

    # Lazy greedy: needs only shrink, so a popped entry whose gain is still current is the
    # best one left.
    heap = [(-gain(i), n, i) for n, i in enumerate(need)]
    heapq.heapify(heap)
    out: list[tuple[Ident, float]] = []
    while heap:
        neg, order, ident = heapq.heappop(heap)
        current = gain(ident)
        if current < -neg - 1e-12:
            heapq.heappush(heap, (-current, order, ident))
            continue
        out.append((ident, current))
        share = agreement.rate(ident[1].type)
        left[ident] = 0.0
        for n in near[ident]:
            left[n] *= 1.0 - share
    return out
