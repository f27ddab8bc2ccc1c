"""rmw_zenoh's wire format byte for byte against the golden values of its design document.

ros2/rmw_zenoh docs/design.md gives, for demo_nodes_cpp's talker and listener, the topic keys
and the liveliness tokens of a node, a subscription and a publisher (sections "Topic and
Service name mapping to Zenoh key expressions" and "Graph Cache"), and the attachment layout
(section "Publishers"). The session ids below are the document's.
"""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("rosbags")

from forethought.policies import ConfigError
from forethought.runtime import Ros2Types
from forethought.runtime.transports._ros2_wire import (
    ATTACHMENT_BYTES,
    Attachment,
    Qos,
    endpoint_token,
    entity_gid,
    mangle,
    node_token,
    topic_key,
)

STRING = "std_msgs/msg/String"
STRING_HASH = "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18"


@pytest.fixture(scope="module")
def string_hash() -> str:
    got = Ros2Types().rihs01(STRING)
    assert got == STRING_HASH  # our hash is the document's
    return got


def test_topic_keys(string_hash: str) -> None:
    assert topic_key(0, "/chatter", STRING, string_hash) == (
        "0/chatter/std_msgs::msg::dds_::String_/"
        "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18"
    )
    assert topic_key(0, "/robot1/chatter", STRING, string_hash) == (
        "0/robot1/chatter/std_msgs::msg::dds_::String_/"
        "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18"
    )


def test_node_token() -> None:
    token = node_token(2, "aac3178e146ba6f1fc6e6a4085e77f21", 0, "/", "listener")
    assert token == "@ros2_lv/2/aac3178e146ba6f1fc6e6a4085e77f21/0/0/NN/%/%/listener"


def test_subscription_and_publisher_tokens(string_hash: str) -> None:
    listener = endpoint_token(
        "MS", 2, "aac3178e146ba6f1fc6e6a4085e77f21", 0, 10, "/", "listener", "/chatter",
        STRING, string_hash, Qos(depth=10),
    )  # fmt: skip
    assert listener == (
        "@ros2_lv/2/aac3178e146ba6f1fc6e6a4085e77f21/0/10/MS/%/%/listener/%chatter/"
        "std_msgs::msg::dds_::String_/"
        "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18/::,10:,:,:,,"
    )
    talker = endpoint_token(
        "MP", 2, "8b20917502ee955ac4476e0266340d5c", 0, 10, "/", "talker", "/chatter",
        STRING, string_hash, Qos(depth=7),
    )  # fmt: skip
    assert talker == (
        "@ros2_lv/2/8b20917502ee955ac4476e0266340d5c/0/10/MP/%/%/talker/%chatter/"
        "std_msgs::msg::dds_::String_/"
        "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18/::,7:,:,:,,"
    )


def test_qos_strings() -> None:
    assert Qos().encode() == "::,10:,:,:,,"
    assert Qos(depth=7).encode() == "::,7:,:,:,,"
    assert Qos(reliable=False, transient_local=True, depth=1).encode() == "2:1:,1:,:,:,,"


def test_names_in_tokens_are_mangled() -> None:
    assert mangle("/") == "%"
    assert mangle("") == "%"
    assert mangle("/robot1/front/range") == "%robot1%front%range"
    token = node_token(0, "ab", 3, "/robot1", "agent")
    assert token == "@ros2_lv/0/ab/3/3/NN/%/%robot1/agent"


def test_the_attachment_is_33_bytes_little_endian() -> None:
    gid = bytes(range(16))
    raw = Attachment(sequence=7, timestamp_ns=1_700_000_000_123_456_789, gid=gid).encode()
    assert len(raw) == ATTACHMENT_BYTES == 33
    assert raw[:8] == (7).to_bytes(8, "little")
    assert raw[8:16] == (1_700_000_000_123_456_789).to_bytes(8, "little")
    assert raw[16] == 16
    assert raw[17:] == gid
    assert Attachment.decode(raw) == Attachment(7, 1_700_000_000_123_456_789, gid)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (None, "no attachment"),
        (b"\x01" * 32, "32 bytes"),
        (struct.pack("<qqB16s", 1, 2, 8, b"\0" * 16), "GID length 8"),
        (b"\x01" * 40, "40 bytes"),
    ],
)
def test_bad_attachments_are_refused(raw: bytes | None, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Attachment.decode(raw)


def test_gids_are_16_bytes_and_differ_per_entity() -> None:
    a = entity_gid("@ros2_lv/0/ab/0/1/MP/%/%/agent/%a/T/H/::,10:,:,:,,")
    b = entity_gid("@ros2_lv/0/ab/0/2/MP/%/%/agent/%a/T/H/::,10:,:,:,,")
    assert len(a) == len(b) == 16
    assert a != b


def test_bad_topic_names_are_refused(string_hash: str) -> None:
    for bad in ("chatter", "/a//b", "/a/", "/a b", "/a/*"):
        with pytest.raises(ConfigError, match="topic"):
            topic_key(0, bad, STRING, string_hash)
