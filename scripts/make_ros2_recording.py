"""Write sims/recordings/ros2-range/: a rosbag2 recording of a robot's range sensors and battery.

Written with rosbags' rosbag2 writer (MCAP storage, CDR, the bag folder's ``metadata.yaml``),
not with Forethought: the shipped scenario ``ros2-range`` replays a recording made by another
library, as a robot's ``ros2 bag record`` would make it. Three ``sensor_msgs/msg/Range``
sensors (``header.frame_id`` says which: left, front, right) publish readings on
``/front/range``; ``sensor_msgs/msg/BatteryState`` on ``/battery`` drains slowly; ``/odom``
(nav_msgs/msg/Odometry) runs beside them and is not mapped. Seeded: the same readings each run.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

OUT = Path(__file__).resolve().parent.parent / "sims" / "recordings" / "ros2-range"
START_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


def main() -> None:
    rng = random.Random(46)
    ts = get_typestore(Stores.ROS2_JAZZY)
    time_ = ts.types["builtin_interfaces/msg/Time"]
    header = ts.types["std_msgs/msg/Header"]
    range_ = ts.types["sensor_msgs/msg/Range"]
    battery = ts.types["sensor_msgs/msg/BatteryState"]
    if OUT.exists():
        shutil.rmtree(OUT)
    with Writer(OUT, version=8, storage_plugin=StoragePlugin.MCAP) as w:
        ranges = w.add_connection("/front/range", range_.__msgtype__, typestore=ts)
        batt = w.add_connection("/battery", battery.__msgtype__, typestore=ts)
        odom = w.add_connection("/odom", "nav_msgs/msg/Odometry", typestore=ts)
        odom_msg = ts.types["nav_msgs/msg/Odometry"]

        def stamp(ns: int) -> object:
            return header(stamp=time_(sec=ns // 10**9, nanosec=ns % 10**9), frame_id="base_link")

        level = 0.92
        for i in range(40):  # a reading every 1.5 s for 60 s
            t = START_NS + i * 1_500_000_000 + rng.randrange(0, 200_000_000)
            if i % 5 == 0:
                level -= 0.01
                msg = battery(
                    header=stamp(t),
                    **_battery_fields(ts, level),
                )
                w.write(batt, t, ts.serialize_cdr(msg, battery.__msgtype__))
            side = rng.choice(["left", "front", "right"])
            distance = rng.choice([0.5, 1.0, 1.5, 2.0, 2.5, 3.0])
            h = header(stamp=time_(sec=t // 10**9, nanosec=t % 10**9), frame_id=side)
            msg = range_(
                header=h,
                radiation_type=range_.ULTRASOUND,
                field_of_view=0.5,
                min_range=0.2,
                max_range=4.0,
                range=distance,
                variance=0.01,
            )
            # logged a few milliseconds after the sensor stamped it, as a recorder would
            w.write(ranges, t + 3_000_000, ts.serialize_cdr(msg, range_.__msgtype__))
            w.write(
                odom,
                t + 5_000_000,
                ts.serialize_cdr(_odom(ts, odom_msg, stamp(t)), odom_msg.__msgtype__),
            )
    print(f"wrote {OUT}")


def _battery_fields(ts: object, level: float) -> dict[str, object]:
    import numpy as np  # noqa: PLC0415 - rosbags' dependency

    return {
        "voltage": 24.0 * level,
        "temperature": 30.0,
        "current": -2.0,
        "charge": float("nan"),
        "capacity": float("nan"),
        "design_capacity": 20.0,
        "percentage": round(level, 2),
        "power_supply_status": 2,
        "power_supply_health": 1,
        "power_supply_technology": 2,
        "present": True,
        "cell_voltage": np.array([], dtype=np.float32),
        "cell_temperature": np.array([], dtype=np.float32),
        "location": "base",
        "serial_number": "B-46",
    }


def _odom(ts: object, odom_msg: type, header: object) -> object:
    import numpy as np  # noqa: PLC0415

    types = ts.types  # type: ignore[attr-defined]
    pose = types["geometry_msgs/msg/PoseWithCovariance"](
        pose=types["geometry_msgs/msg/Pose"](
            position=types["geometry_msgs/msg/Point"](x=1.0, y=2.0, z=0.0),
            orientation=types["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
        ),
        covariance=np.zeros(36, dtype=np.float64),
    )
    twist = types["geometry_msgs/msg/TwistWithCovariance"](
        twist=types["geometry_msgs/msg/Twist"](
            linear=types["geometry_msgs/msg/Vector3"](x=0.5, y=0.0, z=0.0),
            angular=types["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.1),
        ),
        covariance=np.zeros(36, dtype=np.float64),
    )
    return odom_msg(header=header, child_frame_id="base_link", pose=pose, twist=twist)


if __name__ == "__main__":
    main()
