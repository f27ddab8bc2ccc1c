"""The agent as a ROS 2 node over rmw_zenoh, against peers nobody here wrote.

A Zenoh router on a free loopback port stands for ``rmw_zenohd``. The bus-level tests put
samples with a raw Zenoh session (exactly what an rmw_zenoh publisher puts: key, CDR,
attachment) and read the agent's liveliness tokens back; the round trip runs zenoh-ros2-sdk
(ROBOTIS's rmw_zenoh implementation in Python) in a child process as the robot, with the
agent deciding on a planned tree (the tiny random-weight model: its actions are valid by
grammar).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("rosbags")
zenoh = pytest.importorskip("zenoh")
pytest.importorskip("zenoh_ros2_sdk")

from robot_spec import robot_spec  # noqa: E402

from forethought.models import TransformersBackend  # noqa: E402
from forethought.policies import AgentSpec  # noqa: E402
from forethought.runtime import (  # noqa: E402
    Agent,
    AgentConfig,
    Decision,
    Ros2Bus,
    Ros2Map,
    Ros2Types,
    Tier,
)
from forethought.runtime.transports._ros2_wire import Attachment  # noqa: E402
from forethought.testing import until_holds  # noqa: E402
from forethought.testing._ros2_peer import ZenohRouter  # noqa: E402

RANGE = "sensor_msgs/msg/Range"
MAP = {
    "topics": {
        "/front/range": {
            "msg_type": RANGE,
            "event": "obstacle",
            "params": {"side": "header.frame_id", "distance_m": "range"},
        },
        "/battery": {
            "msg_type": "sensor_msgs/msg/BatteryState",
            "state": {"battery": "percentage"},
        },
    },
}
SPEC = robot_spec(
    "ros2-test",
    events=[
        {
            "type": "obstacle",
            "params": {
                "side": ["left", "front", "right"],
                "distance_m": {"min": 0.5, "max": 3.0, "step": 0.5},
            },
            "deadline_ms": 2000,
        }
    ],
    state={"zone": "aisle", "battery": 1.0},
)


@pytest.fixture
def router() -> Iterator[ZenohRouter]:
    with ZenohRouter() as r:
        yield r


class RawPeer:
    """A plain Zenoh session on the router: puts what an rmw_zenoh publisher would."""

    def __init__(self, router: ZenohRouter) -> None:
        config = zenoh.Config()
        config.insert_json5("connect/endpoints", json.dumps([router.endpoint]))
        config.insert_json5("scouting/multicast/enabled", "false")
        self.session = zenoh.open(config)
        self.types = Ros2Types()
        self.seq = 0

    def put(self, key: str, payload: bytes, *, attachment: bool = True) -> None:
        self.seq += 1
        extra = {}
        if attachment:
            extra["attachment"] = Attachment(self.seq, time.time_ns(), b"\x07" * 16).encode()
        self.session.put(key, payload, congestion_control=zenoh.CongestionControl.BLOCK, **extra)

    def range_cdr(self, side: str, distance: float) -> bytes:
        now = time.time_ns()
        return self.types.encode(
            RANGE,
            {
                "header": {
                    "stamp": {"sec": now // 10**9, "nanosec": now % 10**9},
                    "frame_id": side,
                },
                "range": distance,
            },
        )

    def close(self) -> None:
        self.session.close()


async def _linked(bus: Ros2Bus, peer: RawPeer) -> None:
    """Wait until the bus's subscriptions are known to the router: a put now reaches the bus."""
    heard = [
        peer.session.declare_publisher(key) for key in bus.keys.values() if key != bus.action_key
    ]
    await until_holds(
        lambda: all(p.matching_status.matching for p in heard), 10, "the bus's subscriptions"
    )
    for publisher in heard:
        publisher.undeclare()


@pytest.fixture
async def bus_and_peer(router: ZenohRouter) -> AsyncIterator[tuple[Ros2Bus, RawPeer]]:
    bus = Ros2Bus(
        Ros2Map.model_validate(MAP), default_action={"a": "stop"}, connect=[router.endpoint]
    )
    async with bus:
        peer = RawPeer(router)
        try:
            await _linked(bus, peer)
            yield bus, peer
        finally:
            peer.close()


async def _next(bus: Ros2Bus, wait_s: float = 5.0) -> Any:
    it = bus.events().__aiter__()
    return await asyncio.wait_for(it.__anext__(), wait_s)


async def test_the_node_and_its_endpoints_are_in_the_graph(
    bus_and_peer: tuple[Ros2Bus, RawPeer],
) -> None:
    bus, peer = bus_and_peer
    replies = await asyncio.to_thread(
        lambda: list(peer.session.liveliness().get("@ros2_lv/0/**", timeout=3.0))
    )
    seen = sorted(str(r.ok.key_expr) for r in replies if r.ok is not None)
    assert seen == sorted(bus.tokens)
    kinds = [t.split("/")[5] for t in seen]
    assert sorted(kinds) == ["MP", "MS", "MS", "NN"]
    zid = bus.tokens[0].split("/")[2]
    hash_ = Ros2Types().rihs01(RANGE)
    assert (
        f"@ros2_lv/0/{zid}/0/1/MS/%/%/forethought/%front%range/sensor_msgs::msg::dds_::Range_/"
        f"{hash_}/::,10:,:,:,,"
    ) in seen


async def test_a_sample_becomes_an_event_and_a_state_topic_patches_the_next(
    bus_and_peer: tuple[Ros2Bus, RawPeer],
) -> None:
    bus, peer = bus_and_peer
    battery = peer.types.encode("sensor_msgs/msg/BatteryState", {"percentage": 0.5})
    peer.put(bus.keys["/battery"], battery)
    # Two keys are two streams: the patch first, then the reading.
    await until_holds(lambda: bus.stats.state_patches, 10, "the state patch")
    cdr = peer.range_cdr("front", 1.5)
    peer.put(bus.keys["/front/range"], cdr)
    event = await _next(bus)
    assert event.type == "obstacle"
    assert event.params == {"side": "front", "distance_m": 1.5}
    assert event.state == {"battery": 0.5}
    assert event.age.value == "sent_at_ns"  # the header's stamp
    assert bus.stats.state_patches == 1
    assert bus.stats.received == 2


async def test_bad_samples_deliver_nothing_and_are_counted(
    bus_and_peer: tuple[Ros2Bus, RawPeer], caplog: pytest.LogCaptureFixture
) -> None:
    bus, peer = bus_and_peer
    key = bus.keys["/front/range"]
    good = peer.range_cdr("left", 2.0)
    peer.put(key, good, attachment=False)  # rmw_zenoh drops these too
    peer.put(key, good[:10])  # truncated CDR
    peer.put(key, b"\x00\x01\x00\x00" + b"\xff" * 3)  # garbage
    peer.put(key, peer.types.encode("std_msgs/msg/String", {"data": "x" * 40}))  # another type
    wrong_hash = key.rsplit("/", 1)[0] + "/RIHS01_" + "0" * 64
    peer.put(wrong_hash, good)  # another definition: another key, never delivered
    await until_holds(lambda: bus.stats.received >= 4, 10, "the four samples")
    # The wrong hash never arrives: nothing subscribes to its key.
    assert not peer.session.declare_publisher(wrong_hash).matching_status.matching
    assert bus.stats.received == 4
    assert bus.stats.malformed == 4
    with pytest.raises(TimeoutError):
        await _next(bus, wait_s=0.3)
    logged = [r for r in caplog.records if r.name == "forethought.ros2"]
    assert len(logged) == 1  # once per topic
    peer.put(key, peer.range_cdr("right", 3.0))  # and the next good one still works
    event = await _next(bus)
    assert event.params == {"side": "right", "distance_m": 3.0}


async def test_an_action_that_does_not_fit_sends_the_default_whole(router: ZenohRouter) -> None:
    typed = {
        **MAP,
        "actions": {"type": "geometry_msgs/msg/Twist", "fields": {"linear.x": "speed"}},
    }
    bus = Ros2Bus(
        Ros2Map.model_validate(typed), default_action={"speed": 0.0}, connect=[router.endpoint]
    )
    got: list[tuple[bytes, bytes | None]] = []
    async with bus:
        peer = RawPeer(router)
        sub = peer.session.declare_subscriber(
            bus.action_key,
            lambda s: got.append((s.payload.to_bytes(), s.attachment and s.attachment.to_bytes())),
        )
        await _linked(bus, peer)
        # The bus's action publisher knows this subscriber (through the router).
        await until_holds(
            lambda: bus._publisher is not None and bus._publisher.matching_status.matching,
            10,
            "the action subscriber",
        )
        event = await _event_for(bus, peer)
        for action in ({"speed": 0.4}, {"speed": "fast"}, {"turn": 1}):
            decision = Decision(event.id, Tier.TREE, action, 0.001, 0.5, True)
            await bus.publish(event, decision)
        await until_holds(lambda: len(got) >= 3, 10, "the three actions")
        sub.undeclare()
        peer.close()
    twists = [Ros2Types().decode("geometry_msgs/msg/Twist", raw)["linear"]["x"] for raw, _ in got]
    assert twists == [pytest.approx(0.4), 0.0, 0.0]  # the two that do not fit: the default
    assert bus.stats.encode_failures == 2
    attachments = [Attachment.decode(a) for _, a in got]
    assert [a.sequence for a in attachments] == [1, 2, 3]
    assert len({a.gid for a in attachments}) == 1


async def _event_for(bus: Ros2Bus, peer: RawPeer) -> Any:
    peer.put(bus.keys["/front/range"], peer.range_cdr("front", 1.0))
    return await _next(bus)


@pytest.mark.model
async def test_zenoh_ros2_sdk_round_trip(
    router: ZenohRouter, tiny_backend: TransformersBackend
) -> None:
    """An independent rmw_zenoh peer publishes Range readings; each is decided from the tree in
    time and the action arrives, decoded by the SDK, as the decision's JSON."""
    spec = AgentSpec.from_data(SPEC)
    bus = Ros2Bus(
        Ros2Map.model_validate(MAP), default_action=spec.default_action, connect=[router.endpoint]
    )
    count = 6
    async with Agent(spec, backend=tiny_backend, bus=bus, config=AgentConfig()) as agent:
        await agent.until_covered(1.0, timeout=300)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "forethought.testing._ros2_peer",
            "--router-port", str(router.port), "--count", str(count),
            "--interval-ms", "150", "--warmup-s", "2", "--wait-s", "15",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["type_hash"] == Ros2Types().rihs01(RANGE)
    decisions = [json.loads(a["data"]) for a in result["actions"]]
    assert len(decisions) == count
    assert sorted(int(d["id"].rsplit("-", 1)[1]) for d in decisions) == list(range(count))
    for d in decisions:
        assert d["action"]["a"] in {"stop", "slow", "go"}
        assert d["tier"] == "tree"
        assert d["met"] is True
        assert d["late"] is None
    assert bus.stats.received == count
    assert bus.stats.published == count
    assert bus.stats.malformed == 0
