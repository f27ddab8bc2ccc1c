"""How old an event is: what each way of arriving says about when it was sent.

An event's deadline counts from when it was *sent*, not from when it reached the agent: time
spent in a socket, in a broker's queue or waiting for an agent to restart is part of it. What
says when an event was sent, strongest first:

* ``deadline_ns`` in the payload: the deadline itself, on the sender's wall clock;
* ``sent_at_ns`` in the payload: the sender's wall clock when it sent the event;
* a Zenoh sample's timestamp (the publishing session's hybrid logical clock), where the
  publisher has timestamping on (:func:`~forethought.runtime.zenoh_config` turns it on);
* in process: the event is sent when it is handed over (no wire, no queue in between).

MQTT 5's Message Expiry Interval is whole seconds, lowered by the broker by the time the
message waited: it bounds the broker's queue (an expired message is never delivered) and caps
the deadline at the remaining interval plus the one second it is rounded by, but it cannot
place a sub-second deadline. An event with nothing else is of unknown age
(``events.no_age`` decides what happens to it; see :mod:`._freshness`).

Senders stamp with :func:`stamp_event` and :func:`expiry_interval_s`. Wall clocks of senders and
agent are assumed synchronised (NTP, PTP); :mod:`._freshness` bounds how far ahead a sender's
clock may be.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable
from typing import Any

__all__ = ["AgeSource", "expiry_interval_s", "stamp_event", "zenoh_sent_ns"]


class AgeSource(enum.Enum):
    """What told the agent when an event was sent."""

    DEADLINE_NS = "deadline_ns"
    SENT_AT_NS = "sent_at_ns"
    ZENOH_TIMESTAMP = "zenoh_timestamp"
    IN_PROCESS = "in_process"
    NONE = "none"
    """Nothing: the event may have waited any time before it arrived."""


def stamp_event(body: dict[str, Any], wall_ns: Callable[[], int] = time.time_ns) -> dict[str, Any]:
    """``body`` with ``sent_at_ns`` set to the wall clock now (the last thing before sending)."""
    return {**body, "sent_at_ns": wall_ns()}


def expiry_interval_s(deadline_ms: float) -> int:
    """The MQTT 5 Message Expiry Interval for an event with this relative deadline.

    Whole seconds, rounded up (never 0, which MQTT reads as "no expiry"): the broker drops the
    event once it has waited that long, so a backlog never holds it for much past its deadline.
    """
    return max(1, math.ceil(deadline_ms / 1e3))


def zenoh_sent_ns(timestamp: Any) -> int | None:
    """A Zenoh sample's timestamp as wall-clock nanoseconds (None: the sample has none).

    Zenoh's timestamps are NTP64 times since the UNIX epoch from the publisher's hybrid
    logical clock, which follows its wall clock.
    """
    if timestamp is None:
        return None
    return int(timestamp.get_time_as_ntp64().as_nanos())
