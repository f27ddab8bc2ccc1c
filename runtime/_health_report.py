"""The health report's shape: its typed sections, each bus's counters, the report itself.

What an operator reads when something is wrong (see :mod:`._health` for how it is built and
where it goes). Its own module because the buses fill and carry it (:mod:`._capabilities`'
protocols name it) while the builder asks those protocols: the types sit below both.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny

__all__ = [
    "AgeSection",
    "BusSection",
    "CountersSection",
    "EngineSection",
    "GuardsSection",
    "HealthReport",
    "LatencySection",
    "ModelSection",
    "PlannerSection",
    "TreeSection",
    "WatchdogSection",
    "WorkerSection",
]


class PlannerSection(BaseModel):
    """The planner's health (starting, ok or backing off after failures) and its work."""

    model_config = ConfigDict(frozen=True)

    status: Literal["starting", "ok", "backing_off"]
    failures: int
    """Failed rounds, all told."""
    streak: int
    """Failed rounds in a row (0 once a round succeeds)."""
    recoveries: int
    """Streaks that ended with a good round."""
    last_error: str | None
    last_error_s_ago: float | None
    last_ok_s_ago: float | None
    retry_in_s: float | None
    """While backing off: how long until the next try."""
    sleeping: bool
    """Nothing left worth writing: the planner waits for a state change or an event."""
    branches: int
    """Branches written (a branch written twice counts twice)."""
    busy_s: float
    """Seconds the planner has kept the model busy."""
    errors: dict[str, int]
    """Failed rounds and refused outputs, by kind."""


class TreeSection(BaseModel):
    """The policy tree: its size and how much of the next event it answers."""

    model_config = ConfigDict(frozen=True)

    nodes: int
    evictions: int
    version: int
    """Bumped by every insertion and eviction."""
    coverage: float | None
    """Probability that the next event, in the current state, has its exact branch in the tree
    (None without a planner)."""
    answerable: float | None
    """Probability that the tree tier answers the next event: exact branches and those
    borrowed from a neighbouring key or state (what :meth:`Agent.until_covered` waits for)."""


class WorkerSection(BaseModel):
    """A model in a worker process: whether it runs, and how often it was replaced."""

    model_config = ConfigDict(frozen=True)

    alive: bool
    restarts: int
    hangs: int


class EngineSection(BaseModel):
    """The managed llama-server that runs the local model: its process and its restarts."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["llama-server"]
    pid: int | None
    """None while it restarts."""
    restarts: int
    back_s_max: float | None
    """The longest time, in seconds, a restart took to answer again."""


class AgeSection(BaseModel):
    """Events refused or limited for their age (see the deadlines guide)."""

    model_config = ConfigDict(frozen=True)

    expired: int
    superseded: int
    no_age: int
    default_only: int
    from_the_future: int
    late: int = 0
    """Decided, but not sent: the deadline had passed when the decision was to go out."""


class ModelSection(BaseModel):
    """Which model answers each tier, and what a call to it is predicted to cost."""

    model_config = ConfigDict(frozen=True)

    ids: dict[str, str | None]
    """The model of each tier (``tree``, ``score``, ``live``)."""
    live_call_p95_ms: float
    """Predicted p95 of a live call (learned from measured calls)."""
    step_p95_ms: float
    """Predicted p95 of one decode step."""
    worker: WorkerSection | None = None
    """Set when the model runs in a worker process."""
    engine: EngineSection | None = None
    """Set when the local model runs on the agent's own managed llama-server."""


class LatencySection(BaseModel):
    """Decision latency over recent decisions, in milliseconds (None before any)."""

    model_config = ConfigDict(frozen=True)

    p50: float | None
    p99: float | None
    p999: float | None
    max: float | None


class WatchdogSection(BaseModel):
    """What the stall watchdog saw (see :class:`WatchdogConfig`)."""

    model_config = ConfigDict(frozen=True)

    stalls: int
    defaults_emitted: int
    emit_failures: int
    detected_after_ms: list[float]
    stall_ms: list[float]


class GuardsSection(BaseModel):
    """Guard refusals, by tier and by guard name.

    ``refused``: answers a guard refused (the next tier answered); ``dropped``: branches of a
    loaded tree dropped by guard; ``default_breaks``: defaults sent though a guard refused them
    (a state outside the declared domains).
    """

    model_config = ConfigDict(frozen=True)

    refused: dict[str, dict[str, int]] = Field(default_factory=dict)
    dropped: dict[str, int] = Field(default_factory=dict)
    default_breaks: int = 0


class CountersSection(BaseModel):
    """What the executor decided, and what it refused."""

    model_config = ConfigDict(frozen=True)

    decisions: int
    tiers: dict[str, int]
    """Decisions per tier (``tree``, ``score``, ``live``, ``default``)."""
    met: int
    misses: int
    """Decisions after their deadline."""
    fallbacks: int
    """Decisions that were the declared default (never a hit)."""
    rejects: int
    """Events refused (malformed, expired)."""
    invalid: int
    """Model actions the validator of record refused."""
    model_errors: int
    latency_ms: LatencySection | None
    watchdog: WatchdogSection | None
    age: AgeSection
    """Events refused as expired, superseded, of unknown age or from the future."""
    guards: GuardsSection = Field(default_factory=GuardsSection)
    """Guard refusals by tier and by guard name."""


class BusSection(BaseModel):
    """The counters every bus keeps.

    Each bus's section adds its own (MQTT's outages, Zenoh's queries) as a subclass:
    :class:`~forethought.runtime.MqttBusSection`, :class:`~forethought.runtime.ZenohBusSection`.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    received: int = 0
    malformed: int = 0
    dropped_full: int = 0
    """Events pushed out of a full queue."""
    expired: int = 0
    warnings: int = 0
    """Warnings beside a decision (an event outside the event space)."""
    published: int = 0
    publish_failures: int = 0
    connected: bool | None = None
    """Whether the bus is connected now (None: a bus that does not say)."""


class HealthReport(BaseModel):
    """The agent's health (see the module docstring); the status topic's payload.

    Every section is a typed model: ``agent.health().tree.coverage``.
    """

    model_config = ConfigDict(frozen=True)

    online: bool = True
    agent: str
    status: Literal["starting", "ok", "degraded"]
    reasons: list[str] = Field(default_factory=list)
    uptime_s: float
    planner: PlannerSection | None
    """The planner's health and its work figures (None: the agent runs no planner)."""
    tree: TreeSection
    model: ModelSection
    counters: CountersSection
    bus: SerializeAsAny[BusSection] | None
    """The bus's section (None: no bus, or one that keeps no counters); serialized with the
    fields of its own subclass."""
