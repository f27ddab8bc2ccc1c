"""A real Mosquitto on a free loopback port: what the benchmarks and the tests both start.

Configured as we recommend users configure theirs: ``set_tcp_nodelay true`` (without it the
broker's Nagle adds ~20-40 ms to every small message, as the executor bench measured), and
``max_inflight_messages 0``: Mosquitto before 2.0.15 stops delivering a reconnecting client's
queue when more than ``max_inflight_messages`` (20 by default) of the messages queued for it
have expired (eclipse-mosquitto #2609) -- an agent back from a restart then never gets the
fresh events queued behind its expired backlog. With no broker-side limit, the client's own
Receive Maximum bounds what is in flight.
"""

from __future__ import annotations

import contextlib
import getpass
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from forethought.policies import ConfigError

from ._ports import free_port

__all__ = ["MosquittoBroker", "mosquitto_path"]


def mosquitto_path() -> str | None:
    """The mosquitto executable, if installed."""
    found = shutil.which("mosquitto")
    if found is not None:
        return found
    return "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None


class MosquittoBroker:
    """A Mosquitto of our own on ``127.0.0.1:port``; may be stopped and started again.

    Args:
        port: the port (default: a free one).
        extra_config: more lines for its configuration file (TLS files, a password file,
            an ACL file...).
        anonymous: whether clients may connect without a username.
        scheme: ``mqtt`` or ``mqtts`` (the listener's TLS comes from ``extra_config``).
        persistent: keep sessions, subscriptions and queued QoS 1 messages on disk across
            restarts, saved after every change (``autosave_on_changes``): the closest
            Mosquitto comes to durable, which is still not synchronous with its PUBACK.

    """

    def __init__(
        self,
        *,
        port: int | None = None,
        extra_config: str = "",
        anonymous: bool = True,
        scheme: str = "mqtt",
        persistent: bool = False,
    ) -> None:
        exe = mosquitto_path()
        if exe is None:
            raise ConfigError("mosquitto", None, "not installed (scripts/setup --broker)")
        self._exe = exe
        self.port = port or free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="forethought-mosquitto-")
        self.config = Path(self._dir.name) / "mosquitto.conf"
        self.config.write_text(
            # Started by root, mosquitto drops to user "mosquitto", which cannot read the
            # certificates, password and ACL files in our private temporary directory.
            f"user {getpass.getuser()}\n"
            f"listener {self.port} 127.0.0.1\n"
            f"allow_anonymous {'true' if anonymous else 'false'}\nset_tcp_nodelay true\n"
            "max_inflight_messages 0\n"
            + (
                f"persistence true\npersistence_location {self._dir.name}/\n"
                "autosave_interval 1\nautosave_on_changes true\n"
                # Mosquitto's default keeps 1,000 messages for a client that is away, and
                # drops the rest without a word: an agent restarting for 10 s at 50 Hz and
                # then working off the backlog needs more.
                "max_queued_messages 100000\n"
                if persistent
                else ""
            )
            + extra_config
        )
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 10.0) -> None:
        """Start it and wait until it accepts connections."""
        self._proc = subprocess.Popen(  # noqa: S603 - our own fixed command line
            [self._exe, "-c", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
            ):
                return
            time.sleep(0.02)
        self.stop()
        raise ConfigError("mosquitto", self.port, f"did not start within {timeout_s} s")

    def stop(self) -> None:
        """Kill it (as a crash would) and wait for it to exit."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)  # a frozen broker dies too
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def freeze(self) -> None:
        """Stop it with SIGSTOP: its sockets stay open and it answers nothing."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """Let a frozen broker run again (SIGCONT)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop it and remove its files."""
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
