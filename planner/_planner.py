"""The idle-time planner: writes actions for the events most likely to come next.

One background task (owned by the agent's TaskGroup). Each round it ranks uncovered branches by
value -- p(event) x urgency, where urgency is high for events whose deadline is shorter than
what the live tiers can do (per the latency model) -- takes the best batch that shares one
state, and generates it in one prefix-sharing batch. When nothing valuable is left it waits on
an event (no polling, no CPU) until a state change, an observed event or an eviction wakes it.
An urgent caller takes the model at once through the :class:`ModelGate`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forethought.policies import (
    ActionSchema,
    EventKey,
    EventSpace,
    ForethoughtError,
    PolicyNode,
    PolicyTree,
    WorldState,
)

from ._backend import GenerationStatus, ModelBackend
from ._forecaster import Forecaster
from ._gate import ModelGate
from ._prompt import state_context

__all__ = ["Branch", "Planner", "PlannerConfig", "PlannerStats"]

log = logging.getLogger("forethought.planner")


class PlannerConfig(BaseModel):
    """Planner settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """Whether the agent runs a planner at all (off: the live tiers and the default only)."""
    batch_size: int = Field(default=8, ge=1, le=64)
    """Most branches generated in one batch."""
    max_prefill_s: float = Field(default=0.6, gt=0)
    """A batch's prefill cannot be interrupted: batches shrink so it stays under this."""
    max_depth: int = Field(default=2, ge=1, le=3)
    """How many events ahead to plan where effects change the state."""
    expand_top: int = Field(default=4, ge=0)
    """How many likely events of the current state are expanded one level deeper."""
    min_value: float = Field(default=1e-3, ge=0)
    """Branches worth less than this are not planned: the planner sleeps instead."""
    relaxed_urgency: float = Field(default=0.3, ge=0, le=1)
    """Urgency of an event the live tiers could still answer in time."""
    margin_s: float = Field(default=0.02, ge=0)
    """Publishing and actuation time kept aside from each deadline."""
    max_new_tokens: int = Field(default=48, ge=4)
    batch_timeout_s: float = Field(default=60.0, gt=0)
    retry_base_s: float = Field(default=0.5, gt=0)
    retry_max_s: float = Field(default=30.0, gt=0)


@dataclass(frozen=True, slots=True)
class Branch:
    """A branch the planner may generate: event ``key`` in state ``state``."""

    state: WorldState
    key: EventKey
    probability: float
    value: float
    next_fingerprint: str | None


@dataclass(slots=True)
class PlannerStats:
    """What the planner has done."""

    rounds: int = 0
    branches: int = 0
    tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0
    busy_s: float = 0.0
    idle_waits: int = 0
    cover_times_s: list[float] = field(default_factory=list)
    """After each state change: seconds until its most likely events were all covered."""

    def as_dict(self) -> dict[str, Any]:
        """Plain data for reports."""
        return {
            "rounds": self.rounds,
            "branches": self.branches,
            "tokens": self.tokens,
            "errors": dict(self.errors),
            "cancelled": self.cancelled,
            "busy_s": self.busy_s,
            "idle_waits": self.idle_waits,
            "cover_times_s": list(self.cover_times_s),
        }


class Planner:
    """Fills the policy tree while the system is idle.

    Args:
        backend: the model.
        gate: shared with the executor, which preempts the planner through it.
        space: the event space.
        schema: the action schema.
        tree: where planned actions go.
        forecaster: p(next event).
        description: the task context given to the model.
        state: the initial state.
        config: settings.

    """

    def __init__(
        self,
        *,
        backend: ModelBackend,
        gate: ModelGate,
        space: EventSpace,
        schema: ActionSchema,
        tree: PolicyTree,
        forecaster: Forecaster,
        description: str,
        state: WorldState,
        config: PlannerConfig | None = None,
        cover_top: int = 8,
    ) -> None:
        self._backend = backend
        self._gate = gate
        self._space = space
        self._schema = schema
        self._tree = tree
        self._forecaster = forecaster
        self._description = description
        self._state = state
        self._config = config or PlannerConfig()
        self._cover_top = cover_top
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._covered = asyncio.Event()
        self._retry_at: dict[tuple[str, EventKey], tuple[float, int]] = {}
        self._cover_watch: tuple[float, str, list[EventKey]] | None = None
        self.stats = PlannerStats()
        self.sleeping = False

    @staticmethod
    def _now() -> float:
        # The loop's clock: virtual in a simulated replay, monotonic otherwise.
        return asyncio.get_running_loop().time()

    # -- inputs -------------------------------------------------------------------------------

    @property
    def state(self) -> WorldState:
        """The state the planner plans for."""
        return self._state

    def set_state(self, state: WorldState) -> None:
        """Plan for ``state`` now; its most likely events become the first work."""
        changed = state.fingerprint != self._state.fingerprint
        self._state = state
        if changed:
            self.track_cover()
        self.wake()

    def track_cover(self) -> None:
        """Start timing how long the current state's most likely events take to cover."""
        fp = self._state.fingerprint
        top = [k for k, _ in self._forecaster.top(fp, self._cover_top)]
        self._cover_watch = (self._now(), fp, top)
        self._covered.clear()
        self._check_cover()

    async def wait_covered(self) -> float:
        """Wait until the tracked state's most likely events are covered; returns seconds."""
        await self._covered.wait()
        return self.stats.cover_times_s[-1]

    def observe(self, key: EventKey | None) -> None:
        """An event was decided: learn from it and re-plan."""
        self._forecaster.observe(key, self._state.fingerprint)
        self.wake()

    def wake(self) -> None:
        """Ask the planner to look for work (state change, new event, eviction)."""
        self._idle.clear()
        self._wake.set()

    async def wait_idle(self) -> None:
        """Return once the planner has nothing valuable left and sleeps."""
        await self._idle.wait()

    # -- ranking ------------------------------------------------------------------------------

    def _urgencies(self) -> dict[str, float]:
        """Urgency per event type: high where the live tiers could not answer in time."""
        lat = self._backend.latency
        live = lat.call(32, lat.typical_steps()).p95
        cfg = self._config
        return {
            name: 1.0 if spec.deadline_ms / 1e3 - cfg.margin_s < live else cfg.relaxed_urgency
            for name, spec in self._space.types.items()
        }

    def candidates(self) -> list[Branch]:
        """Uncovered branches worth planning, most valuable first.

        Runs on the event loop after every observed event, so it stays cheap: urgencies are
        computed once per type, and a level stops at the first key whose probability alone
        is below ``min_value`` (keys come most likely first).
        """
        now = self._now()
        cfg = self._config
        urgency = self._urgencies()
        types = self._space.types
        out: list[Branch] = []
        levels: list[tuple[WorldState, float, EventKey | None]] = [(self._state, 1.0, None)]
        for depth in range(cfg.max_depth):
            next_levels: list[tuple[WorldState, float, EventKey | None]] = []
            expand = depth + 1 < cfg.max_depth
            for state, reach, previous in levels:
                fp = state.fingerprint
                dist = self._forecaster.top(fp, len(self._space), previous)
                for rank, (key, p) in enumerate(dist):
                    joint = reach * p
                    if joint < cfg.min_value and not (expand and rank < cfg.expand_top):
                        break
                    spec = types[key.type]
                    nxt = None
                    if spec.effects:
                        after = state.after(spec, key)
                        if after.fingerprint != fp:
                            nxt = after.fingerprint
                            if expand and rank < cfg.expand_top:
                                next_levels.append((after, joint, key))
                    if self._tree.lookup(fp, key) is not None:
                        continue
                    retry = self._retry_at.get((fp, key))
                    if retry is not None and retry[0] > now:
                        continue
                    value = joint * urgency[key.type]
                    if value >= cfg.min_value:
                        out.append(Branch(state, key, joint, value, nxt))
            levels = next_levels
        out.sort(key=lambda b: -b.value)
        return out

    def _next_batch(self) -> list[Branch]:
        ranked = self.candidates()
        if not ranked:
            return []
        fp = ranked[0].state.fingerprint
        same = [b for b in ranked if b.state.fingerprint == fp]
        size = self._config.batch_size
        lat = self._backend.latency
        while size > 1 and lat.prefill(size * 32).p95 > self._config.max_prefill_s:
            size //= 2
        return same[:size]

    # -- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Plan forever (until cancelled)."""
        while True:
            self._wake.clear()
            # Let ready I/O callbacks (a decision being published) go before ranking work.
            await asyncio.sleep(0)
            batch = self._next_batch()
            if not batch:
                self.sleeping = True
                self.stats.idle_waits += 1
                self._idle.set()
                await self._wake.wait()
                self.sleeping = False
                continue
            await self._run_batch(batch)

    async def _run_batch(self, batch: list[Branch]) -> None:
        cfg = self._config
        state = batch[0].state
        context = state_context(self._description, state.to_json())
        events = [b.key.describe() for b in batch]
        async with self._gate.background() as cancel:
            t0 = self._now()
            try:
                gens = await self._backend.generate(
                    context,
                    events,
                    self._schema,
                    deadline=self._now() + cfg.batch_timeout_s,
                    cancel=cancel,
                    max_new_tokens=cfg.max_new_tokens,
                )
            except (ForethoughtError, RuntimeError, ValueError) as exc:
                # A model failure must never stop planning: count it, back off, go on.
                self.stats.busy_s += self._now() - t0
                self._count_error(type(exc).__name__)
                log.warning("planner batch failed: %s", exc)
                for b in batch:
                    self._backoff(b)
                await asyncio.sleep(min(cfg.retry_base_s, cfg.retry_max_s))
                return
            self.stats.busy_s += self._now() - t0
        self.stats.rounds += 1
        for branch, gen in zip(batch, gens, strict=True):
            if gen.ok and gen.action is not None:
                self._tree.insert(
                    PolicyNode(
                        fingerprint=branch.state.fingerprint,
                        key=branch.key,
                        action=self._schema.readable(gen.action),
                        compact=gen.text,
                        probability=branch.probability,
                        model_id=self._backend.model_id,
                        tokens=gen.output_tokens,
                        gen_seconds=gen.seconds,
                        created_at=self._now(),
                        next_fingerprint=branch.next_fingerprint,
                    )
                )
                self._retry_at.pop((branch.state.fingerprint, branch.key), None)
                self.stats.branches += 1
                self.stats.tokens += gen.output_tokens
            elif gen.status in (
                GenerationStatus.CANCELLED,
                GenerationStatus.DEADLINE,
                GenerationStatus.NOT_STARTED,
            ):
                self.stats.cancelled += 1  # preempted: it stays a candidate
            else:
                self._count_error(gen.status.value)
                self._backoff(branch)
        self._check_cover()

    def _count_error(self, kind: str) -> None:
        self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1

    def _backoff(self, branch: Branch) -> None:
        ident = (branch.state.fingerprint, branch.key)
        _, tries = self._retry_at.get(ident, (0.0, 0))
        delay = min(self._config.retry_base_s * 2**tries, self._config.retry_max_s)
        self._retry_at[ident] = (self._now() + delay, tries + 1)
        loop = asyncio.get_running_loop()
        loop.call_later(delay, self.wake)  # the branch becomes a candidate again then

    def _check_cover(self) -> None:
        if self._cover_watch is None:
            return
        started, fp, keys = self._cover_watch
        if all(self._tree.lookup(fp, k) is not None for k in keys):
            self.stats.cover_times_s.append(self._now() - started)
            self._cover_watch = None
            self._covered.set()

    def coverage(self) -> float:
        """Next-event probability mass the tree answers in the current state."""
        fp = self._state.fingerprint
        return self._forecaster.coverage(fp, lambda k: self._tree.lookup(fp, k) is not None)
