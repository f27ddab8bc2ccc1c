"""Whether an event is still worth deciding: its age, its deadline, and the policy for neither.

Applied when the serve loop takes an event (after its deadline is resolved, before any tier
runs), and again, by :meth:`Freshness.at_send`, at the last moment before its decision is sent:
a decision made or about to go out after the deadline is dropped, reported and counted, never
sent late (under CPU starvation the tiers, the default included, can finish past it). An event
is refused -- reported on the bus's errors channel, never decided,
so no action for it reaches an actuator -- when:

* its deadline passed: ``expired: waited N ms before arrival, ...`` (the deadline counts from
  when it was sent, see :mod:`._age`);
* its sender's clock is ahead of the agent's by more than ``events.max_future_ms``: a clock
  that far off makes every age it gives wrong;
* nothing says when it was sent and ``events.no_age`` is ``refuse`` (the default).

With ``no_age = "default_only"`` such an event gets the spec's safe default, never reported as
on time; with ``trust`` its deadline counts from its arrival (for a bench on one host). Every
deadline is capped at ``events.max_age_s`` after sending (or arrival) and at an MQTT Message
Expiry. See docs/guides/deadlines.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ._age import AgeSource
from ._event import Event

__all__ = ["EventsConfig", "Freshness", "FreshnessStats", "Verdict"]


class EventsConfig(BaseModel):
    """How the agent treats an event's age (the ``[events]`` table)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_age_s: float = Field(default=60.0, gt=0)
    """No event is decided later than this after it was sent (or arrived, if that is unknown),
    whatever its deadline says: a far ``deadline_ns`` or a long ``deadline_ms`` cannot keep an
    old event alive."""
    no_age: Literal["refuse", "default_only", "trust"] = "refuse"
    """What to do with an event that says nothing of when it was sent (no ``sent_at_ns``, no
    ``deadline_ns``, no Zenoh timestamp): ``refuse`` it on the errors channel (the default: an
    action computed for a world that may be gone never goes out, and the sender is told how
    to stamp its events), answer it with the declared safe default only (``default_only``,
    never counted as met), or ``trust`` its arrival as its sending (a bench, one host)."""
    max_future_ms: float = Field(default=100.0, ge=0)
    """How far ahead of the agent's clock a sender's clock may be. Within it, a deadline
    counts from the arrival (never later); beyond it, the event is refused. 100 ms: NTP keeps
    hosts on a LAN within a few ms, PTP within microseconds; a clock 100 ms off is broken."""


@dataclass(slots=True)
class FreshnessStats:
    """Events refused or limited for their age (the health report's counters)."""

    expired: int = 0
    """Refused: their deadline passed before they were decided."""
    superseded: int = 0
    """Refused: a newer event of a ``latest_only`` type was waiting."""
    no_age: int = 0
    """Refused: nothing said when they were sent (``no_age = "refuse"``)."""
    default_only: int = 0
    """Answered with the default only: nothing said when they were sent."""
    from_the_future: int = 0
    """Refused: sent later than the agent's clock says it is, by more than the bound."""
    late: int = 0
    """Decided, but not sent: the deadline had passed when the decision was to go out."""

    def as_dict(self) -> dict[str, int]:
        """Plain data."""
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The event to decide (deadline capped, maybe default-only), or why it is refused."""

    event: Event
    refusal: str | None = None


class Freshness:
    """Judges events by age with one :class:`EventsConfig`; counts what it refuses."""

    def __init__(self, config: EventsConfig) -> None:
        self.config = config
        self.stats = FreshnessStats()

    def judge(self, event: Event, now: float) -> Verdict:
        """Whether ``event`` (its deadline resolved) may be decided at ``now`` (the loop's)."""
        cfg = self.config
        assert event.deadline is not None
        if event.sent_at is not None and event.sent_at - event.arrived_at > cfg.max_future_ms / 1e3:
            self.stats.from_the_future += 1
            ahead = (event.sent_at - event.arrived_at) * 1e3
            return Verdict(
                event,
                f"from the future: sent {ahead:.0f} ms after it arrived by the agent's clock "
                f"(events.max_future_ms = {cfg.max_future_ms:g}): synchronise the clocks "
                "(NTP, PTP)",
            )
        deadline = min(event.deadline, event.counted_from + cfg.max_age_s)
        if event.expires_at is not None:
            deadline = min(deadline, event.expires_at)
        event = replace(event, deadline=deadline)
        if now > deadline:
            self.stats.expired += 1
            return Verdict(event, _expired(event, now))
        if event.age is AgeSource.NONE:
            if cfg.no_age == "refuse":
                self.stats.no_age += 1
                return Verdict(
                    event,
                    "no age: nothing says when it was sent; give sent_at_ns (the sender's "
                    'time.time_ns()) or deadline_ns, or set events.no_age = "trust" for a bench',
                )
            if cfg.no_age == "default_only":
                self.stats.default_only += 1
                return Verdict(replace(event, default_only=True))
        return Verdict(event)

    def superseded(self, event: Event, *, by: Event) -> str:
        """Count ``event`` refused for ``by``, a newer one of its ``latest_only`` type; why."""
        self.stats.superseded += 1
        return f"superseded: a newer {event.type!r} event ({by.id}) is decided instead"

    def at_send(self, event: Event, decided_at: float, now: float) -> str | None:
        """Why a decision made at ``decided_at`` for ``event`` must not be sent at ``now``.

        None while ``now`` is within the event's deadline (the one :meth:`judge` capped).
        Otherwise the reason to report instead (``late: ...``), counted: an action is never
        sent after its deadline, whichever tier made it.
        """
        deadline = event.deadline
        if deadline is None or now <= deadline:
            return None
        self.stats.late += 1
        took = (decided_at - event.arrived_at) * 1e3
        past = (now - deadline) * 1e3
        return (
            f"late: not sent, {past:.1f} ms past its deadline at sending (decided {took:.1f} ms "
            f"after arrival, {(now - decided_at) * 1e3:.1f} ms before sending); the machine "
            "may be overloaded"
        )


def _expired(event: Event, now: float) -> str:
    """``expired: waited N ms before arrival, ...``: where the time went."""
    assert event.deadline is not None
    queued = (now - event.arrived_at) * 1e3
    if event.age is AgeSource.DEADLINE_NS:
        past = (event.arrived_at - event.deadline) * 1e3
        if past > 0:
            return f"expired: arrived {past:.0f} ms after its deadline_ns"
        return f"expired: its deadline_ns passed while it waited {queued:.0f} ms in the agent"
    if event.age is AgeSource.NONE:
        return (
            f"expired: waited {queued:.0f} ms in the agent, past its deadline "
            f"{(event.deadline - event.arrived_at) * 1e3:.0f} ms after arrival "
            "(its age before arrival is unknown)"
        )
    before = (event.arrived_at - event.counted_from) * 1e3
    budget = (event.deadline - event.counted_from) * 1e3
    return (
        f"expired: waited {before:.0f} ms before arrival and {queued:.0f} ms in the agent; "
        f"its deadline was {budget:.0f} ms after it was sent"
    )
