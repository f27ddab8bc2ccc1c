"""A ROS 2 graph on this machine without ROS: a Zenoh router and an independent rmw_zenoh peer.

:class:`ZenohRouter` opens a Zenoh session in router mode on a free loopback port (what
``rmw_zenohd`` is to a ROS 2 system). ``python -m forethought.testing._ros2_peer`` runs a robot
written with zenoh-ros2-sdk (ROBOTIS's rmw_zenoh implementation in Python, not ours): it
publishes ``sensor_msgs/msg/Range`` readings on ``/front/range`` and subscribes to the agent's
``std_msgs/msg/String`` actions, then prints one JSON line with when each reading went out and
each action came back. It never touches the network: the SDK gets every message definition and
type hash given (its registry would fetch ``.msg`` files with git), and its git download is
replaced by an error.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any, Self

from ._ports import free_port

__all__ = ["RANGE_MSG", "ZenohRouter"]

RANGE_MSG = (
    "uint8 ULTRASOUND=0\nuint8 INFRARED=1\nstd_msgs/Header header\nuint8 radiation_type\n"
    "float32 field_of_view\nfloat32 min_range\nfloat32 max_range\nfloat32 range\n"
    "float32 variance\n"
)
STRING_MSG = "string data\n"


class ZenohRouter:
    """A Zenoh router on ``tcp/127.0.0.1:<free port>`` for as long as the context lasts."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"tcp/127.0.0.1:{self.port}"
        self._session: Any = None

    def __enter__(self) -> Self:
        import zenoh  # noqa: PLC0415 - forethought[ros2]

        config = zenoh.Config()
        config.insert_json5("mode", '"router"')
        config.insert_json5("listen/endpoints", json.dumps([self.endpoint]))
        config.insert_json5("scouting/multicast/enabled", "false")
        self._session = zenoh.open(config)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


def _offline_sdk() -> None:
    """Make the SDK's git download fail loudly: a test must never reach the network."""
    import zenoh_ros2_sdk._cache as cache  # noqa: PLC0415
    import zenoh_ros2_sdk.message_registry as registry  # noqa: PLC0415

    def refuse(*args: object, **kwargs: object) -> str:
        raise RuntimeError(f"zenoh-ros2-sdk tried to download message files: {args}")

    cache.clone_to_cache = refuse
    registry.clone_to_cache = refuse
    registry.get_message_file_path = refuse


def _register_jazzy(store: Any, names: list[str]) -> None:
    """Give the SDK's (empty) type store the standard types a Range nests."""
    from rosbags.typesys import Stores, get_typestore  # noqa: PLC0415

    jazzy = get_typestore(Stores.ROS2_JAZZY)
    store.register({n: jazzy.fielddefs[n] for n in names if n not in store.fielddefs})


def main(argv: list[str] | None = None) -> int:
    """Publish readings, collect actions, print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--router-port", type=int, required=True)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--interval-ms", type=float, default=100.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--wait-s", type=float, default=10.0)
    parser.add_argument("--action-topic", default="/forethought/action")
    parser.add_argument(
        "--plain-agent-id",
        default=None,
        help="instead: the same readings as JSON events to a plain Zenoh bus agent of this id",
    )
    args = parser.parse_args(argv)
    if args.plain_agent_id is not None:
        return _plain(args)
    _offline_sdk()
    from rosbags.typesys import Stores, get_typestore  # noqa: PLC0415
    from zenoh_ros2_sdk import ROS2Publisher, ROS2Subscriber  # noqa: PLC0415
    from zenoh_ros2_sdk.session import ZenohSession  # noqa: PLC0415

    jazzy = get_typestore(Stores.ROS2_JAZZY)  # the type hashes: rosbags', not ours
    session = ZenohSession.get_instance("127.0.0.1", args.router_port)
    _register_jazzy(session.store, ["builtin_interfaces/msg/Time", "std_msgs/msg/Header"])
    actions: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_action(msg: Any) -> None:
        now = time.time_ns()
        with lock:
            actions.append({"recv_ns": now, "data": msg.data})

    sub = ROS2Subscriber(
        topic=args.action_topic,
        msg_type="std_msgs/msg/String",
        callback=on_action,
        msg_definition=STRING_MSG,
        type_hash=jazzy.hash_rihs01("std_msgs/msg/String"),
        node_name="sdk_robot_listener",
        router_port=args.router_port,
    )
    pub = ROS2Publisher(
        topic="/front/range",
        msg_type="sensor_msgs/msg/Range",
        msg_definition=RANGE_MSG,
        type_hash=jazzy.hash_rihs01("sensor_msgs/msg/Range"),
        node_name="sdk_robot",
        router_port=args.router_port,
    )
    time.sleep(args.warmup_s)  # discovery: the agent's subscriber must be matched
    header = session.store.types["std_msgs/msg/Header"]
    stamp = session.store.types["builtin_interfaces/msg/Time"]
    sides, distances = ["left", "front", "right"], [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    sent: list[int] = []
    for i in range(args.count):
        now = time.time_ns()
        pub.publish(
            header=header(
                stamp=stamp(sec=now // 10**9, nanosec=now % 10**9), frame_id=sides[i % 3]
            ),
            radiation_type=0,
            field_of_view=0.5,
            min_range=0.2,
            max_range=4.0,
            range=distances[i % len(distances)],
            variance=0.0,
        )
        sent.append(now)
        time.sleep(args.interval_ms / 1e3)
    end = time.monotonic() + args.wait_s
    while time.monotonic() < end:
        with lock:
            if len(actions) >= args.count:
                break
        time.sleep(0.01)
    with lock:
        print(json.dumps({"sent": sent, "actions": actions, "type_hash": pub.type_hash}))
    sys.stdout.flush()
    pub.close()
    sub.close()
    session.close()
    return 0


def _plain(args: argparse.Namespace) -> int:
    """The same robot on the plain Zenoh bus: JSON events in, the decision's JSON back."""
    import zenoh  # noqa: PLC0415

    config = zenoh.Config()
    config.insert_json5("connect/endpoints", json.dumps([f"tcp/127.0.0.1:{args.router_port}"]))
    config.insert_json5("scouting/multicast/enabled", "false")
    session: Any = zenoh.open(config)  # its close() and undeclare() are untyped
    actions: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_action(sample: Any) -> None:
        now = time.time_ns()
        with lock:
            actions.append({"recv_ns": now, "data": sample.payload.to_bytes().decode()})

    agent = args.plain_agent_id
    sub: Any = session.declare_subscriber(f"forethought/{agent}/actions", on_action)
    pub: Any = session.declare_publisher(f"forethought/{agent}/events/obstacle")
    time.sleep(args.warmup_s)
    sides, distances = ["left", "front", "right"], [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    sent: list[int] = []
    for i in range(args.count):
        now = time.time_ns()
        body = {
            "id": f"plain-{i}",
            "type": "obstacle",
            "params": {"side": sides[i % 3], "distance_m": distances[i % len(distances)]},
            "sent_at_ns": now,
        }
        pub.put(json.dumps(body).encode())
        sent.append(now)
        time.sleep(args.interval_ms / 1e3)
    end = time.monotonic() + args.wait_s
    while time.monotonic() < end:
        with lock:
            if len(actions) >= args.count:
                break
        time.sleep(0.01)
    with lock:
        print(json.dumps({"sent": sent, "actions": actions}))
    sys.stdout.flush()
    sub.undeclare()
    pub.undeclare()
    session.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
