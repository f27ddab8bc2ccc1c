"""MCAP in the simulator: a robot's recording replayed as a trace.

**Recordings as traces.** A mapping file says which channel carries the events and which
fields of each message become the event's type, parameters, state and deadline::

    topic: /robot/perception
    type: kind                      # a field path ("a.b.c"), or "=obstacle" for a constant
    rename: {person: person_near}   # optional: message values -> declared event types
    params: {side: where.side, distance_m: where.range_m}
    state: {battery: battery}       # optional: fields patched into the state first
    deadline_ms: 500                # a number, or a field path

Each message on the topic becomes one event at its log time (relative to the first one). JSON
channels are decoded; any other encoding (ROS 2's CDR, say) is refused with an error naming the
channel and the encoding. A scenario names a recording as its trace with
``mcap: {path: run.mcap, map: run.map.yaml}`` (paths relative to the scenario file).

The other way, a replay written as a recording for Foxglove, is :mod:`._mcap_record`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from forethought.policies import ConfigError, InputError
from forethought.policies.internals import first_problem, load_document
from forethought.runtime.internals import read_mcap_json

from ._trace_event import TraceEvent

__all__ = ["McapMapping", "McapTrace", "load_mapping", "trace_from_mcap"]


class McapMapping(BaseModel):
    """Which channel holds events and which fields make one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = Field(min_length=1)
    type: str = Field(min_length=1)
    rename: dict[str, str] = Field(default_factory=dict)
    params: dict[str, str] = Field(default_factory=dict)
    state: dict[str, str] = Field(default_factory=dict)
    deadline_ms: float | str | None = None


class McapTrace(BaseModel):
    """A scenario's ``mcap`` block: the recording and its mapping file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    map: str


def load_mapping(path: str | Path) -> McapMapping:
    """Read a mapping file; errors name the file and the field."""
    data = load_document(path)
    try:
        return McapMapping.model_validate(data)
    except ValidationError as exc:
        where, value, problem = first_problem(exc)
        raise ConfigError(f"{path}: {where or 'mapping'}", value, problem) from None


def _field(message: Mapping[str, Any], dotted: str, where: str) -> Any:
    value: Any = message
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise InputError(where, dotted, "the message has no such field")
        value = value[part]
    return value


def trace_from_mcap(path: str | Path, mapping: McapMapping) -> list[TraceEvent]:
    """The mapped channel's messages as trace events, in log-time order."""
    seen_topics: set[str] = set()
    messages = []
    for msg in read_mcap_json(path):
        seen_topics.add(msg.topic)
        if msg.topic != mapping.topic:
            continue
        if msg.encoding != "json":
            raise ConfigError(
                "mcap",
                f"{path}: channel {msg.topic}",
                f"encoding {msg.encoding!r} cannot be decoded here (JSON only; for ROS 2 CDR "
                "a rosbag2 recording takes a ROS 2 map with topics: see docs/guides/ros2.md)",
            )
        messages.append(msg)
    if not messages:
        raise ConfigError(
            "mcap",
            f"{path}: channel {mapping.topic}",
            f"no messages (channels: {sorted(seen_topics)})",
        )
    messages.sort(key=lambda m: m.log_ns)
    t0 = messages[0].log_ns
    out = []
    for i, msg in enumerate(messages):
        where = f"{path}: {mapping.topic}[{i}]"
        data = msg.json()
        if not isinstance(data, Mapping):
            raise InputError(where, type(data).__name__, "a message must be a JSON object")
        if mapping.type.startswith("="):
            kind = mapping.type[1:]
        else:
            kind = str(_field(data, mapping.type, where))
        kind = mapping.rename.get(kind, kind)
        params = {name: _field(data, f, where) for name, f in mapping.params.items()}
        state = {name: _field(data, f, where) for name, f in mapping.state.items()}
        deadline = mapping.deadline_ms
        if isinstance(deadline, str):
            deadline = float(_field(data, deadline, where))
        out.append(
            TraceEvent(
                at_ms=(msg.log_ns - t0) / 1e6,
                type=kind,
                params=params,
                deadline_ms=deadline,
                state=state or None,
            )
        )
    return out
