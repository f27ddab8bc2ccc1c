r"""One map for ROS 2 recordings and live topics: which messages are events, what goes back.

::

    topics:
      /front/range:                  # each message is an event
        msg_type: sensor_msgs/msg/Range   # needed live (the key names it); a recording knows it
        event: obstacle              # a literal event type, or `type: <field path>` (+ rename)
        params: {distance_m: range}  # field paths into the decoded message: a.b, a[0]
      /battery:                      # a state-only topic: patches the state, decides nothing
        msg_type: sensor_msgs/msg/BatteryState
        state: {battery: percentage}
    actions:
      topic: /forethought/action     # default: std_msgs/msg/String carrying the action's JSON
      # type: geometry_msgs/msg/Twist
      # fields: {linear.x: speed, angular.z: turn}   # message field <- action field
    msg:                             # custom types: name -> .msg text
      my_pkg/msg/Alarm: "string kind\\nfloat32 level"

A message with a ``header.stamp`` says when it was made (the event's age counts from it);
otherwise it is of unknown age live (the receive time) and at its log time in a recording.
:func:`check_ros2_map` finds every problem of a map against a spec in one pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from forethought.policies import AgentSpec, ConfigError, InputError, Problem
from forethought.policies.internals import did_you_mean, first_problem, load_document

from ._ros2_types import FieldPath, Ros2TypeError, Ros2Types, parse_path

__all__ = [
    "ActionMap",
    "MappedMessage",
    "Ros2Map",
    "TopicMap",
    "action_message",
    "check_ros2_map",
    "is_ros2_map",
    "load_ros2_map",
    "map_message",
]

STRING_TYPE = "std_msgs/msg/String"


class TopicMap(BaseModel):
    """One subscribed topic: an event per message, or (``state`` alone) a state patch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    msg_type: str | None = None
    event: str | None = Field(default=None, min_length=1)
    type: str | None = Field(default=None, min_length=1)
    rename: dict[str, str] = Field(default_factory=dict)
    params: dict[str, str] = Field(default_factory=dict)
    state: dict[str, str] = Field(default_factory=dict)
    deadline_ms: float | str | None = None

    @model_validator(mode="after")
    def _event_or_state(self) -> TopicMap:
        if self.event is not None and self.type is not None:
            raise ValueError("give event (a literal type) or type (a field path), not both")
        if self.event is None and self.type is None:
            if not self.state:
                raise ValueError("name the event (event: T or type: field) or a state patch")
            if self.params or self.rename or self.deadline_ms is not None:
                raise ValueError("a state-only topic (no event/type) takes only state")
        for path in (self.type, *self.params.values(), *self.state.values()):
            if path is not None:
                parse_path(path)
        return self

    @property
    def state_only(self) -> bool:
        """Whether messages only patch the state."""
        return self.event is None and self.type is None


class ActionMap(BaseModel):
    """Where decisions go: the action's JSON in a String, or a typed message filled from it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str = Field(default="/forethought/action", min_length=2)
    type: str = STRING_TYPE
    fields: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fields_for_typed(self) -> ActionMap:
        if self.type != STRING_TYPE and not self.fields:
            raise ValueError(f"a {self.type} action needs fields: {{message.field: action_field}}")
        if self.type == STRING_TYPE and self.fields:
            raise ValueError("a String action carries the whole JSON: drop fields or give type")
        for path in self.fields:
            parse_path(path)
        return self


class Ros2Map(BaseModel):
    """A map file: subscribed topics, the action topic, custom message definitions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topics: dict[str, TopicMap] = Field(min_length=1)
    actions: ActionMap = Field(default_factory=ActionMap)
    msg: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _topic_names(self) -> Ros2Map:
        for name in (*self.topics, self.actions.topic):
            if not name.startswith("/") or "//" in name or name.endswith("/") or " " in name:
                raise ValueError(f"{name!r}: a ROS 2 topic looks like /front/range")
        if self.actions.topic in self.topics:
            raise ValueError(f"{self.actions.topic}: the action topic is also subscribed")
        return self

    def types(self) -> Ros2Types:
        """The standard types and this map's custom ones."""
        return Ros2Types(self.msg)


def is_ros2_map(data: Any) -> bool:
    """Whether a loaded mapping document is a ROS 2 map (it has ``topics``)."""
    return isinstance(data, Mapping) and "topics" in data


def load_ros2_map(path: str | Path, data: Any = None) -> Ros2Map:
    """Read a map file; errors name the file and the field."""
    if data is None:
        data = load_document(path)
    try:
        return Ros2Map.model_validate(data)
    except ValidationError as exc:
        where, value, problem = first_problem(exc)
        raise ConfigError(f"{path}: {where or 'map'}", value, problem) from None


@dataclass(frozen=True, slots=True)
class MappedMessage:
    """What one message says: an event (``type`` set) or only a state patch."""

    type: str | None
    params: dict[str, Any]
    state: dict[str, Any]
    deadline_ms: float | None
    stamp_ns: int | None
    """``header.stamp`` in nanoseconds since the epoch (None: no header, or a zero stamp)."""


def _get(value: Any, path: FieldPath, text: str, where: str) -> Any:
    for part in path:
        if isinstance(part, int):
            if not isinstance(value, list) or part >= len(value):
                raise InputError(where, text, f"no item [{part}] in the message")
        elif not isinstance(value, Mapping) or part not in value:
            raise InputError(where, text, "the message has no such field")
        value = value[part]
    return value


def map_message(topic: TopicMap, message: Mapping[str, Any], where: str) -> MappedMessage:
    """The event (or state patch) a decoded message makes; InputError names a missing field."""

    def get(text: str) -> Any:
        return _get(message, parse_path(text), text, where)

    state = {name: get(path) for name, path in topic.state.items()}
    stamp = _stamp_ns(message)
    if topic.state_only:
        return MappedMessage(None, {}, state, None, stamp)
    kind = topic.event if topic.event is not None else str(get(topic.type or ""))
    kind = topic.rename.get(kind, kind)
    params = {name: get(path) for name, path in topic.params.items()}
    deadline = topic.deadline_ms
    if isinstance(deadline, str):
        raw = get(deadline)
        try:
            deadline = float(raw)
        except (TypeError, ValueError):
            raise InputError(
                where, raw, f"{topic.deadline_ms}: a deadline in ms is a number"
            ) from None
    return MappedMessage(kind, params, state, deadline, stamp)


def _stamp_ns(message: Mapping[str, Any]) -> int | None:
    header = message.get("header")
    if not isinstance(header, Mapping):
        return None
    stamp = header.get("stamp")
    if not isinstance(stamp, Mapping):
        return None
    sec, nanosec = stamp.get("sec"), stamp.get("nanosec")
    if not isinstance(sec, int) or not isinstance(nanosec, int):
        return None
    ns = sec * 1_000_000_000 + nanosec
    return ns if ns > 0 else None


def action_message(actions: ActionMap, decision: Mapping[str, Any]) -> dict[str, Any]:
    """The message value that carries a decision (``{"action": {...}, ...}``).

    A String carries the decision's JSON (keys sorted: the action, its tier, latency, deadline,
    ``met``); a typed message gets each mapped field from the action. Ros2TypeError when a mapped
    field is missing: nothing is sent in part.
    """
    if actions.type == STRING_TYPE:
        return {"data": orjson.dumps(decision, option=orjson.OPT_SORT_KEYS).decode()}
    action = decision.get("action")
    if not isinstance(action, Mapping):
        raise Ros2TypeError(f"the decision has no action object ({action!r:.60})")
    out: dict[str, Any] = {}
    for target, source in actions.fields.items():
        try:
            value = _get(action, parse_path(source), source, "action")
        except InputError:
            raise Ros2TypeError(f"the action has no {source!r} for {target}") from None
        node = out
        parts = parse_path(target)
        for part in parts[:-1]:
            node = node.setdefault(str(part), {})
        node[str(parts[-1])] = value
    return out


def check_ros2_map(
    ros2_map: Ros2Map,
    spec: AgentSpec,
    *,
    where: str = "map",
    recorded_types: Mapping[str, tuple[str, Ros2Types]] | None = None,
) -> list[Problem]:
    """Every problem of ``ros2_map`` against ``spec``, in one pass.

    Event types and parameters not declared, state fields the state lacks, message types not
    known, field paths the message types do not have, action fields the schema lacks.
    ``recorded_types``: topic -> message type and the types that decode it, as a recording
    says (else ``msg_type``, among the map's types).
    """
    try:
        types = ros2_map.types()
    except ConfigError as exc:
        return [Problem("error", f"{where}.msg", exc.value, exc.problem)]
    problems: list[Problem] = []
    for name, topic in ros2_map.topics.items():
        at = f"{where}.topics.{name}"
        recorded, topic_types = (recorded_types or {}).get(name, (None, types))
        msg_type, found = _topic_type(topic, recorded, topic_types, at)
        problems += found
        problems += _check_paths(topic, topic_types, msg_type, at)
        problems += _check_names(topic, spec, at)
    problems += _check_actions(ros2_map.actions, types, spec, f"{where}.actions")
    return problems


_KNOWN_FIX = "a ROS 2 Jazzy type, or give its .msg text under msg"


def _topic_type(
    topic: TopicMap, recorded: str | None, types: Ros2Types, at: str
) -> tuple[str | None, list[Problem]]:
    """The topic's message type (None: unknown) and the problems found on the way."""
    msg_type = recorded or topic.msg_type
    if msg_type is None:
        fix = "write msg_type: sensor_msgs/msg/Range (or replay a recording that has it)"
        return None, [Problem("error", f"{at}.msg_type", None, "the message type is unknown", fix)]
    if not types.has(msg_type):
        return None, [
            Problem("error", f"{at}.msg_type", msg_type, "not a known message type", _KNOWN_FIX)
        ]
    if recorded is not None and topic.msg_type not in (None, recorded):
        why = f"the recording has {recorded} on this topic"
        return msg_type, [
            Problem("error", f"{at}.msg_type", topic.msg_type, why, f"write {recorded}")
        ]
    return msg_type, []


def _check_paths(topic: TopicMap, types: Ros2Types, msg_type: str | None, at: str) -> list[Problem]:
    if msg_type is None:
        return []
    paths = {f"{at}.params.{k}": v for k, v in topic.params.items()}
    paths |= {f"{at}.state.{k}": v for k, v in topic.state.items()}
    if topic.type is not None:
        paths[f"{at}.type"] = topic.type
    if isinstance(topic.deadline_ms, str):
        paths[f"{at}.deadline_ms"] = topic.deadline_ms
    out = []
    for path_where, path in paths.items():
        why = types.check_path(msg_type, path)
        if why is not None:
            out.append(Problem("error", path_where, path, why, f"a field of {msg_type}"))
    return out


def _check_names(topic: TopicMap, spec: AgentSpec, at: str) -> list[Problem]:
    space = spec.event_space()
    declared = list(space.types)
    state_fields = list(spec.initial_state().data)
    out = [
        Problem(
            "error",
            f"{at}.state.{field}",
            field,
            "not a field of the state",
            did_you_mean(field, state_fields),
        )
        for field in topic.state
        if field not in state_fields
    ]
    out += [
        Problem(
            "error",
            f"{at}.rename.{raw}",
            renamed,
            "not a declared event type",
            did_you_mean(renamed, declared),
        )
        for raw, renamed in topic.rename.items()
        if renamed not in space.types
    ]
    if topic.event is None:
        return out
    etype = space.types.get(topic.rename.get(topic.event, topic.event))
    if etype is None:
        why = "not a declared event type"
        return [
            *out,
            Problem("error", f"{at}.event", topic.event, why, did_you_mean(topic.event, declared)),
        ]
    out += [
        Problem(
            "error",
            f"{at}.params.{param}",
            param,
            f"not a parameter of {etype.type}",
            did_you_mean(param, list(etype.params)),
        )
        for param in topic.params
        if param not in etype.params
    ]
    return out


def _check_actions(
    actions: ActionMap, types: Ros2Types, spec: AgentSpec, where: str
) -> list[Problem]:
    if not types.has(actions.type):
        return [
            Problem(
                "error",
                f"{where}.type",
                actions.type,
                "not a known message type",
                "a ROS 2 Jazzy type, or give its .msg text under msg",
            )
        ]
    problems = []
    schema_fields = list(spec.action.get("properties", {}))
    for target, source in actions.fields.items():
        why = types.check_path(actions.type, target)
        if why is not None:
            problems.append(Problem("error", f"{where}.fields.{target}", target, why))
        head = str(parse_path(source)[0])
        if schema_fields and head not in schema_fields:
            problems.append(
                Problem(
                    "error",
                    f"{where}.fields.{target}",
                    source,
                    "not a field of the action schema",
                    did_you_mean(head, schema_fields),
                )
            )
    return problems
