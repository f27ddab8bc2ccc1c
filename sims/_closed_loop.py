"""Closed-loop replay: the world answers each action, and what comes next depends on it.

Each strategy plays ``episodes`` episodes (seeds ``seed``, ``seed + 1``, ...) against a fresh
world and a fresh agent, on the same clock as an open-loop replay (virtual time charged by the
device profile, or the real clock). Per episode:

* the world is reset with the seed; what it emits is scheduled at its delays, and its own
  clock ticks every ``tick_ms`` whether or not the agent has decided;
* each event reaches the agent after perception and is decided as in :mod:`._replay`
  (live-naive queues FIFO on one model, the others run the executor);
* at the decision -- or at the deadline, if none came by then -- the world receives the
  action that took effect: the agent's, or the spec's default on a miss (the late answer is
  recorded, never delivered), and schedules what follows;
* the episode ends on an outcome; a world that raises, emits an undeclared event type, goes
  quiet or runs past ``max_steps`` ends it with a :class:`WorldError` naming the world and the
  step, and the strategy's other episodes, and the other strategies, still run.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from forethought.models import LatencyProfile
from forethought.planner import PlannerConfig
from forethought.runtime import Agent

from ._loop_deciders import Decided, NaiveDecider, agent_decide
from ._reactions import make_world
from ._records import StrategyRun
from ._replay import STRATEGIES, BackendSource, CallMemo, _Strategy, _strategy_config
from ._scenario import Scenario
from ._trace_event import TraceEvent
from ._vloop import run_virtual
from ._world import Applied, Emission, Outcome, World, WorldError, WorldEvent, WorldStep

__all__ = [
    "ClosedLoopRun",
    "Episode",
    "Moment",
    "WorldFactory",
    "closed_loop_replay",
    "scenario_world",
]

WorldFactory = Callable[[], World]
"""Makes a fresh world (one per strategy: a world may keep state between episodes)."""


def scenario_world(scenario: Scenario) -> WorldFactory:
    """The world of a scenario's ``world`` block (its own events reseeded per episode)."""
    block = scenario.world
    if block is None:
        raise ValueError(f"scenario {scenario.name!r} has no world block: it replays open loop")

    def events(seed: int) -> list[TraceEvent]:
        gen = scenario.generate
        if gen is None:
            return scenario.events()
        reseeded = gen.model_copy(update={"seed": gen.seed + seed})
        return scenario.model_copy(update={"generate": reseeded}).events()

    return lambda: make_world(scenario.name, scenario.spec, block, events)


@dataclass(frozen=True, slots=True)
class Moment:
    """A line of an episode's timeline: what happened at ``at_ms`` and what caused it.

    ``kind``: ``event`` (the world emitted it: ``cause`` is the event whose action led to it --
    for a tick, the last one acted on since the previous tick -- None when no action did),
    ``action`` (what took effect for event ``cause``), ``end``.
    """

    at_ms: float
    kind: str
    text: str
    cause: int | None = None
    defaulted: bool = False
    """For an action: the world received the default (a fallback, or no decision in time)."""
    index: int | None = None
    """For an event: its index in the episode (what ``cause`` and the records name)."""

    def as_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "defaulted": self.defaulted,
            "at_ms": round(self.at_ms, 3),
            "kind": self.kind,
            "text": self.text,
            "cause": self.cause,
            "index": self.index,
        }


@dataclass(slots=True)
class Episode:
    """One episode under one strategy."""

    seed: int
    score: float = 0.0
    outcome: Outcome | None = None
    steps: int = 0
    """World calls made (reset, ticks, actions)."""
    duration_ms: float = 0.0
    error: str | None = None
    run: StrategyRun = field(default_factory=lambda: StrategyRun(""))
    timeline: list[Moment] = field(default_factory=list)

    @property
    def success(self) -> bool:
        """Ended on a success outcome."""
        return self.outcome is not None and self.outcome.success

    @property
    def failure(self) -> bool:
        """Ended on a failure outcome."""
        return self.outcome is not None and self.outcome.failure


@dataclass(slots=True)
class ClosedLoopRun:
    """One strategy's episodes."""

    strategy: str
    world: str
    episodes: list[Episode] = field(default_factory=list)
    wall_s: float = 0.0

    def records_run(self) -> StrategyRun:
        """Every episode's records as one run (answered and correct in time are over these)."""
        out = StrategyRun(self.strategy)
        for ep in self.episodes:
            out.records.extend(ep.run.records)
            out.models = out.models or ep.run.models
        return out


class _Episode:
    """One episode's loop: the world, the decider, time, and what each action caused."""

    def __init__(
        self,
        scenario: Scenario,
        world: World,
        decide: Callable[[int, TraceEvent, float], Coroutine[Any, Any, Decided]],
        missed: Callable[[int, TraceEvent, float], None],
        episode: Episode,
        max_steps: int,
    ) -> None:
        self.sc = scenario
        self.world = world
        self.decide = decide
        self.missed = missed
        self.ep = episode
        self.max_steps = max_steps
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.types = {t.type for t in scenario.spec.events}
        schema = scenario.spec.action_schema()
        self.default = schema.readable(schema.validate(scenario.spec.default_action))
        self.tasks: set[asyncio.Task[None]] = set()
        self.ended = asyncio.Event()
        self.next_index = 0
        self.patch: dict[str, Any] = {}
        # The last event whose action the world received since its last tick: what a tick
        # emits follows from that action (an env steps with it).
        self.acted: int | None = None

    def now_ms(self) -> float:
        return (self.loop.time() - self.t0) * 1e3

    def _spawn(self, coro: Any, name: str) -> None:
        # Owned here: run() drops each as it finishes, aclose() cancels and awaits the rest.
        self.tasks.add(self.loop.create_task(coro, name=name))

    def _fail(self, call: str, problem: str) -> None:
        if self.ep.error is None:
            err = WorldError(self.world.name, self.ep.steps, call, self.now_ms(), problem)
            self.ep.error = str(err)
        self.ended.set()

    def _call(self, call: str, fn: Callable[[], object], cause: int | None) -> None:
        """One world call, checked; what it answers is scheduled."""
        if self.ended.is_set():
            return
        self.ep.steps += 1
        if self.ep.steps > self.max_steps:
            self._fail(call, f"never ended: {self.max_steps} steps without an outcome")
            return
        try:
            step = fn()
        except Exception as exc:
            self._fail(call, f"raised {type(exc).__name__}: {exc}")
            return
        if not isinstance(step, WorldStep):
            self._fail(call, f"answered {type(step).__name__}, not a WorldStep")
            return
        for em in step.events:
            if em.type is not None and em.type not in self.types:
                self._fail(
                    call,
                    f"emitted an undeclared event type {em.type!r}; "
                    f"the spec declares {sorted(self.types)}",
                )
                return
            if not em.after_ms >= 0 or math.isinf(em.after_ms):
                self._fail(call, f"emitted {em.describe()!r} after {em.after_ms} ms")
                return
        self.ep.score += step.reward
        if step.state:
            self.patch.update(step.state)
        for em in step.events:
            self._spawn(self._emit(em, cause), f"world.emit[{self.ep.steps}]")
        if step.outcome is not None:
            self._end(step.outcome, cause)

    def _end(self, outcome: Outcome, cause: int | None) -> None:
        if self.ended.is_set():
            return
        self.ep.outcome = outcome
        self.ep.score += outcome.score
        self.ep.timeline.append(Moment(self.now_ms(), "end", outcome.describe(), cause))
        self.ended.set()

    async def _emit(self, em: Emission, cause: int | None) -> None:
        await asyncio.sleep(em.after_ms / 1e3)
        if self.ended.is_set():
            return
        if em.type is None:
            if em.outcome is not None:
                self._end(em.outcome, cause)
            return
        i, self.next_index = self.next_index, self.next_index + 1
        state = {**self.patch, **(em.state or {})} or None
        self.patch = {}
        ev = TraceEvent(
            at_ms=self.now_ms(),
            type=em.type,
            params=em.params,
            deadline_ms=em.deadline_ms,
            state=state,
        )
        self.ep.timeline.append(Moment(ev.at_ms, "event", em.describe(), cause, index=i))
        await self._dispatch(i, ev)

    async def _dispatch(self, i: int, ev: TraceEvent) -> None:
        stimulus = self.loop.time()
        deadline = stimulus + self.sc.deadline_ms(ev) / 1e3
        task: asyncio.Task[Decided] | None = None
        try:
            await asyncio.sleep(self.sc.perception_s(ev))
            task = self.loop.create_task(
                self.decide(i, ev, stimulus), name=f"closed_loop.decide[{i}]"
            )
            done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - self.loop.time()))
            d = task.result() if done else None
            world_ev = WorldEvent(i, ev.type, dict(ev.params), ev.at_ms)
            if d is not None and d.met:
                applied = Applied(world_ev, d.action, self.now_ms(), d.tier, d.tier == "default")
                text = f"{_short(d.action)} ({d.tier}, in time)"
            else:
                applied = Applied(
                    world_ev, dict(self.default), self.now_ms(), "default", True, True
                )
                text = f"{_short(self.default)} (default: no decision by the deadline)"
            if not self.ended.is_set():
                moment = Moment(self.now_ms(), "action", text, i, applied.defaulted)
                self.ep.timeline.append(moment)
            self._call(f"act on event {i} ({ev.type})", lambda: self.world.act(applied), i)
            self.acted = i
            if not done:
                await task  # recorded as late; never delivered
        finally:
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if task is None or task.cancelled():
                # The episode ended first (a queued naive call, a decision under way): the
                # event still counts, as unanswered, so every share is over every event.
                self.missed(i, ev, stimulus)

    async def _ticks(self, tick_ms: float) -> None:
        n = 0
        while not self.ended.is_set():
            n += 1
            await asyncio.sleep(max(0.0, self.t0 + n * tick_ms / 1e3 - self.loop.time()))
            cause, self.acted = self.acted, None
            self._call("tick", functools.partial(self.world.tick, self.now_ms()), cause)

    async def run(self) -> None:
        self._call(f"reset(seed={self.ep.seed})", lambda: self.world.reset(self.ep.seed), None)
        tick = self.world.tick_ms
        if tick is not None and not self.ended.is_set():
            self._spawn(self._ticks(float(tick)), "world.tick")
        ended = self.loop.create_task(self.ended.wait(), name="closed_loop.ended")
        try:
            while not self.ended.is_set():
                if not self.tasks:
                    self._fail("(waiting)", "went quiet: nothing scheduled and no outcome")
                    break
                done, _ = await asyncio.wait(
                    {ended, *self.tasks}, return_when=asyncio.FIRST_COMPLETED
                )
                self.tasks.difference_update(done)
                for t in done:  # a decider's error (the model's) is not the world's: raise it
                    if t is not ended and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
        finally:
            self.ep.duration_ms = self.now_ms()
            ended.cancel()
            await asyncio.gather(ended, return_exceptions=True)
            await self.aclose()

    async def aclose(self) -> None:
        """Cancel the episode's tasks still running and wait for them."""
        pending = list(self.tasks)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self.tasks.clear()


def _short(action: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in action.items())


async def _episode(
    st: _Strategy,
    world: World,
    episode: Episode,
    planner: PlannerConfig,
    memo: CallMemo,
    max_steps: int,
) -> None:
    sc = st.scenario
    loop = asyncio.get_running_loop()
    schema = sc.spec.action_schema()
    default = schema.readable(schema.validate(sc.spec.default_action))

    def missed(i: int, ev: TraceEvent, stimulus: float) -> None:
        st.record(
            i, ev, latency_s=loop.time() - stimulus, tier="default", action=dict(default),
            met=False, context="", event_text=ev.describe(), state=dict(sc.spec.state),
            skipped=("episode ended before a decision",),
        )  # fmt: skip

    if st.name == "live-naive":
        async with st.backend() as backend:
            await backend.prepare(schema)
            naive = NaiveDecider(st, backend, memo)
            await _Episode(sc, world, naive.decide, missed, episode, max_steps).run()
        return
    agent = Agent(sc.spec, backend=st.backend(), config=_strategy_config(st.name, planner))
    async with agent:
        st.run.models = agent.models()

        async def decide(i: int, ev: TraceEvent, stimulus: float) -> Decided:
            return await agent_decide(st, agent, i, ev, stimulus)

        await _Episode(sc, world, decide, missed, episode, max_steps).run()


def closed_loop_replay(
    scenario: Scenario,
    backend: BackendSource,
    world: WorldFactory,
    *,
    strategies: tuple[str, ...] = STRATEGIES,
    episodes: int = 3,
    clock: str = "virtual",
    profile: LatencyProfile | None = None,
    seed: int | None = None,
    planner: PlannerConfig | None = None,
    max_steps: int = 10_000,
    progress: Callable[[], None] = lambda: None,
) -> dict[str, ClosedLoopRun]:
    """Play ``episodes`` episodes of ``world`` under each strategy; the runs by name.

    ``backend`` and ``profile`` are :func:`replay`'s. Episode ``k`` is seeded ``seed + k``
    (default: the scenario's seed) for the world and for the charged model time, so a replay
    is byte-identical for a seed on the virtual clock. A world error ends its episode (its
    ``error`` says which world, which step, what) and the replay goes on.
    """
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {STRATEGIES}")
    if clock not in ("virtual", "real"):
        raise ValueError(f"clock must be virtual or real (got {clock!r})")
    planner = planner or PlannerConfig()
    base = scenario.seed if seed is None else seed
    memo: CallMemo = {}
    out: dict[str, ClosedLoopRun] = {}
    for name in strategies:
        w = world()
        run = ClosedLoopRun(name, w.name)
        t0 = time.perf_counter()
        for k in range(episodes):
            ep = Episode(base + k)
            st = _Strategy(scenario, name, backend, profile, base + k)
            coro = _episode(st, w, ep, planner, memo, max_steps)
            run_virtual(coro) if clock == "virtual" else asyncio.run(coro)
            ep.run = st.finish()
            run.episodes.append(ep)
            progress()
        run.wall_s = time.perf_counter() - t0
        out[name] = run
    return out
