"""The health report, built from the agent's figures: what an operator reads when it is wrong.

Its typed sections are in :mod:`._health_report`. One snapshot, built from the agent's own
figures (through :class:`HealthSource`), in three places: :meth:`Agent.health`,
the retained MQTT ``status`` topic (refreshed every ``health.interval_s``; the broker's last
will replaces it with ``{"online": false}`` when the connection dies), and the HTTP endpoint of
:mod:`._health_endpoint` (``/health`` as JSON, ``/metrics`` in Prometheus text).

``status`` is ``ok`` unless a named reason makes it ``degraded``: the planner backing off after
failures, the bus disconnected, the model worker restarting. The reasons go with it, so the
report never says ``degraded`` without saying why.

Times are on the loop's clock (``uptime_s``, seconds-ago fields): the runtime's one clock.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from forethought.models import ManagedServerBackend

from ._capabilities import SupportsBusStats, SupportsConnected, SupportsWorker
from ._decision import Tier
from ._health_report import (
    AgeSection,
    CountersSection,
    EngineSection,
    GuardsSection,
    HealthReport,
    LatencySection,
    ModelSection,
    PlannerSection,
    TreeSection,
    WatchdogSection,
    WorkerSection,
)

if TYPE_CHECKING:
    from forethought.models import ModelBackend
    from forethought.planner.internals import Planner
    from forethought.policies import PolicyTree

    from ._executor import Executor
    from ._freshness import Freshness
    from ._watchdog import StallWatchdog
    from .transports._bus import EventBus

__all__ = ["HealthConfig", "HealthSource", "health_report"]


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


class HealthSource(Protocol):
    """What the report reads of an agent: its parts and counters (the Agent is one).

    A protocol, so the report is built from the agent without this module importing it (the
    agent imports this one).
    """

    @property
    def planner(self) -> Planner | None:
        """The idle-time planner (None: the agent runs none)."""
        ...

    @property
    def bus(self) -> EventBus | None:
        """The bus the agent serves (None: none)."""
        ...

    @property
    def ready(self) -> asyncio.Event:
        """Set once the agent has started."""
        ...

    @property
    def tree(self) -> PolicyTree:
        """The policy tree."""
        ...

    @property
    def watchdog(self) -> StallWatchdog | None:
        """The stall watchdog (None: off)."""
        ...

    @property
    def freshness(self) -> Freshness:
        """The judge of events' age, with its counters."""
        ...

    @property
    def executor(self) -> Executor | None:
        """The executor (None before it exists)."""
        ...

    @property
    def rejected(self) -> int:
        """Events refused before deciding."""
        ...

    @property
    def backend(self) -> ModelBackend:
        """The live tiers' model backend."""
        ...

    def answerable(self) -> float | None:
        """The share of the next event the tree tier answers now (None: no planner)."""
        ...

    def models(self) -> dict[str, str | None]:
        """Which model answers each tier."""
        ...


def health_report(agent: HealthSource, *, name: str, started_at: float) -> HealthReport:
    """The report for ``agent`` now (``name``: how it is known on its bus)."""
    now = asyncio.get_running_loop().time()
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
    on = agent.bus  # tested for None first: mypy cannot narrow `X | None` to a protocol at once
    if on is not None and isinstance(on, SupportsConnected) and not on.connected:
        reasons.append("bus disconnected")
    bus = on.bus_section() if on is not None and isinstance(on, SupportsBusStats) else None
    status: Literal["starting", "ok", "degraded"] = "degraded" if reasons else "ok"
    if not agent.ready.is_set():
        status = "starting"
    return HealthReport(
        agent=name,
        status=status,
        reasons=reasons,
        uptime_s=round(now - started_at, 3),
        planner=planner,
        tree=TreeSection(
            nodes=len(agent.tree),
            evictions=agent.tree.evictions,
            version=agent.tree.version,
            coverage=agent.planner.coverage() if agent.planner is not None else None,
            answerable=agent.answerable(),
        ),
        model=model,
        counters=_counters(agent),
        bus=bus,
    )


def _counters(agent: HealthSource) -> CountersSection:
    """The counters section, read from the typed counters (zeros before the executor exists)."""
    watchdog = agent.watchdog
    stalls = None if watchdog is None else WatchdogSection(**watchdog.stats.as_dict())
    age = AgeSection(**agent.freshness.stats.as_dict())
    executor = agent.executor
    if executor is None:
        return CountersSection(
            decisions=0,
            tiers={},
            met=0,
            misses=0,
            fallbacks=0,
            rejects=agent.rejected,
            invalid=0,
            model_errors=0,
            latency_ms=None,
            watchdog=stalls,
            age=age,
        )
    s = executor.stats
    return CountersSection(
        decisions=s.decisions,
        tiers=dict(s.tiers),
        met=s.met,
        misses=s.missed,
        fallbacks=s.tiers.get(Tier.DEFAULT.value, 0),
        rejects=agent.rejected,
        invalid=s.invalid,
        model_errors=s.model_errors,
        latency_ms=LatencySection(**s.latency_ms()),
        watchdog=stalls,
        age=age,
        guards=GuardsSection(**s.guards.as_dict()),
    )


def _model_figures(agent: HealthSource, reasons: list[str]) -> ModelSection:
    backend = agent.backend
    lat = backend.latency
    worker = None
    if isinstance(backend, SupportsWorker):  # a model in a worker process
        alive = backend.worker_alive
        worker = WorkerSection(alive=alive, restarts=backend.restarts, hangs=backend.hangs)
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
