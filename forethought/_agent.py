"""The Agent: a spec, a model, a planner and an executor, living as long as one ``async with``.

``async with Agent(spec) as agent:`` loads and warms the model and its latency model, compiles
the action grammar, reloads a tree snapshot if one is configured, starts the planner (and the
bus loop, with a bus) in one TaskGroup of named tasks, and sets ``agent.ready``. Leaving the
block cancels them and saves the snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any, Self

from forethought.planner import (
    Forecaster,
    ModelBackend,
    ModelGate,
    Planner,
    ProcessBackend,
    TransformersBackend,
)
from forethought.policies import (
    AgentSpec,
    EventKey,
    PolicyNode,
    PolicyTree,
    SnapshotError,
    WorldState,
)
from forethought.runtime import Decision, Event, EventBus, EventPayload, Executor, parse_payload

from ._config import AgentConfig

__all__ = ["Agent"]

log = logging.getLogger("forethought.agent")


class Agent:
    """An agent deciding events of one spec within their deadlines.

    Args:
        spec: the spec, or a path to a YAML/JSON spec file.
        backend: the model (default: a TransformersBackend from ``config``); pass None
            explicitly through ``config``-free tests with ``backend=...``.
        bus: where events come from (optional; :meth:`decide` works without one).
        config: how to run (default: ``AgentConfig.load()``: environment variables).

    """

    def __init__(
        self,
        spec: AgentSpec | str | Path,
        *,
        backend: ModelBackend | None = None,
        bus: EventBus | None = None,
        config: AgentConfig | None = None,
    ) -> None:
        self.spec = spec if isinstance(spec, AgentSpec) else AgentSpec.from_file(spec)
        self.config = config or AgentConfig.load()
        self.schema = self.spec.action_schema()
        self.space = self.spec.event_space()
        self._own_backend = backend is None
        self.backend: ModelBackend = backend or self._make_backend()
        self.bus = bus
        self._state = WorldState(
            self.spec.state, fields=self.spec.state_fields, max_bytes=self.config.max_state_bytes
        )
        self.ready = asyncio.Event()
        self.gate = ModelGate()
        self.tree = PolicyTree(max_nodes=self.config.tree_max_nodes, on_evict=self._evicted)
        self.forecaster = Forecaster(self.space)
        self.planner: Planner | None = None
        self.executor = Executor(
            space=self.space,
            schema=self.schema,
            tree=self.tree,
            default_action=self.spec.default_action,
            description=self.spec.description,
            state=lambda: self._state,
            backend=self.backend,
            gate=self.gate,
            candidates=self.spec.candidates,
            config=self.config.executor,
        )
        self._runner: asyncio.Task[None] | None = None
        self._started = asyncio.Event()
        self.rejected = 0
        self.snapshot_problem: str | None = None

    def _make_backend(self) -> ModelBackend:
        cfg = self.config
        kind = ProcessBackend if cfg.model_process else TransformersBackend
        return kind(model=cfg.model, device=cfg.device, dtype=cfg.dtype, grammar=cfg.grammar)

    @property
    def state(self) -> WorldState:
        """The current state."""
        return self._state

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        backend = self.backend
        if self._own_backend and isinstance(backend, TransformersBackend | ProcessBackend):
            await backend.__aenter__()
        elif isinstance(backend, TransformersBackend):
            await asyncio.to_thread(backend.load)  # a caller's backend: load if it is not
        await backend.prepare(self.schema)
        self._load_snapshot()
        self.planner = Planner(
            backend=backend,
            gate=self.gate,
            space=self.space,
            schema=self.schema,
            tree=self.tree,
            forecaster=self.forecaster,
            description=self.spec.description,
            state=self._state,
            config=self.config.planner,
        )
        if self.bus is not None:
            await self.bus.__aenter__()
        self._runner = asyncio.create_task(self._run(), name=f"forethought[{self.spec.name}]")
        await self._started.wait()
        self.ready.set()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.ready.clear()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        if self.bus is not None:
            await self.bus.__aexit__(*exc_info)
        self.save_snapshot()
        if self._own_backend and isinstance(self.backend, TransformersBackend | ProcessBackend):
            await self.backend.__aexit__(*exc_info)

    async def _run(self) -> None:
        assert self.planner is not None
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.planner.run(), name=f"forethought[{self.spec.name}].planner")
            if self.bus is not None:
                tg.create_task(
                    self._serve(self.bus, tg), name=f"forethought[{self.spec.name}].serve"
                )
            self._started.set()

    def _load_snapshot(self) -> None:
        path = self.config.snapshot
        if path is None or not path.exists():
            return
        try:
            loaded = PolicyTree.load(
                path,
                schema=self.schema.fingerprint,
                model_id=self.backend.model_id,
                max_nodes=self.config.tree_max_nodes,
                on_evict=self._evicted,
            )
        except SnapshotError as exc:
            self.snapshot_problem = str(exc)
            log.warning("skipping the tree snapshot: %s", exc)
            return
        for node in loaded.nodes():
            self.tree.insert(node)

    def save_snapshot(self) -> None:
        """Write the tree to the configured snapshot path (if any)."""
        if self.config.snapshot is not None:
            self.tree.save(
                self.config.snapshot, schema=self.schema.fingerprint, model_id=self.backend.model_id
            )

    def _evicted(self, _node: PolicyNode) -> None:
        if self.planner is not None:
            self.planner.wake()

    # -- deciding -----------------------------------------------------------------------------

    async def _serve(self, bus: EventBus, tg: asyncio.TaskGroup) -> None:
        loop = asyncio.get_running_loop()
        async for event in bus.events():
            if loop.time() > self.executor.deadline_of(event):
                await bus.reject(event, "expired: its deadline passed before it was decided")
                self.rejected += 1
                continue
            tg.create_task(self._handle(bus, event), name=f"forethought.event[{event.id}]")

    async def _handle(self, bus: EventBus, event: Event) -> None:
        try:
            decision = await self.decide(event)
        except Exception as exc:
            log.exception("deciding %s failed", event.id)
            await bus.reject(event, f"not decided: {exc!r}"[:300])
            return
        await bus.publish(event, decision)

    async def decide(self, event: Event | EventPayload | dict[str, Any]) -> Decision:
        """Decide one event (an Event, a payload model, or its JSON object)."""
        if not isinstance(event, Event):
            payload = (
                event
                if isinstance(event, EventPayload)
                else parse_payload(event, max_bytes=self.config.mqtt.max_payload_bytes)
            )
            event = Event.from_payload(payload, arrived_at=asyncio.get_running_loop().time())
        if event.state:
            self.update_state(event.state)
        decision = await self.executor.decide(event)
        self._after(decision)
        return decision

    def _after(self, decision: Decision) -> None:
        key: EventKey | None = decision.key
        if self.planner is not None:
            self.planner.observe(key)
        if key is not None:
            spec = self.space.types[key.type]
            if spec.effects:
                self._set_state(self._state.after(spec, key))

    def update_state(self, patch: dict[str, Any]) -> None:
        """Set fields of the state (None removes one); raises InvalidState, keeping the old."""
        self._set_state(self._state.patched(patch))

    def _set_state(self, state: WorldState) -> None:
        self._state = state
        if self.planner is not None:
            self.planner.set_state(state)

    def stats(self) -> dict[str, Any]:
        """Executor, planner, tree and bus figures."""
        planner = self.planner
        out: dict[str, Any] = {
            "executor": self.executor.stats.as_dict(),
            "tree": {
                "nodes": len(self.tree),
                "evictions": self.tree.evictions,
                "version": self.tree.version,
            },
            "planner": planner.stats.as_dict() if planner else None,
            "coverage": planner.coverage() if planner else None,
            "rejected": self.rejected,
            "state": self._state.fingerprint,
        }
        bus_stats = getattr(self.bus, "stats", None)
        if bus_stats is not None:
            out["bus"] = {k: getattr(bus_stats, k) for k in bus_stats.__slots__}
        return out
