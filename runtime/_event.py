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

from forethought.policies import InvalidEvent, first_problem

__all__ = ["Arrival", "Event", "EventPayload", "ReplyTo", "parse_payload"]


class EventPayload(BaseModel):
    """``{"id", "type", "params", "deadline_ms" | "deadline_ns", "state"?}``.

    ``deadline_ms`` is relative to arrival; ``deadline_ns`` is absolute wall-clock time
    (``time.time_ns()`` of the sender). Neither: the event type's declared deadline applies.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=256)
    type: str = Field(min_length=1, max_length=256)
    params: dict[str, Any] = Field(default_factory=dict)
    deadline_ms: float | None = Field(default=None, gt=0)
    deadline_ns: int | None = Field(default=None, gt=0)
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
        deadline: absolute deadline on the same clock; None until the agent resolves it at
            arrival (arrival + the type's ``deadline_ms``), once.
        state: fields to set in the state just before deciding.
        reply: where to send the decision, besides the actions topic.

    """

    id: str
    type: str
    params: dict[str, Any]
    arrived_at: float
    deadline: float | None = None
    state: dict[str, Any] | None = None
    reply: ReplyTo | None = None

    @classmethod
    def from_payload(
        cls, payload: EventPayload, *, arrival: Arrival, reply: ReplyTo | None = None
    ) -> Event:
        """Build from a validated payload that arrived at ``arrival``.

        A relative ``deadline_ms`` counts from the arrival; an absolute ``deadline_ns`` (the
        sender's wall clock) is moved onto the loop's clock with the arrival's wall offset.
        """
        arrived_at = arrival.at
        deadline = None
        if payload.deadline_ms is not None:
            deadline = arrived_at + payload.deadline_ms / 1e3
        elif payload.deadline_ns is not None:
            deadline = payload.deadline_ns / 1e9 + arrival.wall_offset_s
        return cls(
            id=payload.id,
            type=payload.type,
            params=dict(payload.params),
            arrived_at=arrived_at,
            deadline=deadline,
            state=payload.state,
            reply=reply,
        )


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
