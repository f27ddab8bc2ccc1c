"""The health report: what an operator reads when something is wrong.

One snapshot, built from the agent's own figures, in three places: :meth:`Agent.health`,
the retained MQTT ``status`` topic (refreshed every ``health.interval_s``; the broker's last
will replaces it with ``{"online": false}`` when the connection dies), and the HTTP endpoint of
:mod:`._health_server` (``/health`` as JSON, ``/metrics`` in Prometheus text).

``status`` is ``ok`` unless a named reason makes it ``degraded``: the planner backing off after
failures, the bus disconnected, the model worker restarting. The reasons go with it, so the
report never says ``degraded`` without saying why.

Times are on the loop's clock (``uptime_s``, seconds-ago fields): the runtime's one clock.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from forethought.models import ManagedServerBackend

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = [
    "BusSection",
    "CountersSection",
    "HealthConfig",
    "HealthReport",
    "LatencySection",
    "ModelSection",
    "PlannerSection",
    "TreeSection",
    "WatchdogSection",
    "WorkerSection",
    "health_report",
]


class HealthConfig(BaseModel):
    """Where and how often the agent says how it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: float = Field(default=5.0, ge=0)
    """How often the retained status topic is refreshed (0: only when connecting)."""
    port: int | None = Field(default=None, ge=0, le=65_535)
    """Serve ``/health`` (JSON) over HTTP on this port (0: any free port; None: no endpoint)."""
    host: str = "127.0.0.1"
    """The endpoint's address: loopback by default (the report names models and errors)."""
    prometheus: bool = False
    """Also serve ``/metrics`` in the Prometheus text format (needs ``prometheus-client``:
    ``pip install 'forethought[metrics]'``)."""


class PlannerSection(BaseModel):
    """The planner's health (see :class:`~forethought.planner.PlannerHealth`) and its work."""

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
    """What the stall watchdog saw (see :class:`~forethought.runtime.StallWatchdog`)."""

    model_config = ConfigDict(frozen=True)

    stalls: int
    defaults_emitted: int
    emit_failures: int
    detected_after_ms: list[float]
    stall_ms: list[float]


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


class BusSection(BaseModel):
    """The bus's own counters; each bus adds its own (MQTT's outages, Zenoh's queries)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    received: int = 0
    malformed: int = 0
    dropped_full: int = 0
    """Events pushed out of a full queue."""
    expired: int = 0
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
    bus: BusSection | None


def health_report(agent: Agent, *, name: str, started_at: float) -> HealthReport:
    """The report for ``agent`` now (``name``: how it is known on its bus)."""
    now = asyncio.get_running_loop().time()
    stats = agent.stats()
    reasons: list[str] = []
    planner = None
    if agent.planner is not None:
        h = agent.planner.health
        planner = PlannerSection(
            **h.as_dict(now),
            sleeping=agent.planner.sleeping,
            branches=agent.planner.stats.branches,
            busy_s=round(agent.planner.stats.busy_s, 3),
            errors=dict(agent.planner.stats.errors),
        )
        if h.status == "backing_off":
            reasons.append(f"planner backing off after {h.streak} failed rounds: {h.last_error}")
    model = _model_figures(agent, reasons)
    ex = stats["executor"] or {}
    tiers = ex.get("tiers", {})
    bus_stats = stats.get("bus")
    connected = getattr(agent.bus, "connected", None)
    if connected is False:
        reasons.append("bus disconnected")
    bus = None
    if bus_stats is not None:
        bus = BusSection(**bus_stats, connected=connected)
    status: Literal["starting", "ok", "degraded"] = "degraded" if reasons else "ok"
    if not agent.ready.is_set():
        status = "starting"
    latency = ex.get("latency_ms")
    watchdog = stats.get("watchdog")
    return HealthReport(
        agent=name,
        status=status,
        reasons=reasons,
        uptime_s=round(now - started_at, 3),
        planner=planner,
        tree=TreeSection(
            **stats["tree"], coverage=stats["coverage"], answerable=stats["answerable"]
        ),
        model=model,
        counters=CountersSection(
            decisions=ex.get("decisions", 0),
            tiers=tiers,
            met=ex.get("met", 0),
            misses=ex.get("missed", 0),
            fallbacks=tiers.get("default", 0),
            rejects=stats["rejected"],
            invalid=ex.get("invalid", 0),
            model_errors=ex.get("model_errors", 0),
            latency_ms=None if latency is None else LatencySection(**latency),
            watchdog=None if watchdog is None else WatchdogSection(**watchdog),
            age=AgeSection(**agent.freshness.stats.as_dict()),
        ),
        bus=bus,
    )


def _model_figures(agent: Agent, reasons: list[str]) -> ModelSection:
    backend = agent.backend
    lat = backend.latency
    worker = None
    restarts = getattr(backend, "restarts", None)
    if restarts is not None:  # a model in a worker process
        alive = bool(getattr(backend, "worker_alive", True))
        worker = WorkerSection(alive=alive, restarts=restarts, hangs=getattr(backend, "hangs", 0))
        if not alive:
            reasons.append("model worker not running (restarting)")
    engine = None
    if isinstance(backend, ManagedServerBackend):  # the local model on our own llama-server
        proc = backend.process
        engine = EngineSection(
            kind="llama-server",
            pid=proc.pid,
            restarts=proc.stats.restarts,
            back_s_max=round(max(proc.stats.back_s), 3) if proc.stats.back_s else None,
        )
        if proc.pid is None:
            reasons.append("managed llama-server not running (restarting)")
    return ModelSection(
        ids=agent.models(),
        live_call_p95_ms=round(lat.call(32, lat.typical_steps()).p95 * 1e3, 3),
        step_p95_ms=round(lat.step(1).p95 * 1e3, 3),
        worker=worker,
        engine=engine,
    )
