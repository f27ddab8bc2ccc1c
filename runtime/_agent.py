"""The Agent: a spec, a model, a planner and an executor, living as long as one ``async with``.

Like an aiomqtt client: the constructor takes keyword arguments and does no I/O
(:meth:`Agent.from_file` reads files and the environment). ``async with agent:`` starts the
backend on the running loop (so its deadlines are on that loop's clock), compiles the action
grammar, reloads a tree snapshot if one is configured, and starts one TaskGroup of named tasks:
the planner, and with a bus, the bus's own loop and the serve loop. A start that fails half way
unwinds what it started. Leaving the block cancels the tasks, saves the snapshot, and stops the
bus and the backend, in that order.

The state lives here, in one place: the executor and the planner are handed it as a value.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from forethought.models import ModelBackend
from forethought.models.internals import ModelGate, raise_lost_cancel, wait_cancelled
from forethought.planner.internals import Forecaster, Planner
from forethought.policies import (
    AgentSpec,
    ConfigError,
    EventKey,
    ForethoughtError,
    NotStarted,
    PolicyNode,
    PolicyTree,
    SnapshotError,
    WorldState,
)
from forethought.policies.internals import StateDomain

from ._backend_choice import backend_for
from ._capabilities import (
    SupportsAgentId,
    SupportsBusStats,
    SupportsServerStats,
    SupportsStatus,
)
from ._config import AgentConfig
from ._decision import Decision, Tier
from ._event import Arrival, Event, EventPayload, parse_payload
from ._executor import Executor
from ._freshness import Freshness
from ._health import health_report
from ._health_endpoint import HealthEndpoint
from ._health_report import HealthReport
from ._recorder import McapRecorder
from ._serve import serve
from ._start_steps import NoSteps, StartSteps
from ._watchdog import StallWatchdog
from .fleet._record import prompt_hash
from .transports._bus import EventBus

if TYPE_CHECKING:
    # nats-py is the `fleet` extra: imported when a fleet URL is configured (in __aenter__).
    from .fleet._tree import FleetTree

__all__ = ["Agent"]

log = logging.getLogger("forethought.agent")


class Agent:
    """An agent deciding events of one spec within their deadlines.

    Args:
        spec: what the agent decides about.
        backend: the model (default: made from ``config`` when the agent starts); with no
            ``planner_backend``, the planner's too.
        planner_backend: the planner's own model (default: ``config.planner_model``'s, else
            ``backend``). A separate model gets a gate of its own: planning on it never waits
            for, nor is preempted by, the live tiers.
        recorder: an open :class:`McapRecorder` that gets every event, decision, state change
            and, each second, the planner's figures.
        bus: where events come from (optional; :meth:`decide` works without one).
        config: how to run (default: :meth:`AgentConfig.defaults`, which reads nothing).
        on_stall: with ``config.watchdog.enabled``, called on the watchdog's thread with the
            default decision for each event whose deadline comes while the event loop is
            stalled: the way to the actuator that does not need the loop.
        steps: told each start step (model load or engine start, warm-up) as it begins
            and ends; ``forethought run`` shows them (default: nothing is said).

    """

    def __init__(
        self,
        spec: AgentSpec,
        *,
        backend: ModelBackend | None = None,
        planner_backend: ModelBackend | None = None,
        bus: EventBus | None = None,
        config: AgentConfig | None = None,
        recorder: McapRecorder | None = None,
        on_stall: Callable[[Decision], None] | None = None,
        steps: StartSteps | None = None,
    ) -> None:
        self.spec = spec
        self._steps: StartSteps = steps or NoSteps()
        self._on_stall = on_stall
        self.watchdog: StallWatchdog | None = None
        self.config = config or AgentConfig.defaults()
        self.schema = spec.action_schema()
        self.space = spec.event_space()
        self._backend = backend
        self._planner_backend = planner_backend
        self.bus = bus
        self.recorder = recorder
        self._state = spec.initial_state(max_bytes=self.config.max_state_bytes)
        self._state_domain = StateDomain.of(spec)
        self._undeclared_seen: set[tuple[str, str]] = set()
        self.gate = ModelGate()
        self.tree = PolicyTree(
            max_nodes=self.config.tree_max_nodes,
            on_evict=self._evicted,
            check=self.schema.validate,  # the validator of record, once, as a node enters
        )
        self.forecaster = Forecaster(self.space)
        self.planner: Planner | None = None
        self.fleet: FleetTree | None = None
        """The fleet's shared tree, watched into :attr:`tree` (with ``config.fleet.url``)."""
        self.executor: Executor | None = None
        self.ready = asyncio.Event()
        self.rejected = 0
        self.freshness = Freshness(self.config.events)
        """Judges each served event's age; its counters are in the health report."""
        self.latest_only = frozenset(t.type for t in spec.events if t.latest_only)
        """Event types of which only the newest waiting one is decided."""
        self.snapshot_problem: str | None = None
        self.snapshot_rejected = 0
        """Snapshot nodes refused because their action fails validation."""
        self._stack: contextlib.AsyncExitStack | None = None
        self._runner: asyncio.Task[None] | None = None
        self._started_at: float | None = None
        self.health_endpoint: HealthEndpoint | None = None
        """The HTTP health endpoint, when ``config.health.port`` is set (its ``port``)."""
        self.engines: dict[str, str] = {}
        """Local model -> the engine this agent chose for it (``llama-server`` or ``torch``)."""
        self._notices: set[str] = set()

    @classmethod
    def from_file(
        cls,
        spec: str | Path,
        *,
        config: str | Path | None = None,
        backend: ModelBackend | None = None,
        bus: EventBus | None = None,
    ) -> Agent:
        """An agent for the spec file ``spec``: the one place an agent reads files.

        Configured by the TOML file ``config`` (if any) and ``FORETHOUGHT_*`` environment
        variables. (A simulator scenario's spec: ``forethought.sims.load_spec``.)
        """
        return cls(
            AgentSpec.from_file(spec),
            backend=backend,
            bus=bus,
            config=AgentConfig.load(config),
        )

    @property
    def backend(self) -> ModelBackend:
        """The model backend; raises NotStarted before a default one is made at start."""
        if self._backend is None:
            raise NotStarted("Agent (its default backend is made when it starts)")
        return self._backend

    @property
    def state(self) -> WorldState:
        """The current state."""
        return self._state

    @property
    def health_server(self) -> HealthEndpoint | None:
        """The old name of :attr:`health_endpoint`, read with a warning until the next release.

        *Server* means a model server only (the glossary in docs/design.md).
        """
        warnings.warn(
            "Agent.health_server is now Agent.health_endpoint", FutureWarning, stacklevel=2
        )
        return self.health_endpoint

    @property
    def planner_backend(self) -> ModelBackend:
        """The planner's model (the live tiers' unless a separate one was configured)."""
        return self._planner_backend or self.backend

    def _make_backend(self, model: str) -> ModelBackend:
        backend, choice = backend_for(model, self.config)
        if choice is not None:
            if choice.notice is not None and choice.notice not in self._notices:
                self._notices.add(choice.notice)  # said once, though two roles may ask
                log.warning("%s", choice.notice)
            self.engines[model] = choice.kind
        return backend

    def _load_step(self, model: str, *, given: ModelBackend) -> str:
        """How a model's start is named: the engine this agent chose for it, if it chose."""
        engine = self.engines.get(model)
        if engine == "llama-server":
            return f"model {model}: starting llama-server"
        if engine is not None:
            return f"model {model}: loading on {engine} (a GGUF is converted once, then cached)"
        return f"model {given.model_id}: starting"

    async def _start_models(
        self, stack: contextlib.AsyncExitStack
    ) -> tuple[ModelBackend, ModelBackend, ModelGate]:
        """Start and warm the live model and the planner's: (live, planner's, planner's gate).

        A separate planner model gets a gate of its own.
        """
        cfg = self.config
        live_model = cfg.live_model or cfg.model
        if self._backend is None:
            self._backend = self._make_backend(live_model)
        with self._steps.step(self._load_step(live_model, given=self._backend)):
            backend = await stack.enter_async_context(self._backend)
        with self._steps.step("warm-up: compiling the action grammar, timing one call"):
            await backend.prepare(self.schema)
        wanted = cfg.planner_model or cfg.model
        if self._planner_backend is None and wanted != live_model:
            self._planner_backend = self._make_backend(wanted)
        if self._planner_backend is None or self._planner_backend is backend:
            return backend, backend, self.gate
        with self._steps.step(self._load_step(wanted, given=self._planner_backend)):
            planner_backend = await stack.enter_async_context(self._planner_backend)
        with self._steps.step("warm-up of the planner's model"):
            await planner_backend.prepare(self.schema)
        return backend, planner_backend, ModelGate()

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        async with contextlib.AsyncExitStack() as stack:
            cfg = self.config
            backend, planner_backend, planner_gate = await self._start_models(stack)
            self._load_snapshot()
            stack.callback(self.save_snapshot)
            w, margin = cfg.watchdog, cfg.executor.margin_ms / 1e3
            if w.enabled:
                self.watchdog = StallWatchdog(
                    default_action=self.schema.readable(
                        self.schema.validate(self.spec.default_action)
                    ),
                    emit=self._on_stall,
                    type_defaults={
                        t: self.schema.readable(self.schema.validate(a))
                        for t, a in self.spec.type_defaults().items()
                    },
                    stall_s=w.stall_ms / 1e3,
                    guard_s=w.guard_ms / 1e3,
                    margin_s=margin,
                )
            guards = self.spec.guard_set()  # one set: its narrowed grammars are cached once
            self.executor = Executor(
                space=self.space,
                schema=self.schema,
                tree=self.tree,
                default_action=self.spec.default_action,
                description=self.spec.description,
                backend=backend,
                gate=self.gate,
                candidates=self.spec.candidates,
                config=self.config.executor,
                watchdog=self.watchdog,
                guards=guards,
                type_defaults=self.spec.type_defaults(),
            )
            if cfg.fleet.url is not None:
                from .fleet._tree import FleetTree  # noqa: PLC0415 - needs the fleet extra

                self.fleet = await stack.enter_async_context(
                    FleetTree(
                        config=cfg.fleet,
                        tree=self.tree,
                        prompt=prompt_hash(self.spec.description, self.schema.fingerprint),
                    )
                )
                self.fleet.publish_state(self._state)
            stack.push_async_callback(self.executor.aclose)
            if self.config.planner.enabled:
                live = self.config.executor.use_live or self.config.executor.use_score
                self.planner = Planner(
                    backend=planner_backend,
                    gate=planner_gate,
                    space=self.space,
                    schema=self.schema,
                    tree=self.tree,
                    forecaster=self.forecaster,
                    description=self.spec.description,
                    state=self._state,
                    config=self.config.planner,
                    # Planning on a model of its own takes no time from the live tiers.
                    live_tiers=live and planner_backend is backend,
                    near_states=self.config.executor.near_states,
                    candidates=self.executor.candidates,
                    fleet=self.fleet,
                    guards=guards,
                )
                if self.fleet is not None:
                    self.fleet.on_change = self.planner.wake
            if self.bus is not None:
                await stack.enter_async_context(self.bus)
            hc = cfg.health
            if hc.port is not None:
                self.health_endpoint = HealthEndpoint(
                    report=self.health, host=hc.host, port=hc.port, prometheus=hc.prometheus
                )
            self._started_at = asyncio.get_running_loop().time()
            started = asyncio.Event()
            runner = asyncio.create_task(self._run(started), name=f"forethought[{self.spec.name}]")
            self._runner = runner
            stack.push_async_callback(_cancel_and_wait, runner)
            waiter = asyncio.create_task(started.wait(), name="forethought.agent.started")
            await asyncio.wait([runner, waiter], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if runner.done():  # a task failed while starting: unwind, and say why
                failure = runner.exception()
                if failure is not None:
                    raise _first_error(failure)
            self._stack = stack.pop_all()
        self.ready.set()
        return self

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, or until a background task fails.

        A failure (a broker that refuses our credentials, say) is raised here: the first
        Forethought error inside the task group's, so a caller prints one clear line.
        """
        runner = self._runner
        if runner is None:
            raise NotStarted("Agent")
        waiter = asyncio.create_task(stop.wait(), name="forethought.agent.stop")
        try:
            await asyncio.wait([runner, waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if runner.done() and not runner.cancelled():
            exc = runner.exception()
            if exc is not None:
                raise _first_error(exc)

    async def __aexit__(self, *exc_info: object) -> None:
        self.ready.clear()
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def _run(self, started: asyncio.Event) -> None:
        name = self.spec.name
        async with asyncio.TaskGroup() as tg:
            if self.watchdog is not None:
                tg.create_task(self.watchdog.run(), name=f"forethought[{name}].watchdog")
            if self.planner is not None:
                tg.create_task(self.planner.run(), name=f"forethought[{name}].planner")
            if self.recorder is not None and self.planner is not None:
                tg.create_task(self._record_planner(), name=f"forethought[{name}].recorder")
            if self.config.snapshot is not None and self.config.snapshot_interval_s > 0:
                tg.create_task(self._save_periodically(), name=f"forethought[{name}].snapshot")
            if self.health_endpoint is not None:
                tg.create_task(self.health_endpoint.run(), name=f"forethought[{name}].health")
                await self.health_endpoint.listening.wait()  # a port in use fails the start
            if self.bus is not None:
                tg.create_task(self.bus.run(), name=f"forethought[{name}].bus")
                if isinstance(self.bus, SupportsStatus):
                    tg.create_task(
                        self._refresh_status(self.bus), name=f"forethought[{name}].status"
                    )
                tg.create_task(
                    serve(self, self.bus, tg, max_concurrent=self.config.max_concurrent),
                    name=f"forethought[{name}].serve",
                )
            started.set()

    # A timeout argument (ASYNC109), as asyncio.wait_for has one: a readiness wait without a
    # bound is a start-up that can hang, and the message on expiry says how far it got.
    async def until_covered(
        self,
        min_coverage: float = 0.9,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> float:
        """Wait until the tree answers ``min_coverage`` of the next event; returns the share.

        The share is the probability, in the current state, that the tree tier answers the next
        event (as :meth:`covers` says: its exact branch, or one borrowed from a neighbouring key
        or state), under the forecaster's estimate (the declared weights until events are
        seen): the health report's ``tree.answerable``. The wait ends early, below the target,
        when the planner has nothing left worth writing (its floor, ``planner.min_rate``, leaves
        the rarest keys out), so compare the value returned.

        Args:
            min_coverage: the share to wait for, between 0 and 1.
            timeout: seconds on the loop's clock (None: no limit).

        Raises:
            ConfigError: ``min_coverage`` is not a share, or the agent runs no planner.
            NotStarted: outside ``async with``.
            TimeoutError: ``timeout`` passed first (the message says the coverage reached).

        """
        if not 0.0 <= min_coverage <= 1.0:
            raise ConfigError("min_coverage", min_coverage, "give a share between 0 and 1")
        executor = self._executor()
        planner = self.planner
        if planner is None:
            raise ConfigError(
                "planner.enabled", False, "until_covered waits for the planner: enable it"
            )

        def answered(key: EventKey) -> bool:
            return (
                self.config.executor.use_tree and executor.tree_node(self._state, key) is not None
            )

        try:
            async with asyncio.timeout(timeout):
                return await planner.until_covered(min_coverage, answered)
        except TimeoutError:
            reached = self.forecaster.coverage(self._state.fingerprint, answered)
            raise TimeoutError(
                f"the tree answers {reached:.1%} of the next event after {timeout} s, "
                f"short of the {min_coverage:.1%} asked for"
            ) from None

    def answerable(self) -> float | None:
        """The share of the next event the tree tier answers now (None: no planner).

        The probability, in the current state, that :meth:`covers` holds for the next event:
        exact branches and borrowed ones. ``stats()["coverage"]`` counts exact branches only.
        """
        executor = self.executor
        if executor is None or self.planner is None:
            return None
        if not self.config.executor.use_tree:
            return 0.0
        state = self._state
        return self.forecaster.coverage(
            state.fingerprint, lambda k: executor.tree_node(state, k) is not None
        )

    def covers(self, event: Event | EventPayload | dict[str, Any]) -> bool:
        """Whether the tree would answer ``event`` now (its exact branch or a borrowed one).

        The event is read, not decided: its state patch is applied to a copy of the state,
        nothing is counted, and the tree's recency is not touched. An event outside the
        declared space is never covered.

        Raises:
            InvalidEvent: a malformed payload.
            InvalidState: a state patch the spec refuses.
            NotStarted: outside ``async with``.

        """
        executor = self._executor()
        if not self.config.executor.use_tree:
            return False
        if isinstance(event, dict):
            event = parse_payload(event, max_bytes=self.config.mqtt.max_payload_bytes)
        key = self.space.key(event.type, event.params)
        if key is None:
            return False
        state = self._state.patched(event.state) if event.state else self._state
        return executor.tree_node(state, key) is not None

    def health(self) -> HealthReport:
        """How the agent is now: planner health, tree coverage, model latency, counters."""
        if self._started_at is None:
            raise NotStarted("Agent")
        bus, name = self.bus, self.spec.name
        # `is not None` first: mypy cannot narrow `X | None` to a protocol in one step.
        if bus is not None and isinstance(bus, SupportsAgentId) and bus.agent_id:
            name = bus.agent_id  # how the agent is known on its bus
        return health_report(self, name=name, started_at=self._started_at)

    async def _refresh_status(self, bus: SupportsStatus) -> None:
        """Keep the bus's retained status current (its will says offline if we die)."""
        publish = bus.publish_status
        every = self.config.health.interval_s
        while True:
            await publish(self.health())
            raise_lost_cancel()  # aiomqtt's publish can swallow one (Python 3.11)
            if every <= 0:
                return
            await asyncio.sleep(every)

    async def _save_periodically(self) -> None:
        """Save the tree when it changed, every ``snapshot_interval_s``.

        On the loop, not a thread: the tree changes on the loop, and a thread would read it
        mid-change. The loop pauses for one save (serialising, one fsync), once an interval.
        """
        saved = self.tree.version
        while True:
            await asyncio.sleep(self.config.snapshot_interval_s)
            if self.tree.version != saved:
                saved = self.tree.version
                try:
                    self.save_snapshot()
                except OSError as exc:  # the old snapshot stays (R8); try again next time
                    log.warning("saving the tree snapshot failed: %s", exc)

    async def _record_planner(self, every_s: float = 1.0) -> None:
        planner, rec = self.planner, self.recorder
        assert planner is not None
        assert rec is not None
        while True:
            await asyncio.sleep(every_s)
            st = planner.stats
            rec.write(
                "/forethought/planner",
                {"branches": st.branches, "coverage": planner.coverage(), "busy_s": st.busy_s},
            )

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
            try:
                self.tree.insert(node)
            except ForethoughtError as exc:  # a stored action the schema now forbids
                self.snapshot_rejected += 1
                log.warning("skipping a snapshot node: %s", exc)

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

    def arrive(self, event: Event) -> Event:
        """``event`` with its absolute deadline resolved (once, at arrival)."""
        return self._executor().arrived(event)

    def _executor(self) -> Executor:
        if self.executor is None:
            raise NotStarted("Agent")
        return self.executor

    async def decide(self, event: Event | EventPayload | dict[str, Any]) -> Decision:
        """Decide one event (an Event, a payload model, or its JSON object).

        The event's state patch, effects and the planner's observation apply once per event
        id: a repeated id gets the first decision back and changes nothing.
        """
        executor = self._executor()
        if not isinstance(event, Event):
            payload = (
                event
                if isinstance(event, EventPayload)
                else parse_payload(event, max_bytes=self.config.mqtt.max_payload_bytes)
            )
            event = Event.from_payload(payload, arrival=Arrival.now(), in_process=True)
        earlier = executor.earlier(event.id)  # the one id check, for the executor too
        if earlier is not None:
            return await asyncio.shield(earlier)
        if event.state:
            self.update_state(event.state)
        decision = await executor.decide_new(event, self._state)
        self._after(decision)
        if self.recorder is not None:
            self._record(event, decision)
        return decision

    def refused(self) -> None:
        """The serve loop refused an event (reported on the bus, not decided): counted."""
        self.rejected += 1

    def not_sent(self, decision: Decision) -> None:
        """The serve loop did not send ``decision`` (late at sending): counted as missed."""
        self._executor().not_sent(decision)

    def _record(self, event: Event, decision: Decision) -> None:
        assert self.recorder is not None
        rec = self.recorder
        # Log times on the recorder's clock: the event when it arrived, the decision when made.
        now_ns = rec.now_ns()
        loop_now = asyncio.get_running_loop().time()
        at = now_ns - int((loop_now - event.arrived_at) * 1e9)
        deadline_ms = (
            (event.deadline - event.arrived_at) * 1e3 if event.deadline is not None else None
        )
        rec.write(
            "/forethought/events",
            {
                "id": event.id,
                "type": event.type,
                "params": event.params,
                "deadline_ms": deadline_ms,
            },
            at,
        )
        rec.write(
            "/forethought/decisions",
            {**decision.payload(), "deadline_ms": deadline_ms},
            now_ns - int((loop_now - decision.decided_at) * 1e9),
        )

    def _after(self, decision: Decision) -> None:
        key: EventKey | None = decision.key
        if self.fleet is not None:
            self.fleet.publish_event(key, self._state.fingerprint)
        if self.planner is not None:
            # What the live tiers did with an event the tree missed: the planner's cost rule
            # yields idle time to them only for types they are seen to answer.
            # (A planner with no live tiers beside it ignores this.)
            live = (
                None
                if decision.tier is Tier.TREE
                else decision.tier in (Tier.SCORE, Tier.LIVE) and decision.met
            )
            self.planner.observe(key, live=live)
        if key is not None:
            spec = self.space.types[key.type]
            if spec.effects:
                self._set_state(self._state.after(spec, key), external=False)

    def update_state(self, patch: dict[str, Any]) -> None:
        """Set fields of the state (None removes one); raises InvalidState, keeping the old.

        A field the spec's state does not declare, or a categorical value neither the state
        nor an effect gives it, is accepted (the world is what it is) and logged as a
        warning, once per field and value: the tree holds nothing planned for it.
        """
        state = self._state.patched(patch)
        for problem in self._state_domain.unknown(patch, "update_state"):
            seen = (problem.path, repr(problem.value))
            if seen not in self._undeclared_seen:
                self._undeclared_seen.add(seen)
                log.warning("%s", problem.line())
        self._set_state(state, external=True)

    def _set_state(self, state: WorldState, *, external: bool) -> None:
        changed = state.fingerprint != self._state.fingerprint
        self._state = state
        if self.fleet is not None and changed:
            self.fleet.publish_state(state)
        if self.recorder is not None and changed:
            self.recorder.write("/forethought/state", state.data)
        if self.planner is not None:
            self.planner.set_state(state, external=external)

    def stats(self) -> dict[str, Any]:
        """Executor, planner, tree and bus figures."""
        planner = self.planner
        out: dict[str, Any] = {
            "executor": self.executor.stats.as_dict() if self.executor else None,
            "tree": {
                "nodes": len(self.tree),
                "evictions": self.tree.evictions,
                "version": self.tree.version,
            },
            "planner": planner.stats.as_dict() if planner else None,
            "coverage": planner.coverage() if planner else None,
            "answerable": self.answerable(),
            "rejected": self.rejected,
            "state": self._state.fingerprint,
            "models": self.models(),
        }
        for role, backend in (("live", self._backend), ("planner", self._planner_backend)):
            # `is not None` first: mypy cannot narrow `X | None` to a protocol in one step.
            if backend is not None and isinstance(backend, SupportsServerStats):
                out.setdefault("servers", {})[role] = backend.stats_dict()
        if self.watchdog is not None:
            out["watchdog"] = self.watchdog.stats.as_dict()
        bus = self.bus
        if bus is not None and isinstance(bus, SupportsBusStats):
            # The bus's own counters; whether it is connected is the health report's to say.
            out["bus"] = bus.bus_section().model_dump(exclude={"connected"})
        return out

    def models(self) -> dict[str, str | None]:
        """Which model answers each tier: the tree's from the planner, the live tiers' own."""
        live = self._backend.model_id if self._backend is not None else None
        planner = self._planner_backend.model_id if self._planner_backend is not None else live
        return {"tree": planner, "score": live, "live": live}


def _first_error(exc: BaseException) -> BaseException:
    """The first Forethought error in ``exc`` (unwrapping task groups), else ``exc``."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_error(inner)
            if isinstance(found, ForethoughtError):
                return found
    return exc


async def _cancel_and_wait(task: asyncio.Task[None]) -> None:
    """Cancel a task this agent started and wait for it (its own cancellation is expected).

    A task that already failed is not awaited again: :meth:`Agent.serve_until` raised its
    error to the caller (and it is logged here for callers that never asked).
    """
    if task.done():
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            log.warning("agent stopped after a failure: %s", _first_error(failure))
        return
    task.cancel()
    await wait_cancelled(task)  # a timeout around the agent's exit stays the caller's
