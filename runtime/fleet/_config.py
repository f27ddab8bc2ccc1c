"""Fleet settings and security: where the fleet's NATS nodes are, who we are, what we may do.

Whoever can write the fleet's tree can make every robot act, so a production fleet runs NATS
with TLS and one user per role. :class:`FleetConfig` holds what a connection needs (the server
URLs, a user and a password kept as a ``SecretStr``, or a ``.creds`` file; a CA and, for mutual
TLS, a client certificate), and :func:`fleet_permissions` writes the server side: the
permissions block a ``nats-server`` user of each role gets.

* an **agent** may read the tree (watch its bucket) and publish its own state, events and
  offers (branches it planned while cut off), and nothing else: its credential is refused when
  it writes a branch;
* a **planner** may read and write the tree and its claims, and read every robot's demand.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from forethought.policies import ConfigError

__all__ = ["FleetConfig", "FleetNames", "fleet_permissions", "parse_fleet_urls"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,48}$")


def parse_fleet_urls(url: str) -> list[str]:
    """``nats://h1:4222,nats://h2:4222`` (or ``tls://``) -> the server list, each checked."""
    servers = [u.strip() for u in url.split(",") if u.strip()]
    if not servers:
        raise ConfigError("fleet.url", url, "expected nats://host:port (comma-separated)")
    for server in servers:
        parts = urlsplit(server)
        if parts.scheme not in ("nats", "tls") or not parts.hostname:
            raise ConfigError(
                "fleet.url", server, "expected nats://host:port or tls://host:port per server"
            )
        if parts.username or parts.password:
            raise ConfigError(
                "fleet.url",
                f"{parts.scheme}://{parts.hostname}",
                "credentials do not go in the URL (use fleet.user and fleet.password_file, "
                "FORETHOUGHT_FLEET__PASSWORD, or fleet.creds_file)",
            )
    return servers


class FleetNames:
    """The bucket, stream and subject names of one fleet (one place that spells them)."""

    def __init__(self, fleet: str) -> None:
        if not _NAME.match(fleet):
            raise ConfigError("fleet.name", fleet, "use 1-48 letters, digits, '-' or '_'")
        self.fleet = fleet
        self.tree = f"ft-{fleet}-tree"
        """The key-value bucket of branches."""
        self.claims = f"ft-{fleet}-claims"
        """The key-value bucket of claims (entries expire: a crashed worker's claims lapse)."""
        self.demand = f"FT_{fleet.replace('-', '_')}_DEMAND"
        """The stream of robots' states, events and offers."""
        self.offers_consumer = f"ft-{fleet}-offers"

    def state_subject(self, robot: str) -> str:
        """Where ``robot`` publishes its state."""
        return f"ft.{self.fleet}.state.{robot}"

    def event_subject(self, robot: str) -> str:
        """Where ``robot`` publishes the keys of its events."""
        return f"ft.{self.fleet}.event.{robot}"

    def offer_subject(self, robot: str) -> str:
        """Where ``robot`` offers the branches it planned while cut off."""
        return f"ft.{self.fleet}.offer.{robot}"

    @property
    def demand_subjects(self) -> list[str]:
        """Every subject of the demand stream."""
        return [f"ft.{self.fleet}.{kind}.*" for kind in ("state", "event", "offer")]


class FleetConfig(BaseModel):
    """How an agent or planner worker joins a fleet (``forethought run|plan --fleet``).

    The password is a secret: set it with ``FORETHOUGHT_FLEET__PASSWORD`` or ``password_file``
    (never on a command line); it is never logged and never shown in a ``repr``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = None
    """``nats://host:port`` (``tls://`` for TLS), several separated by commas; None: no fleet."""
    name: str = "default"
    """The fleet: its bucket is ``ft-<name>-tree``."""
    robot: str = "robot"
    """This agent's id in the fleet (its subjects end in it)."""
    replicas: int = Field(default=3, ge=1, le=5)
    """Copies of the tree kept by the cluster (the planner creates the buckets with it)."""
    claim_ttl_s: float = Field(default=30.0, gt=0)
    """How long a worker's claim on a branch lasts: a crashed worker's claims lapse after it."""
    demand_max_age_s: float = Field(default=600.0, gt=0)
    """How long robots' states and events stay in the demand stream."""
    user: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    """A file holding the password (its first line); read when the connection opens."""
    creds_file: Path | None = None
    """A NATS ``.creds`` file (JWT and nkey seed) instead of a user and password."""
    ca_file: Path | None = None
    """The CA that signs the servers' certificates (with ``tls://`` URLs)."""
    cert_file: Path | None = None
    """This client's certificate, for mutual TLS (with ``key_file``)."""
    key_file: Path | None = None

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str | None) -> str | None:
        if url is not None:
            parse_fleet_urls(url)
        return url

    @field_validator("robot")
    @classmethod
    def _check_robot(cls, robot: str) -> str:
        if not _NAME.match(robot):
            raise ValueError(f"robot id {robot!r}: use 1-48 letters, digits, '-' or '_'")
        return robot

    @property
    def names(self) -> FleetNames:
        """The fleet's bucket, stream and subject names."""
        return FleetNames(self.name)

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect`` (reads ``password_file``)."""
        if self.url is None:
            raise ConfigError("fleet.url", None, "set it to the fleet's nats:// URL")
        options: dict[str, Any] = {"servers": parse_fleet_urls(self.url)}
        password = self.password
        if self.password_file is not None:
            if password is not None:
                raise ConfigError(
                    "fleet.password_file", str(self.password_file), "set a password or a file"
                )
            try:
                lines = self.password_file.read_text().splitlines()
            except OSError as exc:
                raise ConfigError(
                    "fleet.password_file", str(self.password_file), f"unreadable ({exc})"
                ) from None
            password = SecretStr(lines[0] if lines else "")
        if self.user is not None:
            options["user"] = self.user
            options["password"] = password.get_secret_value() if password else ""
        elif password is not None:
            raise ConfigError("fleet.user", None, "a password needs a user")
        if self.creds_file is not None:
            options["user_credentials"] = str(self.creds_file)
        tls = self.ca_file is not None or any(u.startswith("tls://") for u in options["servers"])
        if tls:
            context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
            if self.cert_file is not None:
                if self.key_file is None:
                    raise ConfigError("fleet.key_file", None, "a client certificate needs its key")
                context.load_cert_chain(str(self.cert_file), str(self.key_file))
            options["tls"] = context
        return options


def fleet_permissions(
    fleet: str, role: Literal["agent", "planner"], robot: str | None = None
) -> dict[str, Any]:
    """The ``permissions`` block of a nats-server user of ``role`` in ``fleet``.

    An agent's (``robot`` required) allows only what watching the tree needs (reading the
    bucket's stream through its own consumers) and publishing on its own three subjects; a
    write to the tree's ``$KV`` subjects is denied outright. A planner's allows the fleet's
    buckets, the demand stream and the JetStream API.
    """
    names = FleetNames(fleet)
    inbox = {"allow": ["_INBOX.>"]}
    if role == "planner":
        return {
            "publish": {"allow": ["$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "_INBOX.>"]},
            "subscribe": {"allow": ["_INBOX.>", "$KV.>", f"ft.{fleet}.>"]},
        }
    if robot is None:
        raise ConfigError("fleet.robot", None, "an agent's permissions name its robot")
    stream = f"KV_{names.tree}"
    return {
        "publish": {
            "allow": [
                "$JS.API.INFO",
                f"$JS.API.STREAM.INFO.{stream}",
                f"$JS.API.CONSUMER.CREATE.{stream}",
                f"$JS.API.CONSUMER.CREATE.{stream}.>",
                f"$JS.API.CONSUMER.INFO.{stream}.>",
                f"$JS.API.CONSUMER.DELETE.{stream}.>",
                f"$JS.API.DIRECT.GET.{stream}.>",
                f"$JS.API.STREAM.MSG.GET.{stream}",
                f"$JS.FC.{stream}.>",
                f"$JS.API.STREAM.INFO.{names.demand}",
                names.state_subject(robot),
                names.event_subject(robot),
                names.offer_subject(robot),
            ],
            "deny": [f"$KV.{names.tree}.>", f"$KV.{names.claims}.>"],
        },
        "subscribe": inbox,
    }
