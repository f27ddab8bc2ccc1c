"""``--record`` after a ROS 2 replay: a ROS 2 recording, read back by two other libraries."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

pytest.importorskip("rosbags")
mcap_ros2 = pytest.importorskip("mcap_ros2.decoder")

from mcap.reader import make_reader  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from forethought.runtime import Ros2Map  # noqa: E402
from forethought.sims import Record, StrategyRun  # noqa: E402
from forethought.sims._ros2_record import record_ros2  # noqa: E402

TOPICS = {"/front/range": {"event": "obstacle", "params": {"distance_m": "range"}}}


def _runs() -> dict[str, StrategyRun]:
    def rec(strategy: str, i: int, action: dict[str, object]) -> Record:
        return Record(
            strategy=strategy, index=i, type="obstacle", params={"distance_m": 0.5 * i},
            at_ms=100.0 * i, deadline_ms=300.0, latency_ms=0.25, tier="tree", action=action,
            met=True,
        )  # fmt: skip

    return {
        "tree": StrategyRun("tree", [rec("tree", i, {"speed": 0.1 * i}) for i in range(4)]),
        "live": StrategyRun("live", [rec("live", 0, {"speed": "fast"}), rec("live", 1, {})]),
    }


def _read(path: Path) -> list[tuple[str, int, object, object, dict[str, str], str]]:
    """(topic, log time, mcap-ros2-support's message, rosbags' message, metadata, schema)."""
    store = get_typestore(Stores.ROS2_JAZZY)
    factory = mcap_ros2.DecoderFactory()
    out = []
    with path.open("rb") as fh:
        reader = make_reader(fh)
        assert reader.get_header().profile == "ros2"
        for schema, channel, message in reader.iter_messages(log_time_order=True):
            assert schema is not None
            assert schema.encoding == "ros2msg"
            assert channel.message_encoding == "cdr"
            decoder = factory.decoder_for("cdr", schema)
            assert decoder is not None
            theirs = decoder(message.data)
            rosbags_msg = store.deserialize_cdr(message.data, schema.name)
            out.append(
                (channel.topic, message.log_time, theirs, rosbags_msg, dict(channel.metadata),
                 schema.name)
            )  # fmt: skip
    return out


def test_decisions_as_strings_read_back_by_both_libraries(tmp_path: Path) -> None:
    path = tmp_path / "decisions.mcap"
    runs = _runs()
    assert record_ros2(path, runs, Ros2Map.model_validate({"topics": TOPICS})) == 6
    got = _read(path)
    store = get_typestore(Stores.ROS2_JAZZY)
    assert {m[0] for m in got} == {"/forethought/action/tree", "/forethought/action/live"}
    for _topic, _, theirs, ours_rosbags, metadata, schema in got:
        assert schema == "std_msgs/msg/String"
        assert theirs.data == ours_rosbags.data
        assert metadata["topic_type_hash"] == store.hash_rihs01("std_msgs/msg/String")
    tree = [m for m in got if m[0].endswith("/tree")]
    lines = [orjson.dumps(r.as_json(), option=orjson.OPT_SORT_KEYS) for r in runs["tree"].records]
    assert [m[2].data.encode() for m in tree] == lines  # the bytes --decisions writes
    assert [m[1] for m in tree] == [int((100.0 * i + 0.25) * 1e6) for i in range(4)]


def test_typed_actions_read_back_and_one_that_does_not_fit_is_never_partial(
    tmp_path: Path,
) -> None:
    path = tmp_path / "twist.mcap"
    ros2_map = Ros2Map.model_validate(
        {
            "topics": TOPICS,
            "actions": {
                "topic": "/cmd_vel",
                "type": "geometry_msgs/msg/Twist",
                "fields": {"linear.x": "speed"},
            },
        }
    )
    record_ros2(path, _runs(), ros2_map)
    got = _read(path)
    store = get_typestore(Stores.ROS2_JAZZY)
    tree = [m for m in got if m[0] == "/cmd_vel/tree"]
    assert [round(m[2].linear.x, 6) for m in tree] == [0.0, 0.1, 0.2, 0.3]
    assert [round(m[3].linear.x, 6) for m in tree] == [0.0, 0.1, 0.2, 0.3]
    assert tree[0][4]["topic_type_hash"] == store.hash_rihs01("geometry_msgs/msg/Twist")
    live = [m for m in got if m[0] == "/cmd_vel/live"]
    assert [(m[2].linear.x, m[2].angular.z) for m in live] == [(0.0, 0.0), (0.0, 0.0)]
