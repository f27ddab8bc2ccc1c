"""Zenoh security: TLS endpoints, user/password authentication, and a start that says so.

Zenoh carries TLS as a link protocol (``tls/host:port`` endpoints) and authenticates sessions
with a username and password checked against the listening side's dictionary file.
:class:`ZenohSecurity` holds what one session presents and verifies and writes it into a
``zenoh.Config``:

* the CA that signs the peers' certificates (``root_ca_certificate``); a listener's own
  certificate and key; mutual TLS (``enable_mtls``) with this side's certificate and key;
  the peer's name checked against its certificate unless told otherwise;
* ``user``/``password`` (a ``SecretStr``: never logged, never in a ``repr``) and, for a side
  that accepts sessions, the dictionary of users it lets in.

Zenoh retries links on its own and, by default, opens a session even when no peer answers:
a wrong password or an untrusted certificate would then look exactly like a peer that has not
started yet. So where credentials or TLS are configured the first connection is required
within :attr:`ZenohSecurity.connect_timeout_s`; failing it ends the start with one error.
Zenoh does not tell its caller *why* a handshake failed, so the error names the possible
causes instead of guessing one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from forethought.policies import ConfigError

__all__ = ["ZenohSecurity"]


@dataclass(frozen=True, slots=True)
class ZenohSecurity:
    """What a Zenoh session presents and verifies.

    Args:
        ca_file: the CA that signs the peers' TLS certificates (needed for ``tls/`` connects).
        cert_file, key_file: this side's certificate and key: a ``tls/`` listener's, and what
            it presents when ``mtls`` is on.
        mtls: mutual TLS: each side verifies the other's certificate.
        verify_name: check the peer's name against its certificate (off only for a lab).
        username: the user this session authenticates as (None: no authentication).
        password: its password, a secret (never in logs, reports or reprs).
        users_file: for a side that listens: ``user:password`` lines of who may connect.
        connect_timeout_s: how long the first connection may take before the start fails
            (None: 5 s where TLS or credentials are set, else do not wait for a peer).

    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    mtls: bool = False
    verify_name: bool = True
    username: str | None = None
    password: SecretStr | None = field(default=None, repr=False)
    users_file: Path | None = None
    connect_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError(
                "zenoh.cert_file", str(self.cert_file), "give cert_file and key_file together"
            )
        if self.mtls and self.cert_file is None:
            raise ConfigError("zenoh.mtls", True, "mutual TLS needs cert_file and key_file")
        if (self.username is None) != (self.password is None):
            raise ConfigError(
                "zenoh.username", self.username, "give a username and a password together"
            )
        for name in ("ca_file", "cert_file", "key_file", "users_file"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"zenoh.{name}", str(path), "no such file")
        if self.connect_timeout_s is not None and self.connect_timeout_s < 0:
            raise ConfigError(
                "zenoh.connect_timeout_s", self.connect_timeout_s, "must be 0 or more"
            )

    @property
    def configured(self) -> bool:
        """True when TLS material or credentials are set."""
        return any(
            v is not None for v in (self.ca_file, self.cert_file, self.username, self.users_file)
        )

    def first_connect_timeout(self) -> float | None:
        """Seconds the first connection may take, or None to open without waiting for one."""
        if self.connect_timeout_s is not None:
            return self.connect_timeout_s or None
        return 5.0 if self.configured else None

    def check_endpoints(self, connect: Sequence[str], listen: Sequence[str]) -> None:
        """Refuse ``tls/`` endpoints that cannot work with these settings."""
        if any(e.startswith("tls/") for e in connect) and self.ca_file is None:
            raise ConfigError(
                "zenoh.ca_file", None, "a tls/ endpoint to connect to needs the CA of its peer"
            )
        tls_listen = [e for e in listen if e.startswith("tls/")]
        if tls_listen and self.cert_file is None:
            raise ConfigError(
                "zenoh.cert_file", tls_listen[0], "a tls/ listener needs cert_file and key_file"
            )

    def apply(self, config: Any, connect: Sequence[str], listen: Sequence[str]) -> None:
        """Write these settings into ``config`` (a ``zenoh.Config``)."""
        self.check_endpoints(connect, listen)
        tls = "transport/link/tls/"

        def put(key: str, value: object) -> None:
            config.insert_json5(key, json.dumps(value))

        if self.ca_file is not None:
            put(tls + "root_ca_certificate", str(self.ca_file))
        if self.cert_file is not None and self.key_file is not None:
            put(tls + "listen_certificate", str(self.cert_file))
            put(tls + "listen_private_key", str(self.key_file))
            if self.mtls:
                put(tls + "connect_certificate", str(self.cert_file))
                put(tls + "connect_private_key", str(self.key_file))
        put(tls + "enable_mtls", self.mtls)
        put(tls + "verify_name_on_connect", self.verify_name)
        if self.username is not None and self.password is not None:
            put("transport/auth/usrpwd/user", self.username)
            put("transport/auth/usrpwd/password", self.password.get_secret_value())
        if self.users_file is not None:
            put("transport/auth/usrpwd/dictionary_file", str(self.users_file))
        timeout = self.first_connect_timeout()
        if connect and timeout is not None:
            put("connect/timeout_ms", int(timeout * 1000))
            put("connect/exit_on_failure", True)

    def explain(self, connect: Sequence[str], detail: str) -> str:
        """One line on why opening failed, for the error the start ends with."""
        if connect and "Unable to connect" in detail:
            timeout = self.first_connect_timeout()
            causes = ["the peer is not running or not reachable"]
            if any(e.startswith("tls/") for e in connect):
                causes.append("its TLS certificate is not signed by zenoh.ca_file or names "
                              "another host")  # fmt: skip
            if self.username is not None:
                causes.append("it refused the username or password")
            return (
                f"no peer accepted the connection within {timeout:g} s: "
                f"{'; or '.join(causes)} (Zenoh does not say which)"
            )
        return detail
