"""The replay loop: one trace, several strategies, one record per event and strategy.

Every strategy is run by the real runtime, configured, on a backend of its own (fresh prefix
cache and latency fit: no strategy inherits another's warm state):

* ``live-naive`` -- a typical per-event LLM call: the verbose form, the full prompt every time
  (no prefix reuse, no jump-forward), not cut at the deadline; events queue FIFO.
* ``live`` -- the strongest live caller we build: the executor's live tier without a tree
  (compact, constrained, cached state prefix, jump-forward, started only when its p95 fits,
  cut at the deadline), then the default.
* ``tree`` -- the planner fills the tree in idle time; an event gets its tree answer, or the
  default.
* ``hybrid`` -- the whole executor: tree, score, live, default.

With the virtual clock each strategy runs on a :class:`VirtualTimeLoop` and its backend reads a
:class:`ChargedClock`: model calls are real, their passes are charged by the device profile,
and the result is deterministic for a scenario, seed, model and profile. With the real clock
the same replay runs on a normal loop and the backend's passes take the time they take.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from forethought.models import DecodeOptions, Generation, LatencyProfile, LoopClock, ModelBackend
from forethought.models.internals import Pass, state_text
from forethought.planner import PlannerConfig
from forethought.policies import ActionForm, ActionSchema, WorldState
from forethought.runtime import Agent, AgentConfig, Decision, Event, ExecutorConfig, Tier

from ._call_log import LoggedClock
from ._charged import ChargedClock
from ._records import Record, StrategyRun
from ._scenario import Scenario
from ._trace_event import TraceEvent
from ._vloop import VirtualTimeLoop, run_virtual
from ._waste import waste_figures

if TYPE_CHECKING:
    # The local model (torch): only named in annotations, so the sims import without it.
    from forethought.models import TransformersBackend

__all__ = ["NAIVE_OPTIONS", "STRATEGIES", "CallMemo", "Record", "StrategyRun", "replay"]

STRATEGIES = ("live-naive", "live", "tree", "hybrid")
"""The strategies a replay runs side by side: ``live-naive`` (a typical per-event LLM call),
``live`` (the executor's live tier, no tree), ``tree`` (the planner's tree, else the default)
and ``hybrid`` (the whole executor: tree, score, live, default)."""
_T = TypeVar("_T")

BackendSource: TypeAlias = "TransformersBackend | Callable[[], ModelBackend]"
"""A loaded real model (each strategy gets a fresh backend on its weights), or a factory."""

PlannerSource = Callable[[], ModelBackend]
"""A factory of the planner's own model (an inference server, say), one per strategy."""

CallMemo = dict[tuple[str, str], tuple[Generation, list[Pass]]]
"""(context, event) -> a completed naive call and the shapes of the passes it ran."""


NAIVE_OPTIONS = DecodeOptions(form=ActionForm.VERBOSE, reuse_prefix=False, jump_forward=False)
"""How live-naive decodes: verbose, the whole prompt every call, no forced-token jumps."""


def _strategy_config(name: str, planner: PlannerConfig) -> AgentConfig:
    flags = {
        "live": {"use_tree": False, "use_score": False, "use_live": True},
        "tree": {"use_tree": True, "use_score": False, "use_live": False},
        "hybrid": {"use_tree": True, "use_score": True, "use_live": True},
    }[name]
    return AgentConfig.defaults(
        executor=ExecutorConfig(**flags),
        planner=planner.model_copy(update={"enabled": name != "live"}),
    )


class _Strategy:
    """One strategy's run: its backend, clock, and records."""

    def __init__(
        self,
        scenario: Scenario,
        name: str,
        source: BackendSource,
        profile: LatencyProfile | None,
        seed: int,
        planner_source: PlannerSource | None = None,
    ) -> None:
        self.scenario = scenario
        self.planner_source = planner_source
        self.name = name
        self.source = source
        self.profile = profile
        self.seed = seed
        self.run = StrategyRun(name)
        self.clock: ChargedClock | None = None
        self.calls: LoggedClock | None = None

    def backend(self) -> ModelBackend:
        """A fresh backend for this strategy, on this loop's clock."""
        options = NAIVE_OPTIONS if self.name == "live-naive" else None
        if callable(self.source):  # a factory; a loaded TransformersBackend is not callable
            return self.source()
        loop = asyncio.get_running_loop()
        if isinstance(loop, VirtualTimeLoop):
            if self.profile is None:
                raise ValueError("a virtual replay of a real model needs a device profile")
            self.clock = ChargedClock(loop, self.profile, seed=self.seed)
        # Every call is logged on either clock, so a gap between them can be read call by call.
        # The latency model learns from the charged passes as the real one learns from measured
        # ones, from the same prior: a virtual live tier decides to start (or not) on what it
        # has seen, never on the profile it could not know.
        self.calls = LoggedClock(self.clock or LoopClock(loop), loop.time())
        twin = self.source.sharing(clock=self.calls, options=options)
        self.calls.watch(twin.latency, ExecutorConfig().event_tokens)
        return twin

    def record(
        self,
        i: int,
        ev: TraceEvent,
        *,
        latency_s: float,
        tier: str,
        action: dict[str, Any],
        met: bool,
        context: str,
        event_text: str,
        state: dict[str, Any],
        nearest: str | None = None,
        out_of_space: bool = False,
        cpu_ms: float = 0.0,
        skipped: tuple[str, ...] = (),
        budget_ms: float | None = None,
        guarded: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Append the record of event ``i``."""
        sc = self.scenario
        self.run.records.append(
            Record(
                self.name,
                i,
                ev.type,
                ev.params,
                ev.at_ms,
                sc.deadline_ms(ev),
                latency_s * 1e3,
                tier,
                action,
                met,
                nearest is not None,
                out_of_space,
                sc.grade(ev, action, state),
                cpu_ms,
                context,
                event_text,
                nearest,
                skipped,
                budget_ms,
                guarded,
            )
        )

    def finish(self) -> StrategyRun:
        """The run, records in event order, with the charged model time."""
        self.run.records.sort(key=lambda r: r.index)
        if self.calls is not None:
            self.run.calls = list(self.calls.entries)
        if self.clock is not None:
            self.run.model = {
                "passes": self.clock.passes,
                "charged_s": self.clock.charged_s,
                "overhead_s": self.clock.overhead_s,
                "idle_s": self.clock.idle_s,
                "idle_calls": self.clock.idle_calls,
            }
        return self.run


async def _live_naive(
    st: _Strategy, events: list[TraceEvent], progress: Callable[[], None], memo: CallMemo
) -> None:
    """One model server, FIFO: each event waits for the ones before it; nothing is cut.

    A naive call runs to completion, so with the virtual clock a repeated prompt reuses the
    model's output and replays the recorded passes on the charged clock (the same charge as
    computing it again, draw for draw).
    """
    loop = asyncio.get_running_loop()
    sc = st.scenario
    spec = sc.spec
    schema = spec.action_schema()
    default = schema.readable(schema.validate(spec.default_action))
    state = spec.initial_state()
    space = spec.event_space()
    async with st.backend() as backend:
        await backend.prepare(schema)
        t0 = loop.time()
        if st.calls is not None:
            st.calls.origin = t0
        for i, ev in enumerate(events):
            stimulus = t0 + ev.at_ms / 1e3
            await asyncio.sleep(max(0.0, stimulus + sc.perception_s(ev) - loop.time()))
            if ev.state:
                state = state.patched(ev.state)
            key = space.key(ev.type, ev.params)
            text = key.describe() if key is not None else ev.describe()
            context = state_text(spec.description, state.to_json())
            g = await _naive_call(st, backend, memo, context, text, schema)
            action = schema.readable(g.action) if g.action is not None else default
            done = loop.time()
            st.record(
                i,
                ev,
                latency_s=done - stimulus,
                tier="live" if g.ok else "default",
                action=action,
                met=done <= stimulus + sc.deadline_ms(ev) / 1e3 + 1e-9,  # 1 ns: float noise
                context=context,
                event_text=text,
                state=state.data,
                out_of_space=key is None,
            )
            if key is not None and space.types[key.type].effects:
                state = state.after(space.types[key.type], key)
            progress()


async def _naive_call(
    st: _Strategy,
    backend: ModelBackend,
    memo: CallMemo,
    context: str,
    text: str,
    schema: ActionSchema,
) -> Generation:
    clock = st.clock
    hit = memo.get((context, text)) if clock is not None else None
    if hit is not None and clock is not None:
        gen, passes = hit
        await clock.replay(passes)
        return gen
    log = clock.record() if clock is not None else []
    try:
        (gen,) = await backend.generate(
            context, [text], schema, deadline=math.inf, max_new_tokens=128
        )
    finally:
        if clock is not None:
            clock.stop_recording()
    if clock is not None:
        memo[context, text] = (gen, list(log))
    return gen


async def _agent_run(
    st: _Strategy,
    events: list[TraceEvent],
    progress: Callable[[], None],
    planner: PlannerConfig,
) -> None:
    """live, tree or hybrid: the Agent, configured, events arriving on time."""
    loop = asyncio.get_running_loop()
    sc = st.scenario
    remote = st.planner_source() if st.planner_source is not None else None
    agent = Agent(
        sc.spec,
        backend=st.backend(),
        planner_backend=remote,
        config=_strategy_config(st.name, planner),
    )
    async with agent:
        st.run.models = agent.models()
        if agent.planner is None:
            st.run.models["tree"] = None
        planner_ = agent.planner
        t0 = loop.time()
        if st.calls is not None:
            st.calls.origin = t0
        types = list(sc.spec.event_space().types)
        visited: set[str] = set()

        async def one(i: int, ev: TraceEvent, stimulus: float) -> None:
            _, state = await decide_and_record(st, agent, i, ev, stimulus)
            visited.update(state.fingerprint_for(t) for t in types)
            progress()

        async with asyncio.TaskGroup() as tg:
            for i, ev in enumerate(events):
                stimulus = t0 + ev.at_ms / 1e3
                await asyncio.sleep(max(0.0, stimulus + sc.perception_s(ev) - loop.time()))
                if planner_ is not None:
                    busy = planner_.stats.busy_s / max(loop.time() - t0, 1e-9)
                    st.run.timeline.append((loop.time() - t0, planner_.coverage(), busy))
                tg.create_task(one(i, ev, stimulus), name=f"sim.event[{i}]")
        if agent.planner is not None:
            tree_hits = sum(r.tier == Tier.TREE.value for r in st.run.records)
            st.run.planner = _planner_figures(agent, visited, tree_hits, loop.time() - t0)


async def decide_and_record(
    st: _Strategy, agent: Agent, i: int, ev: TraceEvent, stimulus: float
) -> tuple[Decision, WorldState]:
    """Decide trace event ``i`` through ``agent`` and record it.

    Returns the decision and the state it was decided in.

    One path for the open-loop replay and the closed loop's agent strategies: the event's
    absolute deadline from its stimulus, the tree selection's cost on a charged clock, the
    record with everything the scoreboard reads.
    """
    loop = asyncio.get_running_loop()
    sc = st.scenario
    event = Event(
        str(i),
        ev.type,
        dict(ev.params),
        arrived_at=loop.time(),
        deadline=stimulus + sc.deadline_ms(ev) / 1e3,
        state=ev.state,
    )
    state = agent.state if not ev.state else agent.state.patched(ev.state)
    if st.clock is not None:
        # The executor's own work (tree selection) costs real time on a real loop.
        await asyncio.sleep(st.clock.select_cost())
    c0 = time.perf_counter()
    d = await agent.decide(event)
    cpu = (time.perf_counter() - c0) * 1e3
    st.record(
        i,
        ev,
        latency_s=d.decided_at - stimulus,
        tier=d.tier.value,
        action=d.action,
        met=d.met,
        context=state_text(sc.spec.description, state.to_json()),
        event_text=d.key.describe() if d.key is not None else ev.describe(),
        state=state.data,
        nearest=d.nearest,
        out_of_space=d.out_of_space,
        cpu_ms=cpu,
        skipped=tuple(f"{tier}: {why}" for tier, why in d.skipped),
        budget_ms=d.budget_s * 1e3,
        guarded=d.guarded,
    )
    return d, state


def _planner_figures(
    agent: Agent, visited: set[str], tree_hits: int, total_s: float
) -> dict[str, Any]:
    """What the planner did over a replay, and how much of it was never used.

    ``generated`` counts every branch the planner wrote (one planned twice, after an eviction,
    counts twice); ``used`` the distinct branches that answered an event; ``waste`` is
    never-used over generated. Never-used branches still in the tree are split by whether
    their state came at all (``unused_state_visited``) or never did (``unused_state_never``:
    a look-ahead that did not come true); ``evicted_unused`` left the tree unused. Branches
    kept from the executor's answers (``answers_kept``, hit ``answer_hits`` times) are not
    the planner's work and count in none of these.
    """
    assert agent.planner is not None
    stats = agent.planner.stats.as_dict()
    tree = agent.tree
    nodes = list(tree.nodes())
    planned = [n for n in nodes if n.origin == "planned"]
    unused = [n for n in planned if not tree.was_used(n.fingerprint, n.key)]
    generated = stats["branches"]
    never = max(generated - tree.used, 0)
    busy = stats["busy_s"]
    return {
        "branches": generated,
        "generated": generated,
        "used": tree.used,
        "never_used": never,
        "waste": never / generated if generated else 0.0,
        "unused_state_visited": sum(n.fingerprint in visited for n in unused),
        "unused_state_never": sum(n.fingerprint not in visited for n in unused),
        "evicted_unused": tree.evicted_unused,
        "below_cost": stats["below_cost"],
        "tokens": stats["tokens"],
        "errors": stats["errors"],
        "busy_s": busy,
        "idle_used": busy / total_s if total_s > 0 else 0.0,
        "tree_answers_per_planner_s": tree_hits / busy if busy > 0 else None,
        "used_branches_per_planner_s": tree.used / busy if busy > 0 else None,
        "tree_nodes": len(nodes),
        "answers_kept": len(nodes) - len(planned),
        "answer_hits": tree.answer_hits,
        "states_planned": len({n.fingerprint for n in nodes}),
        "cover_times_s": stats["cover_times_s"],
    }


def replay(
    scenario: Scenario,
    backend: BackendSource,
    *,
    strategies: tuple[str, ...] = STRATEGIES,
    clock: str = "virtual",
    profile: LatencyProfile | None = None,
    speed: float = 1.0,
    progress: Callable[[], None] = lambda: None,
    planner: PlannerConfig | None = None,
    seed: int | None = None,
    memo: CallMemo | None = None,
    planner_source: PlannerSource | None = None,
) -> dict[str, StrategyRun]:
    """Replay ``scenario`` under each strategy; returns the runs by name.

    ``backend`` is a loaded :class:`TransformersBackend` (each strategy gets a fresh backend
    on its weights; the virtual clock charges its passes by ``profile``) or a factory called
    once per strategy (a scripted test double spends its own time on the loop). ``seed``
    (default: the scenario's) seeds the charged draws. ``memo`` keeps completed naive calls
    between replays of the same scenario and model (say, under several profiles).
    ``planner_source`` gives the planner a model of its own (an inference server: the real
    clock only, since a server's time cannot be charged to a virtual one).
    """
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; choose from {STRATEGIES}")
    if planner_source is not None and clock != "real":
        raise ValueError("a planner on its own model (a server) replays on the real clock only")
    events = scenario.events()
    if speed != 1.0:
        events = [e.model_copy(update={"at_ms": e.at_ms / speed}) for e in events]
    planner = planner or PlannerConfig()
    seed = scenario.seed if seed is None else seed
    memo = {} if memo is None else memo
    out: dict[str, StrategyRun] = {}
    for name in strategies:
        st = _Strategy(scenario, name, backend, profile, seed, planner_source)
        coro: Coroutine[Any, Any, None] = (
            _live_naive(st, events, progress, memo)
            if name == "live-naive"
            else _agent_run(st, events, progress, planner)
        )
        t0 = time.perf_counter()
        _run(coro, clock)
        run = st.finish()
        run.wall_s = time.perf_counter() - t0
        if run.planner:  # its waste beside what a planner that knew the stream would waste
            run.planner.update(waste_figures(scenario, run))
        out[name] = run
    return out


def _run(coro: Coroutine[Any, Any, _T], clock: str) -> _T:
    return run_virtual(coro) if clock == "virtual" else asyncio.run(coro)
