"""A replay's decisions as a ROS 2 recording: what ``ros2 bag play`` and Foxglove read.

:func:`record_ros2` writes one MCAP file in rosbag2's profile (``ros2``): for each strategy a
channel ``<action topic>/<strategy>`` of the map's action type (a ``std_msgs/msg/String`` with
the decision's JSON, the same bytes as a line of ``--decisions``, or the typed message filled
from the action), CDR-encoded, with the type's ``ros2msg`` schema and its RIHS01 hash as
``topic_type_hash``. Log times are the replay's own clock (nanoseconds from its start), each
decision when it was made. (The JSON channels of any replay are :mod:`._mcap_record`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from forethought.runtime import Ros2Map, Ros2TypeError, action_message

from ._records import StrategyRun

__all__ = ["record_ros2"]


def record_ros2(path: str | Path, runs: Mapping[str, StrategyRun], ros2_map: Ros2Map) -> int:
    """Write the decisions to ``path``; returns the number of messages written.

    A decision whose action does not fit a typed action message is written as the message of
    an empty action (zero fields) -- never in part; a String always fits.
    """
    from mcap.writer import Writer  # noqa: PLC0415 - forethought[ros2]

    types = ros2_map.types()
    actions = ros2_map.actions
    written = 0
    with Path(path).open("wb") as fh:
        writer: Any = Writer(fh)  # mcap leaves finish() untyped
        writer.start(profile="ros2", library="forethought")
        schema = writer.register_schema(
            actions.type, "ros2msg", types.msgdef(actions.type).encode()
        )
        metadata = {"topic_type_hash": types.rihs01(actions.type), "offered_qos_profiles": ""}
        for name, run in runs.items():
            channel = writer.register_channel(f"{actions.topic}/{name}", "cdr", schema, metadata)
            for seq, record in enumerate(run.records):
                decision = orjson.loads(orjson.dumps(record.as_json()))
                try:
                    message = action_message(actions, decision)
                    raw = types.encode(actions.type, message)
                except Ros2TypeError:
                    raw = types.encode(actions.type, {})
                t = int((record.at_ms + record.latency_ms) * 1e6)
                writer.add_message(channel, log_time=t, data=raw, publish_time=t, sequence=seq)
                written += 1
        writer.finish()
    return written
