"""ROS 2 messages without ROS: CDR both ways, RIHS01 hashes against rosbag2's, field paths.

The golden hashes are what ROS 2 itself stored: rosbag2 writes each topic's
``topic_type_hash`` into its recordings (tests/resources/rosbag2, vendored from ros2/rosbag2),
and rmw_zenoh's design document names String's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("rosbags")
mcap_ros2 = pytest.importorskip("mcap_ros2.decoder")

from mcap.reader import make_reader  # noqa: E402

from forethought.policies import ConfigError  # noqa: E402
from forethought.runtime import Ros2TypeError, Ros2Types  # noqa: E402
from forethought.runtime.transports._ros2_types import dds_type_name  # noqa: E402

BAGS = Path(__file__).resolve().parent.parent / "resources" / "rosbag2"


@pytest.fixture(scope="module")
def types() -> Ros2Types:
    return Ros2Types()


def test_hashes_of_standard_types(types: Ros2Types) -> None:
    # rmw_zenoh's design document keys std_msgs/msg/String with this hash
    assert types.rihs01("std_msgs/msg/String") == (
        "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18"
    )
    assert types.rihs01("geometry_msgs/msg/Twist").startswith("RIHS01_9c45bf16fe0983d8")


def test_hashes_equal_the_topic_type_hash_rosbag2_stored() -> None:
    """Each channel's schema text, read as .msg, hashes to what rosbag2 recorded (3 of 3)."""
    with (BAGS / "bags" / "only_topics.mcap").open("rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    checked = 0
    for channel in summary.channels.values():
        schema = summary.schemas[channel.schema_id]
        own = Ros2Types(standard=False)  # only the recording's own definitions
        own.add_msg(schema.name, schema.data.decode())
        assert own.rihs01(schema.name) == channel.metadata["topic_type_hash"], channel.topic
        if channel.topic != "/events/write_split":  # Jazzy's WriteSplitEvent is older
            assert Ros2Types().rihs01(schema.name) == channel.metadata["topic_type_hash"]
        checked += 1
    assert checked == 3


def test_char_hashes_as_uint8_as_ros_does() -> None:
    """ServiceEventInfo's ``char[16] client_gid``: ROS hashes char as uint8, rosbags as char.

    The golden value is the hash rosbag2 stored for /add_two_ints/_service_event.
    """
    with (BAGS / "bags" / "only_services.mcap").open("rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    (channel,) = summary.channels.values()
    golden = channel.metadata["topic_type_hash"]
    types = Ros2Types(
        {
            "example_interfaces/srv/AddTwoInts_Request": "int64 a\nint64 b\n",
            "example_interfaces/srv/AddTwoInts_Response": "int64 sum\n",
        }
    )
    name = "example_interfaces/srv/AddTwoInts_Event"
    types.add_msg(
        name,
        "service_msgs/ServiceEventInfo info\n"
        "example_interfaces/srv/AddTwoInts_Request[<=1] request\n"
        "example_interfaces/srv/AddTwoInts_Response[<=1] response\n",
    )
    assert types.rihs01(name) == golden
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    store.register({k: v for k, v in types._store.fielddefs.items() if "AddTwoInts" in k})
    assert store.hash_rihs01(name) != golden  # the pitfall this module works around


def test_char_in_msg_text_is_uint8() -> None:
    types = Ros2Types({"my_pkg/msg/Code": "char letter\nchar[2] pair\n"})
    raw = types.encode("my_pkg/msg/Code", {"letter": 65, "pair": [1, 2]})
    assert types.decode("my_pkg/msg/Code", raw) == {"letter": 65, "pair": [1, 2]}
    same = Ros2Types({"my_pkg/msg/Code": "uint8 letter\nuint8[2] pair\n"})
    assert types.rihs01("my_pkg/msg/Code") == same.rihs01("my_pkg/msg/Code")


def _decoded_two_ways(path: Path) -> list[tuple[str, dict[str, object], object]]:
    """Every message as our decoder and mcap-ros2-support's decoder each read it."""
    factory = mcap_ros2.DecoderFactory()
    out = []
    with path.open("rb") as fh:
        for schema, channel, message in make_reader(fh).iter_messages(log_time_order=True):
            assert schema is not None
            types = Ros2Types(standard=False)
            types.add_msg(schema.name, schema.data.decode())
            ours = types.decode(schema.name, message.data)
            decoder = factory.decoder_for(channel.message_encoding, schema)
            assert decoder is not None
            out.append((channel.topic, ours, decoder(message.data)))
    return out


def _same(ours: object, theirs: object, where: str) -> None:
    if isinstance(ours, dict):
        for name, value in ours.items():
            _same(value, getattr(theirs, name), f"{where}.{name}")
    elif isinstance(ours, list):
        theirs_list = list(theirs)  # type: ignore[call-overload]
        assert len(ours) == len(theirs_list), where
        for i, (a, b) in enumerate(zip(ours, theirs_list, strict=True)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(ours, float) and math.isnan(ours):
        assert math.isnan(theirs), where  # type: ignore[arg-type]
    else:
        assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"


@pytest.mark.parametrize(
    ("recording", "count"),
    [("talker/talker.mcap", 20), ("cdr_test/cdr_test_0.mcap", 7), ("bags/only_topics.mcap", 7)],
)
def test_vendored_recordings_decode_the_same_two_ways(recording: str, count: int) -> None:
    """Field by field, our CDR reading equals mcap-ros2-support's on rosbag2's recordings."""
    messages = _decoded_two_ways(BAGS / recording)
    assert len(messages) == count
    for i, (topic, ours, theirs) in enumerate(messages):
        _same(ours, theirs, f"{recording}:{topic}[{i}]")


def test_talker_strings_decode(types: Ros2Types) -> None:
    texts = [
        ours["data"]
        for topic, ours, _ in _decoded_two_ways(BAGS / "talker" / "talker.mcap")
        if topic == "/topic"
    ]
    assert texts == [f"Hello, world! {i}" for i in range(10)]


def test_encode_is_what_rosbags_and_mcap_ros2_read(types: Ros2Types) -> None:
    value = {
        "header": {"stamp": {"sec": 7, "nanosec": 5}, "frame_id": "front"},
        "range": 1.25,
        "max_range": 4.0,
    }
    raw = types.encode("sensor_msgs/msg/Range", value)
    assert raw[:4] == b"\x00\x01\x00\x00"  # CDR, little-endian
    back = types.decode("sensor_msgs/msg/Range", raw)
    assert back["header"] == value["header"]
    assert back["range"] == 1.25
    assert back["min_range"] == 0.0  # a field not given is zero
    from mcap_ros2._dynamic import generate_dynamic

    decoders = generate_dynamic("sensor_msgs/msg/Range", _range_schema())
    theirs = decoders["sensor_msgs/msg/Range"](raw)
    assert theirs.header.frame_id == "front"
    assert theirs.range == 1.25


def _range_schema() -> str:
    return (
        "std_msgs/Header header\nuint8 radiation_type\nfloat32 field_of_view\n"
        "float32 min_range\nfloat32 max_range\nfloat32 range\nfloat32 variance\n"
        "================================================================================\n"
        "MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n"
        "================================================================================\n"
        "MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n"
    )


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"range": "far"}, "sensor_msgs/msg/Range.range"),
        ({"radiation_type": 300}, "sensor_msgs/msg/Range.radiation_type"),
        ({"header": {"frame_id": 5}}, "sensor_msgs/msg/Range.header.frame_id"),
        ({"rang": 1.0}, "rang"),
        ({"header": {"stamp": {"sec": True}}}, "sensor_msgs/msg/Range.header.stamp.sec"),
    ],
)
def test_a_value_that_does_not_fit_is_refused_naming_the_field(
    types: Ros2Types, value: dict[str, object], field: str
) -> None:
    with pytest.raises(Ros2TypeError, match=field.replace(".", r"\.")):
        types.encode("sensor_msgs/msg/Range", value)


def test_truncated_and_foreign_payloads_are_refused(types: Ros2Types) -> None:
    raw = types.encode("sensor_msgs/msg/Range", {"header": {"frame_id": "left"}, "range": 2.0})
    for bad in (raw[:9], b"", b"\x07\x07\x00\x00abcd", raw[:4]):
        with pytest.raises(Ros2TypeError):
            types.decode("sensor_msgs/msg/Range", bad)


def test_field_paths(types: Ros2Types) -> None:
    assert types.check_path("sensor_msgs/msg/Range", "header.stamp.sec") is None
    assert types.check_path("sensor_msgs/msg/LaserScan", "ranges[0]") is None
    why = types.check_path("sensor_msgs/msg/Range", "header.frame")
    assert why is not None
    assert "'frame'" in why
    assert "frame_id" in why
    assert types.check_path("sensor_msgs/msg/Range", "range[0]") is not None
    assert types.check_path("sensor_msgs/msg/Range", "range.x") is not None
    assert types.check_path("sensor_msgs/msg/Range", "a..b") is not None


def test_dds_names_and_unknown_types(types: Ros2Types) -> None:
    assert dds_type_name("std_msgs/msg/String") == "std_msgs::msg::dds_::String_"
    with pytest.raises(ConfigError, match="unknown message type"):
        types.rihs01("my_pkg/msg/Nope")
    with pytest.raises(ConfigError, match="an unknown type"):
        Ros2Types({"my_pkg/msg/Bad": "flaot32 x\n"})
    with pytest.raises(ConfigError, match=r"not valid \.msg text"):
        Ros2Types({"my_pkg/msg/Bad": "int32[ x\n"})
