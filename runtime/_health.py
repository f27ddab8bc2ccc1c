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
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from forethought.planner import ManagedServerBackend

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["HealthConfig", "HealthReport", "health_report"]


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


class HealthReport(BaseModel):
    """The agent's health (see the module docstring); the status topic's payload."""

    model_config = ConfigDict(frozen=True)

    online: bool = True
    agent: str
    status: Literal["starting", "ok", "degraded"]
    reasons: list[str] = Field(default_factory=list)
    uptime_s: float
    planner: dict[str, Any] | None
    """The planner's health (status, failures, streak, last error) and its work figures."""
    tree: dict[str, Any]
    """Nodes, version, evictions, and coverage: the next-event probability it answers."""
    model: dict[str, Any]
    """Predicted p95 of a live call and of one decode step (learned from measured calls)."""
    counters: dict[str, Any]
    """Decisions per tier, misses, fallbacks to the default, rejects, invalid, model errors;
    ``age``: events refused as expired, superseded, of unknown age or from the future."""
    bus: dict[str, Any] | None


def health_report(agent: Agent, *, name: str, started_at: float) -> HealthReport:
    """The report for ``agent`` now (``name``: how it is known on its bus)."""
    now = asyncio.get_running_loop().time()
    stats = agent.stats()
    reasons: list[str] = []
    planner = None
    if agent.planner is not None:
        h = agent.planner.health
        planner = {
            **h.as_dict(now),
            "sleeping": agent.planner.sleeping,
            "branches": agent.planner.stats.branches,
            "busy_s": round(agent.planner.stats.busy_s, 3),
            "errors": dict(agent.planner.stats.errors),
        }
        if h.status == "backing_off":
            reasons.append(f"planner backing off after {h.streak} failed rounds: {h.last_error}")
    model = _model_figures(agent, reasons)
    ex = stats["executor"] or {}
    tiers = ex.get("tiers", {})
    bus = stats.get("bus")
    connected = getattr(agent.bus, "connected", None)
    if connected is False:
        reasons.append("bus disconnected")
    if bus is not None and connected is not None:
        bus = {**bus, "connected": connected}
    status: Literal["starting", "ok", "degraded"] = "degraded" if reasons else "ok"
    if not agent.ready.is_set():
        status = "starting"
    return HealthReport(
        agent=name,
        status=status,
        reasons=reasons,
        uptime_s=round(now - started_at, 3),
        planner=planner,
        tree={**stats["tree"], "coverage": stats["coverage"]},
        model=model,
        counters={
            "decisions": ex.get("decisions", 0),
            "tiers": tiers,
            "met": ex.get("met", 0),
            "misses": ex.get("missed", 0),
            "fallbacks": tiers.get("default", 0),
            "rejects": stats["rejected"],
            "invalid": ex.get("invalid", 0),
            "model_errors": ex.get("model_errors", 0),
            "latency_ms": ex.get("latency_ms"),
            "watchdog": stats.get("watchdog"),
            "age": agent.freshness.stats.as_dict(),
        },
        bus=bus,
    )


def _model_figures(agent: Agent, reasons: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"ids": agent.models()}
    backend = agent.backend
    lat = backend.latency
    out["live_call_p95_ms"] = round(lat.call(32, lat.typical_steps()).p95 * 1e3, 3)
    out["step_p95_ms"] = round(lat.step(1).p95 * 1e3, 3)
    restarts = getattr(backend, "restarts", None)
    if restarts is not None:  # a model in a worker process
        alive = bool(getattr(backend, "worker_alive", True))
        hangs = getattr(backend, "hangs", 0)
        out["worker"] = {"alive": alive, "restarts": restarts, "hangs": hangs}
        if not alive:
            reasons.append("model worker not running (restarting)")
    if isinstance(backend, ManagedServerBackend):  # the local model on our own llama-server
        proc = backend.process
        out["engine"] = {
            "kind": "llama-server",
            "pid": proc.pid,
            "restarts": proc.stats.restarts,
            "back_s_max": round(max(proc.stats.back_s), 3) if proc.stats.back_s else None,
        }
        if proc.pid is None:
            reasons.append("managed llama-server not running (restarting)")
    return out
