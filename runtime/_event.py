"""Events as they arrive (the wire payload) and as the executor sees them.

The wire payload is validated by pydantic at the boundary; inside, an :class:`Event` is a frozen
value with an absolute deadline on the runtime's clock (the event loop's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from forethought.policies import InvalidEvent
from forethought.policies.internals import first_problem

from ._age import AgeSource

__all__ = [
    "Arrival",
    "Event",
    "EventPayload",
    "ReplyTo",
    "parse_payload",
    "raw_id",
    "with_deadline",
]


class EventPayload(BaseModel):
    """``{"id", "type", "params", "deadline_ms" | "deadline_ns", "sent_at_ns"?, "state"?}``.

    ``deadline_ms`` is relative to when the event was sent (``sent_at_ns``, the sender's
    ``time.time_ns()``, or what the bus knows of it; see :mod:`._age`); ``deadline_ns`` is
    absolute wall-clock time. Neither: the event type's declared deadline, from the same start.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=256)
    type: str = Field(min_length=1, max_length=256)
    params: dict[str, Any] = Field(default_factory=dict)
    deadline_ms: float | None = Field(default=None, gt=0)
    deadline_ns: int | None = Field(default=None, gt=0)
    sent_at_ns: int | None = Field(default=None, gt=0)
    state: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_deadline(self) -> EventPayload:
        if self.deadline_ms is not None and self.deadline_ns is not None:
            raise ValueError("give deadline_ms or deadline_ns, not both")
        return self


@dataclass(frozen=True, slots=True)
class ReplyTo:
    """Where a request/response event wants its decision (MQTT 5 response topic)."""

    topic: str
    correlation: bytes | None = None


@dataclass(frozen=True, slots=True)
class Arrival:
    """When an event arrived: on the loop's clock, and that clock's offset to wall time.

    ``wall_offset_s`` is loop time minus wall time: an absolute wall-clock deadline plus the
    offset is the same deadline on the loop's clock.
    """

    at: float
    wall_offset_s: float

    @classmethod
    def now(cls, wall_ns: Callable[[], int] = time.time_ns) -> Arrival:
        """Now, on the running loop (the only place the runtime reads wall time)."""
        at = asyncio.get_running_loop().time()
        return cls(at, at - wall_ns() / 1e9)


@dataclass(frozen=True, slots=True)
class Event:
    """An event to decide.

    Args:
        id: unique per event; a repeated id gets the first decision again.
        type: the event type.
        params: raw parameters (snapped to the grid when mapped to a key).
        arrived_at: arrival time on the runtime's clock.
        deadline: absolute deadline on the same clock; None until :func:`with_deadline`
            resolves it at arrival, once (a sender's absolute ``deadline_ns`` is set here).
        deadline_ms: the relative deadline the sender gave, counted from when it was sent;
            None: the event type's.
        state: fields to set in the state just before deciding.
        reply: where to send the decision, besides the actions topic.
        sent_at: when the sender says it sent the event, on the runtime's clock (None: not
            known); later than ``arrived_at`` only by the senders' clock skew.
        age: what told the agent when the event was sent.
        expires_at: the latest the event can still be valid (an MQTT Message Expiry).
        wall_offset_s: the runtime's clock minus wall time, at arrival.
        default_only: answer with the declared default only (its age is unknown and
            ``events.no_age`` says so); never counted as met.

    """

    id: str
    type: str
    params: dict[str, Any]
    arrived_at: float
    deadline: float | None = None
    deadline_ms: float | None = None
    state: dict[str, Any] | None = None
    reply: ReplyTo | None = None
    sent_at: float | None = None
    age: AgeSource = AgeSource.NONE
    expires_at: float | None = None
    wall_offset_s: float = 0.0
    default_only: bool = False

    @property
    def counted_from(self) -> float:
        """What a relative deadline counts from: when sent (never after the arrival), if known."""
        if self.sent_at is None:
            return self.arrived_at
        return min(self.sent_at, self.arrived_at)

    def resolved(self, deadline: float) -> Event:
        """The same event with its absolute ``deadline`` (:func:`with_deadline` says which).

        Built field by field: ``dataclasses.replace`` looks the fields up on every call, and
        this runs once per event on the decision's path.
        """
        return Event(
            id=self.id,
            type=self.type,
            params=self.params,
            arrived_at=self.arrived_at,
            deadline=deadline,
            deadline_ms=self.deadline_ms,
            state=self.state,
            reply=self.reply,
            sent_at=self.sent_at,
            age=self.age,
            expires_at=self.expires_at,
            wall_offset_s=self.wall_offset_s,
            default_only=self.default_only,
        )

    @classmethod
    def from_payload(
        cls,
        payload: EventPayload,
        *,
        arrival: Arrival,
        reply: ReplyTo | None = None,
        sent_ns: int | None = None,
        expiry_s: int | None = None,
        in_process: bool = False,
    ) -> Event:
        """Build from a validated payload that arrived at ``arrival``.

        When the event was sent: the payload's ``sent_at_ns``, else the bus's ``sent_ns`` (a
        Zenoh timestamp), else the arrival (``in_process``: nothing lies between; otherwise
        the age is unknown). A relative ``deadline_ms`` is kept as given, for
        :func:`with_deadline` to count from then; an absolute ``deadline_ns`` is moved onto
        the loop's clock with the arrival's wall offset.
        ``expiry_s``: the MQTT Message Expiry Interval left on delivery.
        """
        arrived_at, offset = arrival.at, arrival.wall_offset_s
        sent_at, age = None, AgeSource.NONE
        if payload.sent_at_ns is not None:
            sent_at, age = payload.sent_at_ns / 1e9 + offset, AgeSource.SENT_AT_NS
        elif sent_ns is not None:
            sent_at, age = sent_ns / 1e9 + offset, AgeSource.ZENOH_TIMESTAMP
        elif in_process:
            sent_at, age = arrived_at, AgeSource.IN_PROCESS
        deadline = None
        if payload.deadline_ns is not None:
            deadline, age = payload.deadline_ns / 1e9 + offset, AgeSource.DEADLINE_NS
        return cls(
            id=payload.id,
            type=payload.type,
            params=dict(payload.params),
            arrived_at=arrived_at,
            state=payload.state,
            reply=reply,
            sent_at=sent_at,
            age=age,
            # Whole seconds, rounded down by the broker: up to one more may be left.
            expires_at=arrived_at + expiry_s + 1 if expiry_s is not None else None,
            wall_offset_s=offset,
            deadline=deadline,
            deadline_ms=payload.deadline_ms,
        )


def with_deadline(event: Event, type_ms: float) -> Event:
    """``event`` with its absolute deadline: the one place a relative deadline is resolved.

    An absolute deadline (the sender's ``deadline_ns``, or a replay's) stands. Otherwise the
    sender's ``deadline_ms``, else ``type_ms`` (the event type's), counted from when the event
    was sent if that is known, else from its arrival (:attr:`Event.counted_from`).
    """
    if event.deadline is not None:
        return event
    ms = event.deadline_ms if event.deadline_ms is not None else type_ms
    return event.resolved(event.counted_from + ms / 1e3)


def parse_payload(raw: bytes | str | dict[str, Any], *, max_bytes: int) -> EventPayload:
    """Validate a wire payload; raises InvalidEvent saying what is wrong with it."""
    if isinstance(raw, dict):
        data: Any = raw
    else:
        blob = raw.encode() if isinstance(raw, str) else raw
        if len(blob) > max_bytes:
            raise InvalidEvent("payload", f"<{len(blob)} bytes>", f"larger than {max_bytes} bytes")
        try:
            text = blob.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidEvent("payload", blob[:40], f"not UTF-8 ({exc.reason})") from None
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InvalidEvent("payload", text[:80], f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidEvent("payload", str(data)[:80], "must be a JSON object")
    try:
        return EventPayload.model_validate(data)
    except ValidationError as exc:
        where, value, problem = first_problem(exc)
        raise InvalidEvent(where or "payload", value, problem) from None


def raw_id(raw: bytes) -> str | None:
    """The ``id`` of a payload that was refused, if it has a readable one (for its sender)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    ident = data.get("id") if isinstance(data, dict) else None
    return ident[:256] if isinstance(ident, str) and ident else None
