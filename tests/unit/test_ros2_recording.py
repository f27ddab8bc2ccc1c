"""rosbag2 recordings replayed through a ROS 2 map; ``check`` on the map.

The shipped recording (sims/recordings/ros2-range) was written by rosbags' rosbag2 writer, not
by Forethought; rosbag2's own recordings (tests/resources/rosbag2) were written by ROS 2.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("rosbags")

from mcap.reader import make_reader

from forethought.commands._check import check_file
from forethought.policies import ConfigError
from forethought.runtime import Ros2Map, Ros2Types
from forethought.sims import load_scenario, shipped_scenarios
from forethought.sims._ros2_recording import trace_from_ros2

SCENARIO = next(p for p in shipped_scenarios() if p.stem == "ros2-range")
RECORDINGS = SCENARIO.parent.parent / "recordings"
BAG = RECORDINGS / "ros2-range"
BAGS = Path(__file__).resolve().parent.parent / "resources" / "rosbag2"


def _ranges() -> list[tuple[int, dict[str, object]]]:
    """The /front/range readings as rosbags' own reader decodes them (log ns, message)."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    out = []
    with Reader(BAG) as reader:
        conns = [c for c in reader.connections if c.topic == "/front/range"]
        for conn, log_ns, raw in reader.messages(connections=conns):
            msg = store.deserialize_cdr(raw, conn.msgtype)
            out.append((log_ns, {"side": msg.header.frame_id, "distance_m": float(msg.range)}))
    return out


def test_every_mapped_message_is_an_event_and_the_battery_patches_the_state() -> None:
    scenario = load_scenario(SCENARIO)
    events = scenario.events()
    expected = _ranges()
    assert len(events) == len(expected) == 40  # every Range reading; no battery, no odometry
    assert [e.params for e in events] == [p for _, p in expected]
    # times from the first mapped message: the battery, logged 3 ms before the first reading
    assert events[0].at_ms == 3.0
    t0 = expected[0][0] - 3_000_000
    assert [round(e.at_ms, 6) for e in events] == [round((t - t0) / 1e6, 6) for t, _ in expected]
    assert {e.type for e in events} == {"obstacle"}
    patched = [e.state for e in events if e.state]
    assert len(patched) == 8  # one BatteryState every fifth reading, each before its reading
    assert all(set(s) == {"battery"} for s in patched)
    levels = [s["battery"] for s in patched]
    assert levels == sorted(levels, reverse=True)
    assert levels[0] == pytest.approx(0.91, abs=1e-6)


def test_the_bag_folder_and_its_mcap_file_replay_the_same() -> None:
    ros2_map = _map()
    assert trace_from_ros2(BAG, ros2_map) == trace_from_ros2(BAG / "ros2-range.mcap", ros2_map)


def test_the_cli_route_spec_recording_and_map_makes_the_same_scenario() -> None:
    direct = load_scenario(SCENARIO)
    again = load_scenario(SCENARIO, recording=(BAG, RECORDINGS / "ros2-range.map.yaml"))
    assert [e.model_dump() for e in again.events()] == [e.model_dump() for e in direct.events()]


def test_check_accepts_the_shipped_scenario() -> None:
    result = check_file(SCENARIO)
    assert result.errors == 0, [p.line() for p in result.problems]


def _map(**topics: dict[str, object]) -> Ros2Map:
    base: dict[str, dict[str, object]] = {
        "/front/range": {
            "event": "obstacle",
            "params": {"side": "header.frame_id", "distance_m": "range"},
        },
        "/battery": {"state": {"battery": "percentage"}},
    }
    return Ros2Map.model_validate({"topics": base | topics})


def test_check_names_every_problem_of_a_map_in_one_run(tmp_path: Path) -> None:
    text = SCENARIO.read_text()
    text = text.replace("../recordings/ros2-range.map.yaml", "bad.map.yaml")
    text = text.replace("../recordings/ros2-range", str(BAG))
    (tmp_path / "s.yaml").write_text(text)
    (tmp_path / "bad.map.yaml").write_text(
        "topics:\n"
        "  /front/range:\n"
        "    event: obstacel\n"
        "    params: {side: header.frame, distance_m: range}\n"
        "  /battery:\n"
        "    state: {batery: percentage, zone: foo.bar}\n"
        "  /odom:\n"
        "    event: obstacle\n"
        "    params: {side: child_frame_id, speed: twist.twist.linear.x}\n"
        "actions:\n"
        "  type: geometry_msgs/msg/Twist\n"
        "  fields: {linear.x: speed, angular.q: action}\n"
    )
    result = check_file(tmp_path / "s.yaml")
    found = {(p.path.split("bad.map.yaml.")[-1], str(p.value)) for p in result.problems}
    assert found == {
        ("topics./front/range.event", "obstacel"),  # not declared
        ("topics./front/range.params.side", "header.frame"),  # Range's header has no frame
        ("topics./battery.state.batery", "batery"),  # not a state field
        ("topics./battery.state.zone", "foo.bar"),  # BatteryState has no foo
        ("topics./odom.params.speed", "speed"),  # not a parameter of obstacle
        ("actions.fields.linear.x", "speed"),  # not a field of the action
        ("actions.fields.angular.q", "angular.q"),  # Twist's angular has no q
    }
    assert result.errors == 7


def test_a_topic_the_recording_lacks_or_a_missing_field_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"not in the recording.*/scan"):
        trace_from_ros2(BAG, _map(**{"/scan": {"event": "obstacle"}}))
    bad = Ros2Map.model_validate(
        {"topics": {"/front/range": {"event": "obstacle", "params": {"d": "ranges[0]"}}}}
    )
    with pytest.raises(Exception, match=r"/front/range\[0\].*ranges\[0\]"):
        trace_from_ros2(BAG, bad)


def test_a_recording_of_another_definition_is_refused_not_misread(tmp_path: Path) -> None:
    """A stored hash that is not the schema's: the recording contradicts itself."""
    from mcap.writer import Writer

    with (BAG / "ros2-range.mcap").open("rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    (channel,) = [c for c in summary.channels.values() if c.topic == "/front/range"]
    schema = summary.schemas[channel.schema_id]
    out = tmp_path / "forged.mcap"
    with out.open("wb") as fh:
        w = Writer(fh)
        w.start(profile="ros2")
        sid = w.register_schema(schema.name, schema.encoding, schema.data)
        cid = w.register_channel(
            "/front/range", "cdr", sid, {"topic_type_hash": "RIHS01_" + "0" * 64}
        )
        raw = Ros2Types().encode("sensor_msgs/msg/Range", {"range": 1.0})
        w.add_message(cid, 1, raw, 1)
        w.finish()
    with pytest.raises(ConfigError, match="recorded hash of sensor_msgs/msg/Range"):
        trace_from_ros2(out, _map())


def test_rosbag2s_own_recording_replays(tmp_path: Path) -> None:
    """talker.mcap (written by ROS 2): each String is an event named by a field path."""
    shutil.copytree(BAGS / "talker", tmp_path / "talker")
    ros2_map = Ros2Map.model_validate(
        {"topics": {"/topic": {"event": "chatter", "params": {"text": "data"}}}}
    )
    events = trace_from_ros2(tmp_path / "talker", ros2_map)
    assert [e.params["text"] for e in events] == [f"Hello, world! {i}" for i in range(10)]
    assert events[0].at_ms == 0
    assert 4000 < events[-1].at_ms < 5000  # 10 messages, 2 Hz


def test_a_sqlite_bag_is_refused_with_the_fix(tmp_path: Path) -> None:
    bag = tmp_path / "bag"
    bag.mkdir()
    (bag / "metadata.yaml").write_text(
        "rosbag2_bagfile_information:\n  storage_identifier: sqlite3\n"
        "  relative_file_paths: [bag_0.db3]\n"
    )
    with pytest.raises(ConfigError, match="ros2 bag convert"):
        trace_from_ros2(bag, _map())


def test_a_file_that_is_not_mcap_is_a_clear_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.mcap"
    garbage.write_bytes(b"not an mcap file at all")
    with pytest.raises(ConfigError, match="not a readable MCAP file"):
        trace_from_ros2(garbage, _map())
