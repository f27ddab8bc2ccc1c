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
from conftest import Pki
from pydantic import SecretStr
from robot_spec import robot_spec

from forethought.policies import ConfigError
from forethought.runtime import ZenohConfig, ZenohSecurity, stamp_event, zenoh_config
from forethought.testing import free_port, until_holds_blocking

zenoh = pytest.importorskip("zenoh")

pytestmark = pytest.mark.model

SPEC = robot_spec(
    "zenoh-test",
    events=[
        {"type": "obstacle", "params": {"side": ["left", "right"]}, "deadline_ms": 800},
        {"type": "clear", "deadline_ms": 1000},
    ],
    state={"zone": "aisle"},
)
AGENT = "zt"


class Peer:
    """This test's Zenoh session, listening where the agent connects."""

    def __init__(
        self, port: int, *, scheme: str = "tcp", security: ZenohSecurity | None = None
    ) -> None:
        self.port = port
        host = "localhost" if scheme == "tls" else "127.0.0.1"
        self.endpoint = f"{scheme}/{host}:{port}"
        self.session = zenoh.open(zenoh_config(listen=[self.endpoint], security=security))
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
        # BLOCK: Zenoh's default for a put drops a sample when the queue is full (the likeliest
        # reason one loaded run lost a bad-input report after the 70 KB put); input must arrive.
        self.session.put(
            f"forethought/{AGENT}/events/{kind}",
            raw,
            congestion_control=zenoh.CongestionControl.BLOCK,
        )

    def liveliness(self, timeout_s: float) -> str:
        """The next liveliness change of the agent: PUT (up) or DELETE (gone)."""
        sample = _recv(self.alive, timeout_s)
        return str(sample.kind).rsplit(".", 1)[-1]

    def linked(self, timeout_s: float) -> None:
        """Wait until the agent's event subscription is known here: a put now reaches it."""
        publisher = self.session.declare_publisher(f"forethought/{AGENT}/events/clear")
        try:
            until_holds_blocking(
                lambda: publisher.matching_status.matching, timeout_s, "the agent's subscription"
            )
        finally:
            publisher.undeclare()

    def close(self) -> None:
        self.session.close()


def _recv(channel: Any, timeout_s: float) -> Any:
    got: list[Any] = []

    def arrived() -> bool:
        sample = channel.try_recv()
        if sample is not None:
            got.append(sample)
        return bool(got)

    until_holds_blocking(arrived, timeout_s, "a sample")
    return got[0]


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
    spec: Path,
    port: int | str,
    model: Path,
    record: Path | None = None,
    *,
    flags: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    endpoint = port if isinstance(port, str) else f"tcp/127.0.0.1:{port}"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "FORETHOUGHT_ZENOH__QUEUE_SIZE": "8",
        "FORETHOUGHT_DEVICE": "cpu",
        **(env or {}),
    }
    cmd = [
        sys.executable, "-m", "forethought._cli", "run", str(spec),
        "--zenoh", endpoint, "--agent-id", AGENT, "--model", str(model), *flags,
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
        # A query carries no timestamp: it says when it was sent itself.
        body = stamp_event({"id": "q1", "type": "clear", "params": {}})
        replies = list(peer.session.get(f"forethought/{AGENT}/decide", payload=orjson.dumps(body)))
        assert len(replies) == 1
        assert replies[0].ok is not None
        assert orjson.loads(replies[0].ok.payload.to_bytes())["id"] == "q1"
        # Health: what MQTT's retained status says, on a queryable (Zenoh retains nothing).
        (health,) = list(peer.session.get(f"forethought/{AGENT}/health"))
        report = orjson.loads(health.ok.payload.to_bytes())
        assert report["agent"] == AGENT
        assert report["online"] is True
        assert report["status"] in ("starting", "ok", "degraded")
        assert {"counters", "tree", "model", "planner", "bus"} <= set(report)
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
        flood: list[dict[str, Any]] = []

        def every_kept_one_decided() -> bool:
            """An action for each flood event the agent took and did not push out of its queue
            (its health report says how many it pushed out: refreshed every few seconds)."""
            flood.extend(_drain(peer.actions))
            (health,) = list(peer.session.get(f"forethought/{AGENT}/health"))
            bus = orjson.loads(health.ok.payload.to_bytes())["bus"]
            return bus["received"] == 1 + 4 + 400 and len(flood) == 400 - bus["dropped_full"]

        until_holds_blocking(
            every_kept_one_decided, 60, "an action for every event kept", every_s=0.1
        )
        decided = len(flood)
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
        from forethought.runtime._recorder import read_mcap_json

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
        peer = Peer(port)  # listening again at once on the same port (address reuse)
        assert peer.liveliness(30) == "PUT"
        peer.linked(30)
        peer.put("clear", {"id": "back", "type": "clear", "params": {}})
        assert _json(_recv(peer.actions, 10))["id"] == "back"
    finally:
        peer.close()
        _stop(proc)


AGENT_PW, SOURCE_PW, WRONG_PW = "zen-agent-pw-71", "zen-source-pw-72", "zen-wrong-pw-73"


def test_tls_with_passwords(
    pki: Pki, spec_file: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A ``tls/`` peer that checks user/password: the agent works with the right CA and
    password; a wrong password or an untrusted CA ends the start with one error line; a
    session without credentials cannot make the agent act; no secret is ever printed."""
    users = tmp_path / "users"
    users.write_text(f"agent:{AGENT_PW}\nsource:{SOURCE_PW}\n")
    users.chmod(0o600)
    source = ZenohSecurity(
        cert_file=pki.cert,
        key_file=pki.key,
        users_file=users,
        username="source",
        password=SecretStr(SOURCE_PW),
    )
    peer = Peer(free_port(), scheme="tls", security=source)
    outputs: list[bytes] = []
    ca = ("--zenoh-ca", str(pki.ca), "--zenoh-user", "agent")
    proc = _start_agent(
        spec_file, peer.endpoint, tiny_model_dir, flags=ca,
        env={"FORETHOUGHT_ZENOH__PASSWORD": AGENT_PW},
    )  # fmt: skip
    try:
        assert peer.liveliness(120) == "PUT"
        peer.put("obstacle", {"id": "s1", "type": "obstacle", "params": {"side": "left"}})
        assert _json(_recv(peer.actions, 10))["id"] == "s1"
        # A session that is not in the users file is refused by the peer: nothing it puts
        # reaches the agent (it does not get in at all).
        intruder = ZenohSecurity(
            ca_file=pki.ca, username="source", password=SecretStr(WRONG_PW), connect_timeout_s=0
        )
        with zenoh.open(zenoh_config(connect=[peer.endpoint], security=intruder)) as session:
            time.sleep(1.0)
            assert list(session.info.peers_zid()) == []
            session.put(f"forethought/{AGENT}/events/obstacle", orjson.dumps(
                {"id": "evil", "type": "obstacle", "params": {"side": "left"}}
            ))  # fmt: skip
            # Still no link: the put had nowhere to go, and cannot arrive later.
            assert list(session.info.peers_zid()) == []
        assert "evil" not in {a["id"] for a in _drain(peer.actions)}
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        outputs += [out, err]
        assert proc.returncode == 0, err.decode()[-2000:]
        # A wrong password, then a CA that did not sign the peer's certificate: each start ends
        # within seconds of the bus opening with exit code 2 and one error line.
        for flags, password in (
            (ca, WRONG_PW),
            (("--zenoh-ca", str(pki.rogue_ca), "--zenoh-user", "agent"), AGENT_PW),
        ):
            bad = _start_agent(
                spec_file, peer.endpoint, tiny_model_dir, flags=flags,
                env={"FORETHOUGHT_ZENOH__PASSWORD": password},
            )  # fmt: skip
            out, err = bad.communicate(timeout=120)
            outputs += [out, err]
            errors = [ln for ln in err.decode().splitlines() if ln.startswith("error:")]
            assert bad.returncode == 2, err.decode()[-2000:]
            assert len(errors) == 1
            assert "no peer accepted the connection within 5 s" in errors[0]
            assert "refused the username or password" in errors[0]
            assert "Traceback" not in err.decode()
    finally:
        peer.close()
        _stop(proc)
    printed = b"".join(outputs)
    for secret in (AGENT_PW, SOURCE_PW, WRONG_PW):
        assert secret.encode() not in printed


def test_security_settings_name_the_field(pki: Pki, tmp_path: Path) -> None:
    """Settings that cannot work are refused before anything opens; the password stays out
    of every repr."""
    with pytest.raises(ConfigError, match=r"zenoh\.ca_file"):
        zenoh_config(connect=["tls/localhost:7447"], security=ZenohSecurity())
    with pytest.raises(ConfigError, match=r"zenoh\.cert_file"):
        zenoh_config(listen=["tls/localhost:7447"], security=ZenohSecurity(ca_file=pki.ca))
    with pytest.raises(ConfigError, match=r"zenoh\.username"):
        ZenohSecurity(password=SecretStr("x"))
    with pytest.raises(ConfigError, match=r"zenoh\.mtls"):
        ZenohSecurity(ca_file=pki.ca, mtls=True)
    secret_file = tmp_path / "pw"
    secret_file.write_text("from-a-file-99\n")
    cfg = ZenohConfig(username="agent", password_file=secret_file)
    sec = cfg.security()
    assert sec.password is not None
    assert sec.password.get_secret_value() == "from-a-file-99"
    assert "from-a-file-99" not in repr(sec) + repr(cfg)
    both = ZenohConfig(username="a", password=SecretStr("p"), password_file=secret_file)
    with pytest.raises(ConfigError, match=r"zenoh\.password_file"):
        both.security()
    # Without TLS or credentials the agent starts without waiting for a peer; with them, the
    # first connection is required (5 s unless set).
    assert ZenohSecurity().first_connect_timeout() is None
    assert ZenohSecurity(ca_file=pki.ca).first_connect_timeout() == 5.0
    assert ZenohSecurity(ca_file=pki.ca, connect_timeout_s=0).first_connect_timeout() is None
