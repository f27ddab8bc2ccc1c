"""A rosbag2 recording replayed as a trace, through a ROS 2 map.

A recording is a bag folder (``metadata.yaml`` beside its ``.mcap`` files) or one ``.mcap``
file, written by rosbag2 or any library that writes its profile (channels ``cdr``, schemas
``ros2msg``). Each mapped topic's messages are decoded with the recording's own schemas (the
standard Jazzy types, or the ``.msg`` text the recording carries for others) after checking the
type hash rosbag2 stored (``topic_type_hash``) against ours: a recording of another definition
(an older distribution's, say) is refused, not misread. Then, in log-time order:

* a message on an event topic is one event at its log time (relative to the first mapped
  message), with the state patches that came before it;
* a message on a state-only topic patches the state of the next event and decides nothing.

Live topics use the same map (:class:`~forethought.runtime.Ros2Bus`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forethought.policies import AgentSpec, ConfigError, InputError, Problem
from forethought.policies.internals import load_document
from forethought.runtime import (
    Ros2Map,
    Ros2TypeError,
    Ros2Types,
    check_ros2_map,
    is_ros2_map,
    load_ros2_map,
    map_message,
)

from ._trace_event import TraceEvent

__all__ = [
    "RecordedMessage",
    "check_recording_map",
    "read_ros2_recording",
    "recorded_types",
    "scenario_ros2_map",
    "trace_from_ros2",
]


@dataclass(frozen=True, slots=True)
class RecordedMessage:
    """One message of a recording, still in CDR."""

    topic: str
    type: str
    log_ns: int
    data: bytes


def _files(path: Path) -> list[Path]:
    """The recording's MCAP files: the file itself, or those the bag's metadata lists."""
    if path.is_file():
        return [path]
    meta = path / "metadata.yaml"
    if not meta.is_file():
        raise ConfigError("recording", str(path), "neither an .mcap file nor a bag folder")
    info = load_document(meta)
    bag = info.get("rosbag2_bagfile_information") if isinstance(info, dict) else None
    if not isinstance(bag, dict):
        raise ConfigError(str(meta), None, "no rosbag2_bagfile_information")
    storage = bag.get("storage_identifier")
    if storage != "mcap":
        raise ConfigError(
            f"{meta}: storage_identifier",
            storage,
            "only mcap storage is read (convert with: ros2 bag convert)",
        )
    if bag.get("compression_format"):
        raise ConfigError(f"{meta}: compression_format", bag["compression_format"], "not read")
    files = [path / str(f) for f in bag.get("relative_file_paths") or []]
    for f in files:
        if not f.is_file():
            raise ConfigError(f"{meta}: relative_file_paths", str(f), "no such file")
    return files


def recorded_types(path: str | Path, types: Ros2Types) -> dict[str, tuple[str, Ros2Types]]:
    """Topic -> (message type, the types that decode it) of a recording's CDR channels.

    A type ``types`` knows with the hash rosbag2 stored (``topic_type_hash``) decodes with
    ``types``; a type it does not know, or knows by another definition (another distribution's),
    decodes with the recording's own schema text -- which must hash to the stored hash.
    """
    from mcap.reader import make_reader  # noqa: PLC0415 - forethought[ros2]

    out: dict[str, tuple[str, Ros2Types]] = {}
    for file in _files(Path(path)):
        try:
            with file.open("rb") as fh:
                summary = make_reader(fh).get_summary()
        except Exception as exc:  # the mcap library raises several kinds on a bad file
            raise ConfigError("recording", str(file), f"not a readable MCAP file ({exc})") from None
        if summary is None:
            raise ConfigError("recording", str(file), "no summary (an unfinished file?)")
        for channel in summary.channels.values():
            schema = summary.schemas.get(channel.schema_id)
            if channel.message_encoding != "cdr" or schema is None:
                continue
            where = f"{file}: {channel.topic}"
            if schema.encoding != "ros2msg":
                raise ConfigError(where, schema.encoding, "only ros2msg schemas are read")
            recorded = channel.metadata.get("topic_type_hash", "")
            own = types
            if not types.has(schema.name) or recorded not in ("", types.rihs01(schema.name)):
                own = Ros2Types(standard=False)
                own.add_msg(schema.name, schema.data.decode())
            if recorded and own.rihs01(schema.name) != recorded:
                raise ConfigError(
                    where,
                    recorded,
                    f"the recorded hash of {schema.name} is not its schema's "
                    f"({own.rihs01(schema.name)}): the recording's definitions are inconsistent",
                )
            out[channel.topic] = (schema.name, own)
    return out


def read_ros2_recording(path: str | Path, topics: set[str]) -> Iterator[RecordedMessage]:
    """The messages on ``topics``, in log-time order (file by file, as rosbag2 splits them)."""
    from mcap.reader import make_reader  # noqa: PLC0415 - forethought[ros2]

    for file in _files(Path(path)):
        with file.open("rb") as fh:
            reader = make_reader(fh)
            for schema, channel, message in reader.iter_messages(
                topics=sorted(topics), log_time_order=True
            ):
                if channel.message_encoding != "cdr" or schema is None:
                    raise ConfigError(
                        f"{file}: {channel.topic}",
                        channel.message_encoding,
                        "a mapped topic must be ROS 2 CDR",
                    )
                yield RecordedMessage(channel.topic, schema.name, message.log_time, message.data)


def trace_from_ros2(path: str | Path, ros2_map: Ros2Map) -> list[TraceEvent]:
    """The recording's mapped messages as trace events (state-only topics patch the next one)."""
    found = recorded_types(path, ros2_map.types())
    missing = sorted(set(ros2_map.topics) - set(found))
    if missing:
        raise ConfigError(
            "map.topics", missing, f"not in the recording {path} (it has {sorted(found)})"
        )
    events: list[TraceEvent] = []
    pending: dict[str, Any] = {}
    t0: int | None = None
    counts: dict[str, int] = {}
    for msg in read_ros2_recording(path, set(ros2_map.topics)):
        i = counts[msg.topic] = counts.get(msg.topic, -1) + 1
        where = f"{path}: {msg.topic}[{i}]"
        try:
            decoded = found[msg.topic][1].decode(msg.type, msg.data)
        except Ros2TypeError as exc:
            raise InputError(where, f"<{len(msg.data)} bytes>", str(exc)) from None
        mapped = map_message(ros2_map.topics[msg.topic], decoded, where)
        t0 = msg.log_ns if t0 is None else t0
        pending.update(mapped.state)
        if mapped.type is None:
            continue
        events.append(
            TraceEvent(
                at_ms=(msg.log_ns - t0) / 1e6,
                type=mapped.type,
                params=mapped.params,
                deadline_ms=mapped.deadline_ms,
                state=dict(pending) or None,
            )
        )
        pending = {}
    if not events:
        raise ConfigError("map.topics", sorted(ros2_map.topics), f"no events in {path}")
    return events


def check_recording_map(scenario_path: str, block: Any, spec: AgentSpec) -> list[Problem]:
    """The problems of a scenario's ``mcap`` block when its map is a ROS 2 map (else none).

    The map against the spec and against the recording's own message types, every problem at
    once; a recording that cannot be read is one problem.
    """
    if not isinstance(block, Mapping) or not isinstance(block.get("map"), str):
        return []  # the scenario's own validation names a malformed block
    base = Path(scenario_path).parent
    map_path = base / block["map"]
    try:
        data = load_document(map_path)
    except ConfigError as exc:
        return [Problem("error", "mcap.map", str(map_path), exc.problem)]
    if not is_ros2_map(data):
        return []
    try:
        ros2_map = load_ros2_map(map_path, data)
    except ConfigError as exc:
        return [Problem("error", f"mcap.map: {exc.field}", exc.value, exc.problem)]
    recorded = None
    if isinstance(block.get("path"), str):
        try:
            recorded = recorded_types(base / block["path"], ros2_map.types())
        except ConfigError as exc:
            return [Problem("error", "mcap.path", exc.value, f"{exc.field}: {exc.problem}")]
    return check_ros2_map(ros2_map, spec, where=f"{map_path}", recorded_types=recorded)


def scenario_ros2_map(scenario_path: Path, mapping: Path | None) -> Ros2Map | None:
    """The ROS 2 map a replay uses: ``mapping`` (``--map``) or the scenario's ``mcap`` block's.

    None when the replay is not of a ROS 2 recording.
    """
    if mapping is None:
        data = load_document(scenario_path)
        block = data.get("mcap") if isinstance(data, Mapping) else None
        if not isinstance(block, Mapping) or not isinstance(block.get("map"), str):
            return None
        mapping = scenario_path.parent / block["map"]
    map_data = load_document(mapping)
    return load_ros2_map(mapping, map_data) if is_ros2_map(map_data) else None
