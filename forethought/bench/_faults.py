"""R4 of ``forethought bench --suite reliability``: planner and model faults (issue 12).

The agent runs its model in a worker process (:class:`ProcessBackend`), and faults come in
two ways:

* **real**, done to the worker: ``killed`` (SIGKILL while the planner's batch runs) and
  ``hang`` (SIGSTOP while it runs: the worker never replies, as a stuck kernel or driver);
* **injected** by :class:`FaultyBackend`, a wrapper around the real backend whose next
  planner call fails in the named way: ``exception`` (an ``OSError``, not one of ours),
  ``grammar`` (the grammar engine's error), ``malformed`` (a "done" action that fails the
  schema), ``truncated`` (JSON cut short), ``runaway`` (whitespace until the token limit).
  The model really runs; only its result is replaced, so the planner sees exactly what a
  misbehaving backend hands it.

Meanwhile tree-hit events arrive at 50 Hz; during each hang an event the tree cannot answer
goes to the live tier. What must hold: no tree-hit miss, no invalid action emitted or stored,
the live call cut at its budget (within two decode steps), and after every fault the planner
reports ``backing_off`` and then ``ok`` again on its own (time to healthy: from the fault to
its next good round). CUDA out-of-memory needs a GPU: skipped here, with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Self

from pydantic import BaseModel

from forethought.models import (
    CancelSignal,
    Generation,
    GenerationStatus,
    LatencyPredictor,
    ModelBackend,
    ProcessBackend,
    Scores,
)
from forethought.planner import PlannerConfig
from forethought.policies import ActionSchema, AgentSpec, BackendError, EventKey, PolicyNode

from ._reliability import RELIABILITY_SPEC

__all__ = ["FAULTS", "FAULTS_SPEC", "FaultyBackend", "heartbeat_node", "run_model_faults", "until"]

INJECTED = ("exception", "grammar", "malformed", "truncated", "runaway")
REAL = ("killed", "hang")
FAULTS = (*REAL, *INJECTED)

FAULTS_SPEC: dict[str, Any] = {
    **RELIABILITY_SPEC,  # its description, action schema and default
    "name": "faults",
    "state": {"zone": "aisle", "shift": 0},
    "events": [
        # Depends on no state: the tree keeps its answer while the planner's work moves on.
        {"type": "heartbeat", "state_fields": [], "deadline_ms": 50, "weight": 0.01},
        {
            "type": "obstacle",
            "params": {"side": ["left", "right"], "distance_m": {"min": 0, "max": 3, "step": 0.5}},
            "deadline_ms": 600,
        },
        {"type": "clear", "deadline_ms": 1000},
    ],
}


def heartbeat_node(agent: Any, model_id: str) -> PolicyNode:
    """The tree's answer to a heartbeat (state-free): what makes heartbeats tree hits."""
    return PolicyNode(
        fingerprint=agent.state.fingerprint_for("heartbeat"),
        key=EventKey("heartbeat", ()),
        action={"action": "slow", "speed": 0.5},
        compact='{"action":"slow","speed":0.5}',
        probability=1.0,
        model_id=model_id,
        tokens=0,
        gen_seconds=0.0,
        created_at=asyncio.get_running_loop().time(),
    )


class FaultyBackend:
    """A real backend whose next planner call fails as armed (see the module docstring).

    Only calls that carry a cancel signal (the planner's) take a fault; the live tiers' go
    through untouched unless ``live`` is set when arming.
    """

    def __init__(self, inner: ModelBackend) -> None:
        self.inner = inner
        self._armed: tuple[str, bool] | None = None
        self.in_call = asyncio.Event()
        """Set while a planner call runs (the moment to kill or stop the worker)."""
        self.injected: dict[str, int] = {}

    async def __aenter__(self) -> Self:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.inner.__aexit__(*exc_info)

    @property
    def model_id(self) -> str:
        """The real model's."""
        return self.inner.model_id

    @property
    def latency(self) -> LatencyPredictor:
        """The real model's."""
        return self.inner.latency

    def arm(self, kind: str, *, live: bool = False) -> None:
        """Fail the next planner call (or any call, with ``live``) as ``kind``."""
        if kind not in INJECTED:
            raise ValueError(f"unknown fault {kind!r}: choose one of {INJECTED}")
        self._armed = (kind, live)

    def _take(self, cancel: CancelSignal | None) -> str | None:
        if self._armed is None or (cancel is None and not self._armed[1]):
            return None
        kind, self._armed = self._armed[0], None
        self.injected[kind] = self.injected.get(kind, 0) + 1
        return kind

    async def prepare(self, schema: ActionSchema) -> None:
        """The real model's."""
        await self.inner.prepare(schema)

    async def generate(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """The real model's generation, failed as armed."""
        fault = self._take(cancel)
        if fault == "exception":
            raise OSError(5, "injected: input/output error")
        if fault == "grammar":
            raise BackendError("injected: the grammar matcher refused the model's token")
        if cancel is not None:
            self.in_call.set()
        try:
            gens = await self.inner.generate(
                context,
                events,
                schema,
                deadline=deadline,
                cancel=cancel,
                max_new_tokens=max_new_tokens,
            )
        finally:
            self.in_call.clear()
        return gens if fault is None else [_spoil(g, fault, schema) for g in gens]

    async def score(
        self,
        context: str,
        event: str,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """The real model's scores (faults are injected into generation)."""
        return await self.inner.score(
            context, event, candidates, schema, deadline=deadline, cancel=cancel
        )


def _spoil(g: Generation, fault: str, schema: ActionSchema) -> Generation:
    """What a misbehaving backend would hand back instead of ``g``."""
    if fault == "malformed":
        # "Done", with an action object the schema forbids (built without validation).
        bad = schema.model.model_construct(action="fly", speed=99.0)
        return replace(g, status=GenerationStatus.DONE, action=bad, text='{"action":"fly"}')
    if fault == "truncated":
        return replace(g, status=GenerationStatus.INVALID, action=None, text=g.text[:7])
    return replace(g, status=GenerationStatus.LENGTH, action=None, text="{" + " " * 4000)


async def _ticks(agent: Any, stop: asyncio.Event, out: dict[str, Any]) -> None:
    """Tree-hit heartbeats at 50 Hz until ``stop``: count misses and invalid actions."""
    schema = agent.schema
    i = 0
    while not stop.is_set():
        i += 1
        d = await agent.decide({"id": f"hb-{i}", "type": "heartbeat"})
        out["ticks"] += 1
        if d.tier.value != "tree" or not d.met:
            out["tick_misses"] += 1
        try:
            schema.validate(d.action)
        except Exception:  # any refusal at all is an invalid action emitted
            out["invalid_emitted"] += 1
        await asyncio.sleep(0.02)


async def until(cond: Any, within: float) -> float | None:
    """Seconds until ``cond()`` holds, or None after ``within`` seconds.

    Polled every 5 ms: planner health and a bus's connection have no event to wait on.
    """
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while not cond():  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            return loop.time() - t0
    return None


async def _one_fault(
    agent: Any, faulty: FaultyBackend, worker: ProcessBackend, kind: str, cycle: int
) -> dict[str, Any]:
    """Inject one fault; return what happened (time to healthy, live cut)."""
    planner = agent.planner
    loop = asyncio.get_running_loop()
    failures = planner.health.failures
    agent.update_state({"shift": cycle})  # fresh work: a new state's branches to write
    if await until(faulty.in_call.is_set, 15.0) is None:
        return {"kind": kind, "error": "the planner never started a call"}
    row: dict[str, Any] = {"kind": kind}
    t0 = loop.time()
    if kind in INJECTED:
        faulty.arm(kind)
    else:
        pid = worker.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL if kind == "killed" else signal.SIGSTOP)
    if kind == "hang":
        # An event the tree cannot answer, due while the worker is stuck: the live tier must
        # be cut at its budget, and the default sent.
        event = {
            "id": f"live-{cycle}",
            "type": "obstacle",
            "params": {"side": "left", "distance_m": 0.5},
            "deadline_ms": 900,
            "state": {"shift": cycle + 0.5},
        }
        d = await agent.decide(event)
        row["live_overrun_ms"] = (d.latency_s - d.budget_s) * 1e3
        row["live_tier"] = d.tier.value
        row["live_met"] = d.met  # by the executor's end: the deadline less the margin
        margin_s = agent.config.executor.margin_ms / 1e3
        row["live_before_deadline"] = d.latency_s <= d.budget_s + margin_s
    failed = await until(lambda: planner.health.failures > failures, 30.0) is not None
    healthy = failed and await until(lambda: planner.health.status == "ok", 60.0) is not None
    row["detected"] = failed
    row["healthy"] = healthy
    row["time_to_healthy_s"] = loop.time() - t0 if healthy else None
    return row


async def run_model_faults(model: str, each: int) -> dict[str, Any]:
    """R4: ``each`` of every fault kind, cycled, on ``model`` in a worker process."""
    from forethought.runtime import Agent, AgentConfig, ExecutorConfig  # noqa: PLC0415

    spec = AgentSpec.from_data(FAULTS_SPEC)
    cfg = AgentConfig.defaults(
        planner=PlannerConfig(
            batch_size=2,
            horizon=1,
            min_rate=0.0,
            cost_weight=0.0,
            # The declared weights, not the 50 Hz heartbeats, say what to plan: otherwise the
            # stream teaches the planner that nothing but heartbeats comes, and it idles.
            learn=False,
            # Generation is where outputs can be malformed, truncated or run away (scoring
            # picks among valid candidates); "auto" would score this enumerable schema.
            method="generate",
            max_new_tokens=24,
            batch_timeout_s=2.0,
            hang_grace_s=0.5,
            retry_base_s=0.05,
            retry_max_s=1.0,
        ),
        executor=ExecutorConfig(near_states=False, use_score=False),
    )
    inner = ProcessBackend(model=model, device="cpu", nice=0, cancel_grace_s=0.5)
    faulty = FaultyBackend(inner)
    out: dict[str, Any] = {"ticks": 0, "tick_misses": 0, "invalid_emitted": 0}
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    async with Agent(spec, backend=faulty, config=cfg) as agent:
        assert agent.planner is not None
        agent.tree.insert(heartbeat_node(agent, faulty.model_id))
        stop = asyncio.Event()
        ticker = asyncio.create_task(_ticks(agent, stop, out), name="r4.ticks")
        try:
            for _ in range(each):
                for kind in FAULTS:
                    rows.append(await _one_fault(agent, faulty, inner, kind, len(rows) + 1))
                    if "error" in rows[-1]:  # the planner is gone: nothing more to learn
                        break
                else:
                    continue
                break
        finally:
            stop.set()
            await ticker
        stored_invalid = 0
        for node in agent.tree.nodes():
            try:
                agent.schema.validate(node.action)
            except Exception:  # any refusal at all is an invalid action stored
                stored_invalid += 1
        health = agent.planner.health.as_dict(asyncio.get_running_loop().time())
        step = inner.latency.step(1).p95
    per_kind: dict[str, Any] = {}
    for kind in FAULTS:
        mine = [r for r in rows if r["kind"] == kind]
        times = sorted(r["time_to_healthy_s"] for r in mine if r.get("time_to_healthy_s"))
        per_kind[kind] = {
            "faults": len(mine),
            "detected": sum(bool(r.get("detected")) for r in mine),
            "healthy_again": sum(bool(r.get("healthy")) for r in mine),
            "time_to_healthy_p50_s": times[len(times) // 2] if times else None,
            "time_to_healthy_max_s": times[-1] if times else None,
        }
    overruns = [r["live_overrun_ms"] for r in rows if "live_overrun_ms" in r]
    return {
        **out,
        "each": each,
        "seconds": time.monotonic() - started,
        "faults": per_kind,
        "stored_invalid": stored_invalid,
        "worker_restarts": inner.restarts,
        "worker_hangs_killed": inner.hangs,
        "injected": dict(faulty.injected),
        "live_cut_overrun_max_ms": max(overruns, default=None),
        "live_cut_defaults_in_time": sum(bool(r.get("live_before_deadline")) for r in rows),
        "live_cut_defaults_met": sum(bool(r.get("live_met")) for r in rows),
        "live_cuts": len(overruns),
        "decode_step_p95_ms": step * 1e3,
        "planner_health": health,
        "cuda_oom": "skipped: no CUDA device on this machine",
        "rows": rows,
    }
