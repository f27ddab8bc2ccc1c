"""Agent configuration: one pydantic model, read from a TOML file and the environment.

Precedence, highest first: keyword arguments, ``FORETHOUGHT_*`` environment variables
(nested with ``__``, e.g. ``FORETHOUGHT_PLANNER__BATCH_SIZE=4``), the TOML file, defaults.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from forethought.models import DEFAULT_MODEL
from forethought.planner import PlannerConfig
from forethought.policies import ConfigError
from forethought.policies.internals import first_problem

from ._executor import ExecutorConfig
from ._freshness import EventsConfig
from ._health import HealthConfig
from .fleet import FleetConfig
from .transports._mqtt_security import MqttSecurity
from .transports._zenoh_security import ZenohSecurity

__all__ = [
    "AgentConfig",
    "EngineConfig",
    "MqttConfig",
    "ServerConfig",
    "WatchdogConfig",
    "ZenohConfig",
]


class MqttConfig(BaseModel):
    """MQTT bus settings (used by ``forethought run`` and ``forethought send``).

    The password is a secret: set it with ``FORETHOUGHT_MQTT__PASSWORD`` or ``password_file``
    (never on a command line); it is never logged and never shown in a ``repr``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = None
    """``mqtt://host:port`` or ``mqtts://host:port`` (TLS; 8883 by default)."""
    agent_id: str = "agent"
    events_filter: str | None = None
    max_payload_bytes: int = Field(default=65_536, ge=64)
    queue_size: int = Field(default=256, ge=1)
    keepalive: int = Field(default=10, ge=1, le=65_535)
    """Seconds between pings when idle: a frozen broker is noticed within about twice this."""
    session_expiry_s: int = Field(default=300, ge=0)
    """How long the broker keeps our session (subscription, queued QoS 1 events) after a
    lost connection (0: a clean session on every connection)."""
    outbox_size: int = Field(default=1024, ge=1)
    """The most decisions waiting for the broker's handshake (held through an outage)."""
    actions_qos: Literal[1, 2] = 1
    """QoS of the actions topic. Delivery is at least once either way (a broker crash can
    deliver a decision twice: act once per the action's id); 2 only widens what a broker
    that answers before saving (Mosquitto) can lose -- see :class:`MqttBus`."""
    connect_timeout_s: float = Field(default=10.0, ge=0)
    """``forethought run``: how long the first connection may take before the command ends
    with an error (0: keep retrying, saying so once). The agent says ready once connected."""
    resend_window_s: float = Field(default=0.5, ge=0)
    """Decisions completed this long before the broker was last heard, or since, are published
    again once a lost connection is back: it may have restarted without them (0: never).
    0.5 s: 3.5 x the longest gap between a lost decision's completion and the kill seen in R3
    under load (141 ms); each outage sends again what completed in it (25 decisions at 50 Hz).
    Refusals on the errors topic are sent again the same way."""
    replay_s: float = Field(default=10.0, ge=0)
    """When the broker comes back without our session (its CONNACK says so: restarted without
    persistence, or the session expired), it lost all it held -- for subscribers away at the
    time too: decisions and refusals completed this long before are published again, save
    decisions past their deadline (0: never). 10 s: ``forethought send``'s default wait."""
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    """A file holding the password (its first line); read when the agent starts."""
    ca_file: Path | None = None
    """The CA that signs the broker's certificate (None: the system's trust store)."""
    cert_file: Path | None = None
    """This client's certificate, for mutual TLS (with ``key_file``)."""
    key_file: Path | None = None
    insecure: bool = False
    """Skip certificate and hostname verification: for a lab only, and warned about loudly."""

    def security(self) -> MqttSecurity:
        """The connection's credentials and TLS settings (reads ``password_file``)."""
        password = self.password
        if self.password_file is not None:
            if password is not None:
                raise ConfigError(
                    "mqtt.password_file", str(self.password_file), "give a password or a file"
                )
            password = _first_line("mqtt.password_file", self.password_file)
        return MqttSecurity(
            username=self.username,
            password=password,
            ca_file=self.ca_file,
            cert_file=self.cert_file,
            key_file=self.key_file,
            insecure=self.insecure,
        )


class ZenohConfig(BaseModel):
    """Zenoh bus settings (``forethought run --zenoh``; needs ``forethought[zenoh]``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connect: list[str] = Field(default_factory=list)
    """Endpoints to connect to, e.g. ``tcp/127.0.0.1:7447``."""
    listen: list[str] = Field(default_factory=list)
    """Endpoints to listen on."""
    mode: str = "peer"
    multicast: bool = False
    """Discover peers by multicast scouting (off: the endpoints above only)."""
    agent_id: str = "agent"
    max_payload_bytes: int = Field(default=65_536, ge=64)
    queue_size: int = Field(default=256, ge=1)
    ca_file: Path | None = None
    """The CA that signs the peers' certificates (for ``tls/`` endpoints)."""
    cert_file: Path | None = None
    """This side's certificate: a ``tls/`` listener's, and the client one with ``mtls``."""
    key_file: Path | None = None
    mtls: bool = False
    """Mutual TLS: peers verify each other's certificates."""
    verify_name: bool = True
    """Check a peer's name against its certificate (off only for a lab)."""
    username: str | None = None
    password: SecretStr | None = None
    """A secret: ``FORETHOUGHT_ZENOH__PASSWORD`` or ``password_file``, never a command line."""
    password_file: Path | None = None
    users_file: Path | None = None
    """For a listening agent: ``user:password`` lines of the peers it lets in."""
    connect_timeout_s: float | None = Field(default=None, ge=0)
    """How long the first connection may take before the start fails (None: 5 s where TLS
    or credentials are set, else the agent starts without waiting for a peer; 0: never wait)."""

    def security(self) -> ZenohSecurity:
        """The session's TLS settings and credentials (reads ``password_file``)."""
        password = self.password
        if self.password_file is not None:
            if password is not None:
                raise ConfigError(
                    "zenoh.password_file", str(self.password_file), "give a password or a file"
                )
            password = _first_line("zenoh.password_file", self.password_file)
        # The settings carry the same names as ZenohSecurity's fields (tested).
        shared = {f.name for f in dataclasses.fields(ZenohSecurity)} - {"password"}
        return ZenohSecurity(password=password, **{k: getattr(self, k) for k in shared})


def _first_line(field: str, path: Path, *, strip: bool = False) -> SecretStr:
    """The first line of a secret's file (a password as it is; a key ``strip``ped)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(field, str(path), f"cannot read: {exc.strerror}") from None
    first = lines[0] if lines else ""
    return SecretStr(first.strip() if strip else first)


class WatchdogConfig(BaseModel):
    """The stall watchdog (a thread that answers while the loop stalls): off unless enabled."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = False
    stall_ms: float = Field(default=100.0, gt=0)
    """How long without a heartbeat of the event loop counts as a stall."""
    guard_ms: float = Field(default=20.0, ge=0)
    """During a stall, how long before an event's deadline its default goes out."""


class EngineConfig(BaseModel):
    """Which engine runs a local model, and the managed llama-server's shape.

    ``kind``: ``auto`` (the managed llama.cpp server for a GGUF on a machine without CUDA when
    its build exists, else the torch decoder), ``llama-server`` (that server, or an error naming
    the command that builds it), ``torch`` (the in-process decoder). A server URL as the model
    uses neither: the server is someone else's.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["auto", "llama-server", "torch"] = "auto"
    slots: int = Field(default=8, ge=1, le=64)
    """The managed server's parallel slots (``--parallel``): a planner batch decodes together
    in them, so at least the planner's ``batch_size``."""
    context: int = Field(default=8192, ge=512)
    """The managed server's total context (``-c``), shared by its slots."""
    threads: int | None = Field(default=None, ge=1)
    """Its decoding threads (None: llama.cpp's default, one per core)."""


class ServerConfig(BaseModel):
    """How to reach an inference server named as a model (``http://host:port[/v1]``).

    The API key is a secret: ``FORETHOUGHT_SERVER__API_KEY`` or ``api_key_file``, never a
    command line; it goes out only as an ``Authorization: Bearer`` header.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    """A file holding the key (its first line); read when the agent starts."""
    ca_file: Path | None = None
    """The CA that signs an ``https`` server's certificate (None: the system's trust store)."""
    timeout_s: float = Field(default=60.0, gt=0)
    """The longest a request with no deadline (planner work) may take."""
    poll_s: float = Field(default=1.0, ge=0)
    """How often the server's slots are read for the queue term (0: never)."""

    def key(self) -> SecretStr | None:
        """The API key, from the setting or the file."""
        if self.api_key_file is None:
            return self.api_key
        if self.api_key is not None:
            raise ConfigError("server.api_key_file", str(self.api_key_file), "give a key or a file")
        return _first_line("server.api_key_file", self.api_key_file, strip=True)


class AgentConfig(BaseSettings):
    """Everything about how an agent runs (what it decides about is the spec)."""

    model_config = SettingsConfigDict(
        env_prefix="FORETHOUGHT_", env_nested_delimiter="__", extra="forbid", frozen=True
    )
    _toml_file: ClassVar[Path | None] = None
    _read_env: ClassVar[bool] = True

    model: str = DEFAULT_MODEL
    """The model of both the planner and the live tiers: an alias, a directory, a ``.gguf``, or
    an inference server's URL (``http://gpu-box:8000/v1#model=qwen2.5-7b``)."""
    planner_model: str | None = None
    """The planner's own model (None: ``model``): say, a large model on a server, whose latency
    the planner affords in idle time."""
    live_model: str | None = None
    """The live tiers' own model (None: ``model``): say, the small in-process one."""
    device: str = "auto"
    dtype: str = "auto"
    grammar: str = "llguidance"
    model_process: bool = False
    """Run the model in a worker process instead of a thread of this one. Measured on our
    2-core CPU with the planner generating, the thread kept the better executor tail
    (tree-hit p99.9 0.7-1.3 ms vs 1.3-5.6 ms) and equal MQTT round trips: see the docs'
    design decisions."""
    engine: EngineConfig = Field(default_factory=EngineConfig)
    """Which engine runs a local model (not a server URL): ``engine.kind`` and its shape."""
    tree_max_nodes: int = Field(default=10_000, ge=1)
    snapshot: Path | None = None
    snapshot_interval_s: float = Field(default=60.0, ge=0)
    """With ``snapshot``: how often a changed tree is saved while running (0: only at exit),
    so an agent killed without warning restarts from a recent tree."""
    """Where the policy tree is saved at shutdown and reloaded at start (None: not kept)."""
    max_state_bytes: int = Field(default=16_384, ge=2)
    max_concurrent: int = Field(default=64, ge=1)
    """Events decided at once; past this the agent stops taking events from its bus, whose
    bounded queue then drops the oldest (real back-pressure, counted by the bus)."""
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    planner: PlannerConfig = Field(default_factory=PlannerConfig)
    mqtt: MqttConfig = Field(default_factory=MqttConfig)
    zenoh: ZenohConfig = Field(default_factory=ZenohConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    """The fleet whose shared tree this agent reads (``fleet.url`` None: it plans alone)."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    events: EventsConfig = Field(default_factory=EventsConfig)
    """How old an event may be, and what happens to one whose age is unknown."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment, then the TOML file."""
        sources: list[PydanticBaseSettingsSource] = [init_settings]
        if cls._read_env:
            sources.append(env_settings)
        if cls._toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls._toml_file))
        return tuple(sources)

    @classmethod
    def defaults(cls, **overrides: Any) -> AgentConfig:
        """The defaults and ``overrides`` only: reads neither the environment nor a file."""
        bound = type("AgentConfigDefaults", (cls,), {"_read_env": False})
        try:
            return bound(**overrides)  # type: ignore[no-any-return]
        except ValidationError as exc:
            where, value, problem = first_problem(exc)
            raise ConfigError(where or "config", value, problem) from None

    @classmethod
    def load(cls, toml: str | Path | None = None, **overrides: Any) -> AgentConfig:
        """Read the TOML file (if any) and the environment; errors name the field."""
        if toml is not None and not Path(toml).is_file():
            raise ConfigError("config", str(toml), "no such TOML file")
        bound = type("AgentConfigFromFile", (cls,), {"_toml_file": Path(toml) if toml else None})
        try:
            return bound(**overrides)  # type: ignore[no-any-return]
        except ValidationError as exc:
            where, value, problem = first_problem(exc)
            raise ConfigError(where or "config", value, problem) from None
