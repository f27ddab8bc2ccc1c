"""The CDR decoder under fuzzing: any bytes give a message or a Ros2TypeError, nothing else.

A robot's publisher, a recording or an attacker on the network may send anything on a mapped
key; the bus counts what does not decode and goes on. These properties check the decoder never
raises anything else (nor hangs on a huge length prefix), and that what we encode reads back.
"""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("rosbags")

from hypothesis import given, settings
from hypothesis import strategies as st

from forethought.runtime import Ros2TypeError, Ros2Types

TYPES = Ros2Types({"my_pkg/msg/Mixed": "char c\nbyte[] raw\nstring<=8 tag\nfloat64[3] xyz\n"})
NAMES = [
    "sensor_msgs/msg/Range",
    "sensor_msgs/msg/LaserScan",
    "sensor_msgs/msg/BatteryState",
    "std_msgs/msg/String",
    "geometry_msgs/msg/Twist",
    "nav_msgs/msg/Odometry",
    "my_pkg/msg/Mixed",
]
HEADER = st.sampled_from([b"\x00\x01\x00\x00", b"\x00\x00\x00\x00", b""])


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(NAMES), header=HEADER, body=st.binary(max_size=256))
def test_any_bytes_decode_or_raise_ros2typeerror(name: str, header: bytes, body: bytes) -> None:
    try:
        out = TYPES.decode(name, header + body)
    except Ros2TypeError:
        return
    assert isinstance(out, dict)


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(NAMES), cut=st.integers(min_value=0, max_value=400))
def test_truncated_payloads_raise_ros2typeerror(name: str, cut: int) -> None:
    raw = TYPES.encode(name, {})
    if cut >= len(raw):
        assert isinstance(TYPES.decode(name, raw), dict)
        return
    try:
        TYPES.decode(name, raw[:cut])
    except Ros2TypeError:
        return
    # a prefix can be a whole message of the type only where the rest was padding
    assert len(raw) - cut < 8


def test_a_huge_length_prefix_is_refused_quickly() -> None:
    raw = b"\x00\x01\x00\x00" + struct.pack("<I", 0xFFFFFFF0) + b"abc"
    with pytest.raises(Ros2TypeError):
        TYPES.decode("std_msgs/msg/String", raw)


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


@settings(max_examples=200, deadline=None)
@given(
    frame=st.text(max_size=20),
    sec=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    nanosec=st.integers(min_value=0, max_value=2**32 - 1),
    rng=st.floats(allow_nan=False, allow_infinity=False, width=32),
)
def test_range_round_trips(frame: str, sec: int, nanosec: int, rng: float) -> None:
    value = {"header": {"stamp": {"sec": sec, "nanosec": nanosec}, "frame_id": frame}, "range": rng}
    back = TYPES.decode("sensor_msgs/msg/Range", TYPES.encode("sensor_msgs/msg/Range", value))
    assert back["header"] == value["header"]
    assert back["range"] == _f32(rng)


@settings(max_examples=200, deadline=None)
@given(
    c=st.integers(min_value=0, max_value=255),
    raw=st.lists(st.integers(min_value=0, max_value=255), max_size=40),
    tag=st.text(alphabet="abcxyz", max_size=8),
    xyz=st.lists(st.floats(allow_nan=False), min_size=3, max_size=3),
)
def test_custom_type_round_trips(c: int, raw: list[int], tag: str, xyz: list[float]) -> None:
    value = {"c": c, "raw": raw, "tag": tag, "xyz": xyz}
    back = TYPES.decode("my_pkg/msg/Mixed", TYPES.encode("my_pkg/msg/Mixed", value))
    assert back == value
