"""ROS 2 message in -> action published, on a tree hit, beside the plain Zenoh bus.

Both paths go through one Zenoh router on loopback (what ``rmw_zenohd`` is to a ROS 2 system)
and both robots are child processes:

* ROS 2: zenoh-ros2-sdk (an rmw_zenoh implementation nobody here wrote) publishes
  ``sensor_msgs/msg/Range`` on ``/front/range`` and subscribes to the agent's
  ``std_msgs/msg/String`` actions; the agent is a :class:`~forethought.runtime.Ros2Bus` node.
* Zenoh: a plain Zenoh session puts the same readings as JSON events on a
  :class:`~forethought.runtime.ZenohBus` agent and subscribes to its actions.

The latency of one event is the robot's wall clock from just before it publishes the reading to
when its subscriber's callback has the action (CDR decoding in the SDK included). Each round
runs both paths, alternating which goes first; the agent (SmolLM2-135M, the embedded model) has
planned every key before the readings start, so each answer is a tree hit -- checked: a round
with any other tier is refused. Writes ``docs/results/ros2.json``; ``scripts/docs_pages.py``
renders the page.

Run: ``.venv/bin/python benchmarks/ros2_latency.py --rounds 5 --count 200``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from forethought.models import TransformersBackend
from forethought.policies import AgentSpec
from forethought.runtime import Agent, AgentConfig, EventBus, Ros2Bus, Ros2Map, ZenohBus
from forethought.testing._ros2_peer import ZenohRouter

OUT = Path(__file__).resolve().parent.parent / "docs" / "results" / "ros2.json"
SPEC = {
    "name": "ros2-bench",
    "description": "You steer a mobile robot. Answer with the safest action.",
    "action": {
        "type": "object",
        "properties": {
            "action": {"enum": ["stop", "slow_down", "continue", "turn_left", "turn_right"]}
        },
        "required": ["action"],
    },
    "default_action": {"action": "stop"},
    "state": {"zone": "aisle"},
    "events": [
        {
            "type": "obstacle",
            "params": {
                "side": ["left", "front", "right"],
                "distance_m": {"min": 0.5, "max": 3.0, "step": 0.5},
            },
            "deadline_ms": 300,
        }
    ],
}
MAP = {
    "topics": {
        "/front/range": {
            "msg_type": "sensor_msgs/msg/Range",
            "event": "obstacle",
            "params": {"side": "header.frame_id", "distance_m": "range"},
        }
    }
}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


WARMUP = 5
"""Readings sent first and left out of the figures (the first puts set the routes up)."""


async def _one(
    kind: str, spec: AgentSpec, backend: TransformersBackend, count: int, interval_ms: float
) -> dict[str, Any]:
    """One path's run: per-event latencies (ms) and the tiers that answered."""
    with ZenohRouter() as router:
        bus: EventBus
        if kind == "ros2":
            bus = Ros2Bus(
                Ros2Map.model_validate(MAP),
                default_action=spec.default_action,
                connect=[router.endpoint],
            )
            flags = []
        else:
            bus = ZenohBus(agent_id="bench", connect=[router.endpoint])
            flags = ["--plain-agent-id", "bench"]
        async with Agent(spec, backend=backend, bus=bus, config=AgentConfig()) as agent:
            await agent.until_covered(1.0, timeout=600)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "forethought.testing._ros2_peer",
                "--router-port", str(router.port), "--count", str(count + WARMUP),
                "--interval-ms", str(interval_ms), "--warmup-s", "2", "--wait-s", "20", *flags,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            out, err = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{kind} peer failed: {err.decode()[-2000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    sent = result["sent"]
    latencies, tiers, met = [], [], 0
    for action in result["actions"]:
        decision = json.loads(action["data"])
        index = int(decision["id"].rsplit("-", 1)[1])
        if index < WARMUP:
            continue
        latencies.append((action["recv_ns"] - sent[index]) / 1e6)
        tiers.append(decision["tier"])
        met += bool(decision["met"])
    return {"latencies": latencies, "tiers": tiers, "met": met, "sent": len(sent) - WARMUP}


async def _bench(rounds: int, count: int, interval_ms: float) -> dict[str, Any]:
    spec = AgentSpec.from_data(SPEC)
    backend = TransformersBackend(model="smollm2-135m", device="cpu", dtype="float32")
    backend.load()
    runs: dict[str, list[dict[str, Any]]] = {"ros2": [], "zenoh": []}
    for r in range(rounds):
        order = ["ros2", "zenoh"] if r % 2 == 0 else ["zenoh", "ros2"]
        for kind in order:
            run = await _one(kind, spec, backend, count, interval_ms)
            if set(run["tiers"]) != {"tree"} or len(run["latencies"]) != count:
                raise SystemExit(f"{kind} round {r}: not all tree hits: {run['tiers']}")
            runs[kind].append(run)
            lat = run["latencies"]
            print(
                f"round {r} {kind}: p50 {statistics.median(lat):.2f} ms, "
                f"p99 {_percentile(lat, 0.99):.2f} ms",
                file=sys.stderr,
            )
    return runs


def _row(name: str, runs: list[dict[str, Any]]) -> list[str]:
    p50s = [statistics.median(r["latencies"]) for r in runs]
    p99s = [_percentile(r["latencies"], 0.99) for r in runs]
    pooled = [x for r in runs for x in r["latencies"]]
    met = sum(r["met"] for r in runs)
    total = sum(r["sent"] for r in runs)
    return [
        name,
        f"{statistics.median(p50s):.2f} ms",
        f"{statistics.median(p99s):.2f} ms",
        f"{max(pooled):.2f} ms",
        f"{met}/{total}",
    ]


def main(argv: list[str] | None = None) -> int:
    """Measure, print, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--machine", default="the project's 2-core CPU VM")
    args = parser.parse_args(argv)
    runs = asyncio.run(_bench(args.rounds, args.count, args.interval_ms))
    ros2, plain = (
        _row("ROS 2 (rmw_zenoh, CDR)", runs["ros2"]),
        _row("Zenoh bus (JSON)", runs["zenoh"]),
    )
    ratio = [
        statistics.median(r["latencies"]) / statistics.median(z["latencies"])
        for r, z in zip(runs["ros2"], runs["zenoh"], strict=True)
    ]
    data = {
        "title": "ROS 2 over rmw_zenoh beside the Zenoh bus",
        "commit": args.commit,
        "date": dt.date.today().isoformat(),
        "machine": args.machine,
        "profile": "none (real time, tree hits, SmolLM2-135M planned every key first)",
        "rounds": args.rounds,
        "command": (
            f"python benchmarks/ros2_latency.py --rounds {args.rounds} --count {args.count} "
            f"--interval-ms {args.interval_ms:g} --commit {args.commit}"
        ),
        "intro": (
            f"{args.count} readings at {1000 / args.interval_ms:g} Hz per path per round (after "
            f"{WARMUP} left out while the routes are set up), "
            "both through one Zenoh router on loopback, both robots child processes. ROS 2: "
            "zenoh-ros2-sdk publishes sensor_msgs/msg/Range and decodes the "
            "std_msgs/msg/String action; Zenoh: a plain session puts the same readings as JSON "
            "events. Latency: the robot's clock from just before publishing to its callback "
            "holding the action. Every answer was a tree hit. p50 and p99 are medians over the "
            "rounds of each round's figure; max is over all events."
        ),
        "notes": (
            "Median per-round ratio ROS 2 / Zenoh p50: "
            f"{statistics.median(ratio):.2f} (rounds: {', '.join(f'{x:.2f}' for x in ratio)}). "
            "The ROS 2 path adds CDR decoding and mapping on the agent and the SDK's Python "
            "CDR encoding and decoding on the robot. Absolute figures carry the machine's "
            "load (its line above); the ratio is side by side."
        ),
        "columns": ["path", "p50", "p99", "max", "met / sent"],
        "rows": [ros2, plain],
    }
    OUT.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(data["rows"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
