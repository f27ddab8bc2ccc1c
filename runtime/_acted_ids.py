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

from dataclasses import dataclass

from ._id_window import ACTED_MAX_IDS, ACTED_WINDOW_S, IdWindow

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

    def __init__(self, *, window_s: float = ACTED_WINDOW_S, max_ids: int = ACTED_MAX_IDS) -> None:
        self._seen = IdWindow(max_ids=max_ids, window_s=window_s)  # refuses bad bounds
        self.window_s = window_s
        self.max_ids = max_ids
        self.stats = ActedIdsStats()

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._seen

    def first(self, event_id: str, *, now: float) -> bool:
        """True the first time ``event_id`` is seen within the window (act on it), else False."""
        self._seen.forget_old(now)
        seen_at = self._seen.seen_at(event_id)
        if seen_at is not None:
            self.stats.repeats += 1
            self.stats.repeat_gap_max_s = max(self.stats.repeat_gap_max_s, now - seen_at)
            return False
        self._seen.add(event_id, now=now)
        self.stats.forgotten_early = self._seen.forgotten_early  # the window counts
        self.stats.first += 1
        return True
