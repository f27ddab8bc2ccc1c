"""Write sims/recordings/amr-perception.mcap: what a robot's own logger might have recorded.

Written with the mcap library directly, as a robot's logger would (not with Forethought's
recorder): a perception channel of JSON detections, and an odometry channel the mapping
ignores. Seeded: the same file every time.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from mcap.writer import Writer

OUT = Path(__file__).resolve().parent.parent / "sims" / "recordings" / "amr-perception.mcap"

DETECTION = {
    "title": "robot.Detection",
    "type": "object",
    "properties": {
        "kind": {"type": "string"},
        "where": {
            "type": "object",
            "properties": {"side": {"type": "string"}, "range_m": {"type": "number"}},
        },
        "battery": {"type": "number"},
    },
}
ODOM = {"title": "robot.Odometry", "type": "object"}


def main() -> None:
    rng = random.Random(7)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("wb") as fh:
        w = Writer(fh)
        w.start(profile="", library="example-robot-logger")
        det = w.register_schema("robot.Detection", "jsonschema", json.dumps(DETECTION).encode())
        odo = w.register_schema("robot.Odometry", "jsonschema", json.dumps(ODOM).encode())
        perception = w.register_channel("/robot/perception", "json", det)
        odometry = w.register_channel("/robot/odom", "json", odo)
        t0 = 1_764_547_200_000_000_000  # 2025-12-01T00:00:00Z, in ns
        t = 0.0
        battery = 0.9
        for i in range(300):  # odometry at 5 Hz for 60 s
            msg = {"x": round(i * 0.1, 2), "y": 0.0, "v": 0.8}
            w.add_message(
                odometry, t0 + i * 200_000_000, json.dumps(msg).encode(), t0 + i * 200_000_000
            )
        for i in range(30):
            t += rng.expovariate(1 / 1.8)
            kind = rng.choices(["obstacle", "person", "clear"], [3, 2, 2])[0]
            battery = round(max(battery - 0.02, 0.1), 2)
            where = {
                "side": rng.choice(["left", "right", "front"]),
                "range_m": round(rng.uniform(0.4, 3.0), 2),
            }
            msg = {"kind": kind, "where": where, "battery": battery, "seq": i}
            ns = t0 + int(t * 1e9)
            w.add_message(perception, ns, json.dumps(msg).encode(), ns, sequence=i)
        w.finish()
    print(OUT, OUT.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
