"""ZenohBus between processes: `forethought run --zenoh` in a child process, this test's own
Zenoh session as the other peer, on an explicit loopback endpoint (no multicast)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from forethought.bench import free_port
from forethought.runtime import zenoh_config

zenoh = pytest.importorskip("zenoh")

pytestmark = pytest.mark.model

SPEC = {
    "name": "zenoh-test",
    "description": "You steer a warehouse robot. Answer with the safest action.",
    "action": {
        "type": "object",
        "properties": {"a": {"enum": ["stop", "slow", "go"]}},
        "required": ["a"],
    },
    "default_action": {"a": "stop"},
    "state": {"zone": "aisle"},
    "events": [
        {"type": "obstacle", "params": {"side": ["left", "right"]}, "deadline_ms": 800},
        {"type": "clear", "deadline_ms": 1000},
    ],
}
AGENT = "zt"


class Peer:
    """This test's Zenoh session, listening where the agent connects."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.session = zenoh.open(zenoh_config(listen=[f"tcp/127.0.0.1:{port}"]))
        self.actions = self.session.declare_subscriber(
            f"forethought/{AGENT}/actions", zenoh.handlers.FifoChannel(4096)
        )
        self.errors = self.session.declare_subscriber(
            f"forethought/{AGENT}/errors", zenoh.handlers.FifoChannel(4096)
        )
        self.alive = self.session.liveliness().declare_subscriber(
            f"forethought/{AGENT}/alive", zenoh.handlers.FifoChannel(64), history=True
        )

    def put(self, kind: str, body: bytes | dict[str, Any]) -> None:
        raw = body if isinstance(body, bytes) else orjson.dumps(body)
        self.session.put(f"forethought/{AGENT}/events/{kind}", raw)

    def liveliness(self, timeout_s: float) -> str:
        """The next liveliness change of the agent: PUT (up) or DELETE (gone)."""
        sample = _recv(self.alive, timeout_s)
        return str(sample.kind).rsplit(".", 1)[-1]

    def close(self) -> None:
        self.session.close()


def _recv(channel: Any, timeout_s: float) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = channel.try_recv()
        if got is not None:
            return got
        time.sleep(0.005)
    raise AssertionError(f"nothing arrived within {timeout_s} s")


def _json(sample: Any) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(sample.payload.to_bytes())
    return data


def _drain(channel: Any) -> list[dict[str, Any]]:
    out = []
    while (got := channel.try_recv()) is not None:
        out.append(_json(got))
    return out


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def _start_agent(
    spec: Path, port: int, model: Path, record: Path | None = None
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "FORETHOUGHT_ZENOH__QUEUE_SIZE": "8",
        "FORETHOUGHT_DEVICE": "cpu",
    }
    cmd = [
        sys.executable, "-m", "forethought._cli", "run", str(spec),
        "--zenoh", f"tcp/127.0.0.1:{port}", "--agent-id", AGENT, "--model", str(model),
    ]  # fmt: skip
    if record is not None:
        cmd += ["--record", str(record)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


@pytest.fixture
def peer() -> Iterator[Peer]:
    p = Peer(free_port())
    yield p
    p.close()


def test_round_trip_decide_bad_input_and_flood(
    peer: Peer, spec_file: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    recording = tmp_path / "run.mcap"
    proc = _start_agent(spec_file, peer.port, tiny_model_dir, record=recording)
    try:
        assert peer.liveliness(120) == "PUT"
        # An event put -> its action on the actions key.
        peer.put("obstacle", {"id": "r1", "type": "obstacle", "params": {"side": "left"}})
        action = _json(_recv(peer.actions, 10))
        assert action["id"] == "r1"
        assert action["action"]["a"] in ("stop", "slow", "go")
        # Request/reply: a get on the decide queryable.
        body = {"id": "q1", "type": "clear", "params": {}}
        replies = list(peer.session.get(f"forethought/{AGENT}/decide", payload=orjson.dumps(body)))
        assert len(replies) == 1
        assert replies[0].ok is not None
        assert orjson.loads(replies[0].ok.payload.to_bytes())["id"] == "q1"
        bad = list(peer.session.get(f"forethought/{AGENT}/decide", payload=b"{not json"))
        assert bad[0].err is not None
        assert "not JSON" in bad[0].err.payload.to_string()
        # Bad input: each a typed error on the errors key, naming the problem; no crash.
        _drain(peer.errors)
        peer.put("obstacle", b"x" * 70_000)
        peer.put("obstacle", b"\xff\xfe\x00")
        peer.put("obstacle", b"[1, 2")
        peer.put("obstacle", {"id": "w1", "type": "obstacle", "params": "left"})
        errors = [_json(_recv(peer.errors, 10)) for _ in range(4)]
        text = " | ".join(e["error"] for e in errors)
        for expected in ("larger than 65536 bytes", "not UTF-8", "not JSON", "params"):
            assert expected in text
        # A flood faster than decisions: bounded queue (8), oldest dropped and counted.
        _drain(peer.actions)
        for i in range(400):
            peer.put("clear", {"id": f"f{i}", "type": "clear", "params": {}})
        time.sleep(3)
        decided = len(_drain(peer.actions))
        assert decided >= 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert peer.liveliness(10) == "DELETE"
        bus = orjson.loads(out.decode().strip().splitlines()[-1])["bus"]
        assert bus["dropped_full"] > 0
        assert bus["malformed"] == 5  # four puts and the malformed query
        assert bus["received"] == 1 + 4 + 400
        assert bus["dropped_full"] + decided == 400
        # `run --record`: what the agent saw and did, read back from the MCAP file.
        from forethought.runtime import read_mcap_json

        messages = list(read_mcap_json(recording))
        decisions = [m.json() for m in messages if m.topic == "/forethought/decisions"]
        events = [m.json() for m in messages if m.topic == "/forethought/events"]
        assert len(decisions) == len(events) == 2 + decided
        assert {"r1", "q1"} <= {d["id"] for d in decisions}
        assert all(d["tier"] in ("tree", "score", "live", "default") for d in decisions)
    finally:
        _stop(proc)


def test_peers_that_disappear_and_come_back(spec_file: Path, tiny_model_dir: Path) -> None:
    port = free_port()
    peer = Peer(port)
    proc = _start_agent(spec_file, port, tiny_model_dir)
    try:
        assert peer.liveliness(120) == "PUT"
        # The agent dies (kill -9): its token goes with it; a new agent comes back.
        _stop(proc)
        assert peer.liveliness(15) == "DELETE"
        proc = _start_agent(spec_file, port, tiny_model_dir)
        assert peer.liveliness(120) == "PUT"
        # This side dies and comes back on the same endpoint: the agent reconnects.
        peer.close()
        time.sleep(0.5)
        peer = Peer(port)
        assert peer.liveliness(30) == "PUT"
        peer.put("clear", {"id": "back", "type": "clear", "params": {}})
        assert _json(_recv(peer.actions, 10))["id"] == "back"
    finally:
        peer.close()
        _stop(proc)
