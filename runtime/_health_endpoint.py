"""HealthEndpoint: the health report over HTTP, on the agent's own event loop.

``GET /health`` answers the :class:`HealthReport` as JSON: status 200 when ``ok``, 503 when
``starting`` or ``degraded`` (what load balancers and orchestrators' health checks expect).
``GET /metrics`` (with ``prometheus``) answers the same figures in the Prometheus text format,
drawn by ``prometheus-client`` from one report per scrape: counters for decisions (per tier),
misses, fallbacks, rejects, invalid actions, model and planner failures; gauges for health,
tree size and coverage, predicted model latency and the decision-latency quantiles.

A few dozen lines of HTTP/1.0 on ``asyncio.start_server`` rather than a web framework or
``prometheus_client``'s own server (a thread): the report is read on the loop that owns the
figures, one request at a time, and nothing runs outside the agent's TaskGroup. Requests are
bounded (8 KiB of request line and headers, 5 s to send them) and each connection is closed
after its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from forethought.policies import ConfigError

from ._health_report import HealthReport

__all__ = ["HealthEndpoint"]

log = logging.getLogger("forethought.health")

_MAX_HEAD = 8192
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HealthEndpoint:
    """Serves ``/health`` (and ``/metrics``) until cancelled.

    Args:
        report: makes the report (called once per request, on the loop).
        host: the address to listen on.
        port: the port (0: any free one; :attr:`port` says which once listening).
        prometheus: serve ``/metrics`` too (``prometheus-client`` must be installed: checked
            here, so a missing package is a ConfigError at start, not a 500 at the first scrape).

    """

    def __init__(
        self,
        *,
        report: Callable[[], HealthReport],
        host: str = "127.0.0.1",
        port: int = 0,
        prometheus: bool = False,
    ) -> None:
        self._report = report
        self._host = host
        self._want_port = port
        self._prometheus = prometheus
        if prometheus:
            try:
                import prometheus_client  # noqa: F401, PLC0415 - optional
            except ImportError:
                raise ConfigError(
                    "health.prometheus",
                    True,
                    "needs prometheus-client: pip install 'forethought[metrics]'",
                ) from None
        self.port: int | None = None
        self.listening = asyncio.Event()
        self.requests = 0

    async def run(self) -> None:
        """Listen until cancelled."""
        try:
            server = await asyncio.start_server(self._handle, self._host, self._want_port)
        except OSError as exc:
            raise ConfigError("health.port", self._want_port, f"cannot listen: {exc}") from None
        async with server:
            self.port = int(server.sockets[0].getsockname()[1])
            self.listening.set()
            log.info("health endpoint on http://%s:%d/health", self._host, self.port)
            await server.serve_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5.0):
                head = await reader.readuntil(b"\r\n\r\n")
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        self.requests += 1
        status, ctype, body = self._answer(head[:_MAX_HEAD])
        writer.write(
            f"HTTP/1.0 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    def _answer(self, head: bytes) -> tuple[int, str, bytes]:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3:
            return 405, "text/plain", b"bad request line\n"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method != b"GET":
            return 405, "text/plain", b"GET only\n"
        if target == b"/health":
            report = self._report()
            return (
                200 if report.status == "ok" else 503,
                "application/json",
                orjson.dumps(report.model_dump(mode="json")),
            )
        if target == b"/metrics" and self._prometheus:
            return 200, _PROMETHEUS_TYPE, prometheus_text(self._report())
        return (
            404,
            "text/plain",
            b"try /health" + (b" or /metrics\n" if self._prometheus else b"\n"),
        )


_PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def prometheus_text(report: HealthReport) -> bytes:
    """``report`` in the Prometheus text exposition format (needs ``prometheus-client``)."""
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415
    from prometheus_client.core import (  # noqa: PLC0415
        CounterMetricFamily,
        GaugeMetricFamily,
        Metric,
    )

    def families() -> Iterator[Metric]:
        c, agent = report.counters, [report.agent]
        up = GaugeMetricFamily("forethought_healthy", "1 when status is ok", labels=["agent"])
        up.add_metric(agent, 1.0 if report.status == "ok" else 0.0)
        yield up
        tiers = CounterMetricFamily(
            "forethought_decisions", "Decisions by tier", labels=["agent", "tier"]
        )
        for tier, n in sorted(c.tiers.items()):
            tiers.add_metric([report.agent, tier], n)
        yield tiers
        for name, count, doc in (
            ("forethought_deadline_misses", c.misses, "Decisions after their deadline"),
            ("forethought_fallbacks", c.fallbacks, "Decisions that were the default action"),
            ("forethought_rejects", c.rejects, "Events refused (malformed, expired)"),
            ("forethought_invalid_actions", c.invalid, "Model actions refused by the schema"),
            ("forethought_model_errors", c.model_errors, "Failed live-tier model calls"),
        ):
            m = CounterMetricFamily(name, doc, labels=["agent"])
            m.add_metric(agent, count)
            yield m
        yield from _planner_families(report, agent, CounterMetricFamily, GaugeMetricFamily)
        guarded = CounterMetricFamily(
            "forethought_guard_refusals",
            "Answers a guard refused, by tier and guard (the next tier answered)",
            labels=["agent", "tier", "guard"],
        )
        for tier, by_guard in sorted(c.guards.refused.items()):
            for guard, n in sorted(by_guard.items()):
                guarded.add_metric([report.agent, tier, guard], n)
        yield guarded
        for name, value, doc in (
            ("forethought_tree_nodes", report.tree.nodes, "Policy tree nodes"),
            ("forethought_tree_coverage", report.tree.coverage, "Next-event mass answered"),
            (
                "forethought_live_call_p95_seconds",
                report.model.live_call_p95_ms / 1e3,
                "Predicted p95 of a live call",
            ),
            (
                "forethought_decode_step_p95_seconds",
                report.model.step_p95_ms / 1e3,
                "Predicted p95 of one decode step",
            ),
        ):
            if value is not None:
                g = GaugeMetricFamily(name, doc, labels=["agent"])
                g.add_metric(agent, float(value))
                yield g
        lat = c.latency_ms
        q = GaugeMetricFamily(
            "forethought_decision_latency_seconds",
            "Decision latency quantiles (recent decisions)",
            labels=["agent", "quantile"],
        )
        if lat is not None:
            for label, ms in (("0.5", lat.p50), ("0.99", lat.p99), ("0.999", lat.p999)):
                if ms is not None:
                    q.add_metric([report.agent, label], ms / 1e3)
        yield q

    class _Collector:
        def collect(self) -> Iterator[Metric]:
            return families()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return generate_latest(registry)


def _planner_families(
    report: HealthReport, agent: list[str], counter: Any, gauge: Any
) -> Iterator[Any]:
    p = report.planner
    if p is None:
        return
    fails = counter("forethought_planner_failures", "Failed planner rounds", labels=["agent"])
    fails.add_metric(agent, p.failures)
    yield fails
    made = counter("forethought_planner_branches", "Branches written", labels=["agent"])
    made.add_metric(agent, p.branches)
    yield made
    off = gauge("forethought_planner_backing_off", "1 while backing off", labels=["agent"])
    off.add_metric(agent, 1.0 if p.status == "backing_off" else 0.0)
    yield off
