"""The actuator's half of "acted on once": the event ids it has acted on, for a window.

No broker gives exactly-once through its own crashes. Mosquitto saves its state after it
answers, so a broker killed in between restarts from a state older than its clients' own: at
QoS 1 it sends again what a subscriber already acknowledged, and at QoS 2 it can even hand a
new message a packet id the subscriber still holds for an unfinished one -- which the
subscriber then drops as the old one's copy (measured in R3: one action lost, its neighbour
delivered twice, at one kill). What does survive is at-least-once delivery (subscribe at
QoS 1, which delivers on arrival) and an actuator that acts once per event id. Every decision
Forethought sends carries its event's id, so this is all the actuator needs::

    acted = ActedIds(window_s=60.0)
    async for message in client.messages:
        action = orjson.loads(message.payload)
        if acted.first(action["id"], now=loop.time()):
            actuate(action["action"])

The window should cover the longest outage a repeat can come after (the bench measures the
largest first-to-repeat gap: ``repeat_gap_max_s`` in R3) and need not outlast the events'
deadlines by much, since an action for an event long past its deadline is stale anyway.
Like the rest of the runtime it reads no clock: the caller passes ``now``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["ActedIds", "ActedIdsStats"]


@dataclass(slots=True)
class ActedIdsStats:
    """What :class:`ActedIds` has seen."""

    first: int = 0
    """Ids seen for the first time (or again after they were forgotten): act on these."""
    repeats: int = 0
    """Ids seen again while remembered: dropped."""
    forgotten_early: int = 0
    """Ids forgotten before their window ended because ``max_ids`` were held: a repeat of one
    of these would be acted on twice, so a non-zero count means the bound is too small."""
    repeat_gap_max_s: float = 0.0
    """The longest time from an id's first sighting to a repeat of it."""


class ActedIds:
    """Event ids acted on within the last ``window_s`` seconds, at most ``max_ids`` of them.

    :meth:`first` says whether an id is new (and remembers it). Memory is bounded both ways:
    ids older than the window are forgotten as time passes, and past ``max_ids`` the oldest
    goes first (counted in :attr:`stats` as ``forgotten_early``).
    """

    def __init__(self, *, window_s: float = 600.0, max_ids: int = 100_000) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        if max_ids < 1:
            raise ValueError(f"max_ids must be >= 1, got {max_ids!r}")
        self.window_s = window_s
        self.max_ids = max_ids
        self.stats = ActedIdsStats()
        # Insertion order is first-sighting order, so the oldest are always at the front.
        self._seen: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._seen

    def first(self, event_id: str, *, now: float) -> bool:
        """True the first time ``event_id`` is seen within the window (act on it), else False."""
        self._forget_before(now - self.window_s)
        seen_at = self._seen.get(event_id)
        if seen_at is not None:
            self.stats.repeats += 1
            self.stats.repeat_gap_max_s = max(self.stats.repeat_gap_max_s, now - seen_at)
            return False
        if len(self._seen) >= self.max_ids:
            self._seen.popitem(last=False)
            self.stats.forgotten_early += 1
        self._seen[event_id] = now
        self.stats.first += 1
        return True

    def _forget_before(self, cutoff: float) -> None:
        while self._seen:
            oldest, at = next(iter(self._seen.items()))
            if at > cutoff:
                return
            del self._seen[oldest]
