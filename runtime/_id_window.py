"""IdWindow: the event ids seen recently, bounded in time and in number.

A redelivered event carries the id of its first copy, and every place that must act once per
id keeps a window of the ids it has seen: the executor (decide an id once), the MQTT bus (hand
a decision to the broker once) and an actuator (:class:`~forethought.runtime.ActedIds`: act
once). Each keeps its own bounds, named here so that they are read in one place:

=====================  ======================  ==============================================
user                   window                  most ids
=====================  ======================  ==============================================
executor               ``EXECUTOR_WINDOW_S``   ``EXECUTOR_MAX_IDS`` (``ExecutorConfig``)
MQTT, published        none: by number only    ``MQTT_PUBLISHED_MAX_IDS`` (``MqttBus``)
actuator (ActedIds)    ``ACTED_WINDOW_S``      ``ACTED_MAX_IDS``
=====================  ======================  ==============================================

Memory is bounded both ways: an id is forgotten ``window_s`` after it was first seen (when
the owner calls :meth:`IdWindow.forget_old`), and past ``max_ids`` the oldest goes first,
counted as ``forgotten_early`` (a repeat of one of those would pass as new). It reads no
clock: the caller passes ``now``, on whatever clock it keeps (the loop's, in the runtime).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = [
    "ACTED_MAX_IDS",
    "ACTED_WINDOW_S",
    "EXECUTOR_MAX_IDS",
    "EXECUTOR_WINDOW_S",
    "MQTT_PUBLISHED_MAX_IDS",
    "IdWindow",
]

EXECUTOR_WINDOW_S = 600.0
"""How long the executor remembers a decided id (``ExecutorConfig.remember_ids_s``)."""
EXECUTOR_MAX_IDS = 1_000_000
"""The most decided ids the executor remembers (``ExecutorConfig.max_remembered_ids``)."""
MQTT_PUBLISHED_MAX_IDS = 65_536
"""The most published event ids an MQTT bus remembers (``MqttBus(remember_published=)``)."""
ACTED_WINDOW_S = 600.0
"""How long an actuator's :class:`ActedIds` remembers an id it acted on, by default."""
ACTED_MAX_IDS = 100_000
"""The most ids an actuator's :class:`ActedIds` remembers, by default."""


class IdWindow:
    """Event ids first seen within the last ``window_s`` seconds, at most ``max_ids`` of them.

    Args:
        max_ids: the most ids held (at least 1); past it the oldest is forgotten early.
        window_s: how long an id is held after it was first seen (None: until pushed out by
            ``max_ids``). An id first seen at ``t`` is forgotten by :meth:`forget_old` once
            ``now - t >= window_s``.

    """

    def __init__(self, *, max_ids: int, window_s: float | None = None) -> None:
        if window_s is not None and not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        if max_ids < 1:
            raise ValueError(f"max_ids must be >= 1, got {max_ids!r}")
        self.window_s = window_s
        self.max_ids = max_ids
        self.forgotten_early = 0
        """Ids forgotten before their window ended because ``max_ids`` were held."""
        # Insertion order is first-sighting order, so the oldest are always at the front.
        self._seen: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._seen

    def seen_at(self, event_id: str) -> float | None:
        """When ``event_id`` was first seen, if it is held (else None)."""
        return self._seen.get(event_id)

    def add(self, event_id: str, *, now: float) -> None:
        """Hold ``event_id``, first seen at ``now`` (an id held already keeps its first time)."""
        if event_id in self._seen:
            return
        if len(self._seen) >= self.max_ids:
            self._seen.popitem(last=False)
            self.forgotten_early += 1
        self._seen[event_id] = now

    def forget_old(self, now: float) -> None:
        """Forget the ids whose window has ended by ``now`` (none without a window)."""
        if self.window_s is None:
            return
        cutoff = now - self.window_s
        seen = self._seen
        while seen and next(iter(seen.values())) <= cutoff:
            seen.popitem(last=False)
