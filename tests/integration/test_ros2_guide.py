"""The ROS 2 guide's commands, run as the guide gives them.

The bash blocks under "A recording" and "A live robot" in docs/guides/ros2.md: ``check`` on the
shipped scenario, two replays of the shipped rosbag2 recording (one writing a ROS 2 MCAP, read
back here), and ``forethought run --ros2`` joined by zenoh-ros2-sdk's robot. Only the output
file (a temporary one) and the router (a free port, given with ``--zenoh``) change, and
``forethought`` runs as this interpreter's module.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rosbags")
zenoh = pytest.importorskip("zenoh")
pytest.importorskip("zenoh_ros2_sdk")

from mcap.reader import make_reader  # noqa: E402

from forethought.testing import until_holds_blocking  # noqa: E402
from forethought.testing._ros2_peer import ZenohRouter  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.smollm2]

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "ros2.md"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def guide_commands(section: str) -> list[list[str]]:
    """The ``forethought`` commands of the first bash block under ``## <section>``."""
    text = GUIDE.read_text().split(f"## {section}\n", 1)[1]
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line) for line in joined.splitlines() if line.startswith("forethought ")]


def _cli(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "forethought._cli", *args[1:]]


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli(args), cwd=ROOT, capture_output=True, text=True, env=ENV, timeout=timeout_s,
        check=False,
    )  # fmt: skip


@pytest.mark.timeout(1800)  # two replays on SmolLM2 (each loads it): minutes on 2 loaded cores
def test_the_recording_commands_run_as_written(tmp_path: Path) -> None:
    check, sim_record, sim_bag = guide_commands("A recording")
    out = _run(check, 120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ros2-range.yaml: ok: 0 errors" in out.stdout
    record = tmp_path / "ros2-decisions.mcap"
    args = [str(record) if a == "ros2-decisions.mcap" else a for a in sim_record]
    out = _run(args, 900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "ROS 2 CDR on /forethought/action/*" in out.stdout
    with record.open("rb") as fh:
        summary = make_reader(fh).get_summary()
    assert summary is not None
    (channel,) = summary.channels.values()
    assert channel.topic == "/forethought/action/tree"
    assert summary.schemas[channel.schema_id].name == "std_msgs/msg/String"
    assert summary.statistics is not None
    assert summary.statistics.message_count == 40  # one decision per Range reading
    out = _run(sim_bag, 900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "ros2-range" in out.stdout


@pytest.mark.timeout(1200)  # an agent's start is minutes on a loaded 2-core machine
def test_the_live_command_joins_a_ros2_graph(tmp_path: Path) -> None:
    (run,) = guide_commands("A live robot")
    log = tmp_path / "agent.log"
    with ZenohRouter() as router, log.open("w") as out:
        agent = subprocess.Popen(
            [*_cli(run), "--zenoh", router.endpoint],
            cwd=ROOT, env=ENV, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            config = zenoh.Config()
            config.insert_json5("connect/endpoints", json.dumps([router.endpoint]))
            config.insert_json5("scouting/multicast/enabled", "false")
            observer = zenoh.open(config)
            tokens: list[str] = []

            def in_the_graph() -> bool:
                """The agent's four tokens are seen (or it has ended: the asserts say why)."""
                if agent.poll() is not None:
                    return True
                replies = observer.liveliness().get("@ros2_lv/0/**", timeout=2.0)
                tokens[:] = [str(r.ok.key_expr) for r in replies if r.ok is not None]
                return len(tokens) == 4

            with contextlib.suppress(AssertionError):  # the asserts below say what is missing
                until_holds_blocking(in_the_graph, 600, "the agent's tokens", every_s=1.0)
            observer.close()
            assert agent.poll() is None, log.read_text()[-3000:]
            # what `ros2 node list` and `ros2 topic info` read: the node, two subscriptions,
            # the action publisher
            assert sorted(t.split("/")[5] for t in tokens) == ["MP", "MS", "MS", "NN"], tokens
            assert any(t.endswith("/NN/%/%/forethought") for t in tokens)
            # In the graph, the agent answers each reading in time: from its tree or the default.
            peer = subprocess.run(
                [sys.executable, "-m", "forethought.testing._ros2_peer",
                 "--router-port", str(router.port), "--count", "5", "--warmup-s", "2"],
                capture_output=True, text=True, env=ENV, timeout=120, check=False,
            )  # fmt: skip
            assert peer.returncode == 0, peer.stderr[-2000:]
            result = json.loads(peer.stdout.strip().splitlines()[-1])
            decisions = [json.loads(a["data"]) for a in result["actions"]]
            assert len(decisions) == 5
            actions = {"stop", "slow_down", "continue", "turn_left", "turn_right"}
            assert all(d["action"]["action"] in actions for d in decisions)
        finally:
            agent.send_signal(signal.SIGINT)
            try:
                agent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
    assert agent.returncode == 0
