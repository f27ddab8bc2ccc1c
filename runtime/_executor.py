"""The executor: one decision per event, before its deadline, always valid.

Budget = deadline - now - margin. Tiers in order, each taken only when the latency model's
p95 says it fits what is left:

1. **tree** -- the exact key for the current state (its fingerprint for the event's type), else
   the nearest grid neighbour of the key within its tolerance, else the key in the nearest
   state within the state tolerance (both flagged approximate, with which); dict lookups;
2. **score** -- when the action space is enumerable (enum fields or declared candidates, up to
   ``max_candidates``): one batched forward pass scores them, the best wins;
3. **live** -- constrained compact generation from the cached state prefix, cut at the budget;
4. **default** -- the declared safe action.

Score and live take the model from the planner at once (:class:`ModelGate`). Every action is
validated before it leaves; an invalid one becomes the default. A model call that raises or
hangs is abandoned at the budget and the next tier answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from forethought.models import GenerationStatus, ModelBackend
from forethought.models.internals import ModelGate, state_text, wait_cancelled
from forethought.policies import (
    ActionSchema,
    EventKey,
    EventSpace,
    ForethoughtError,
    GuardSet,
    InvalidEvent,
    PolicyNode,
    PolicyTree,
    WorldState,
    drop_guarded,
)

from ._capabilities import SupportsLivePrediction
from ._decision import Decision, Tier, late_reason, wall_ns
from ._event import Event, with_deadline
from ._guard_counts import GuardCounts
from ._id_window import EXECUTOR_MAX_IDS, EXECUTOR_WINDOW_S, IdWindow
from ._renamed_keys import renamed_keys
from ._skipped import does_not_fit
from ._tier_backoff import TierBackoff
from ._watchdog import StallWatchdog

__all__ = ["Executor", "ExecutorConfig", "ExecutorStats"]

log = logging.getLogger("forethought.executor")
_RENAMED = {"probe_after_s": "measure_after_s"}
"""Fields of :class:`ExecutorConfig` renamed (old -> new): the old names are read, with a
``FutureWarning``, until the next release."""
_MEASURE_S = 60.0  # a latency measurement's deadline: long enough to finish on a slow moment
_R = TypeVar("_R")
_Answer = tuple[dict[str, Any], BaseModel]
"""A model tier's answer: the readable action, and the model the validator of record made."""


class ExecutorConfig(BaseModel):
    """Executor settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    margin_ms: float = Field(default=5.0, ge=0)
    """Kept aside from every deadline for publishing and actuation."""
    max_candidates: int = Field(default=16, ge=1)
    """The score tier runs only when the action space has at most this many actions."""
    default_deadline_ms: float = Field(default=1000.0, gt=0)
    """Deadline of an out-of-space event of an undeclared type that carries none."""
    event_tokens: int = Field(default=32, ge=1)
    """Estimated tokens of one event's prompt part (for the tier-fit predictions)."""
    live_max_new_tokens: int = Field(default=48, ge=4)
    remember: int = Field(default=10_000, ge=1)
    """How many recent decisions are kept whole, to answer a repeated id with the same one."""
    remember_ids_s: float = Field(default=EXECUTOR_WINDOW_S, gt=0)
    """How long a decided id is remembered at all: a repeat within this window is never
    decided again (it gets the kept decision, or is refused once that was forgotten)."""
    max_remembered_ids: int = Field(default=EXECUTOR_MAX_IDS, ge=1)
    """Bound on the ids remembered within the window (memory stays bounded at any rate)."""
    near_states: bool = True
    """Borrow a tree answer from a neighbouring state (within ``state_tolerance``) when this
    state has none."""
    use_tree: bool = True
    use_score: bool = True
    use_live: bool = True
    keep_answers: bool = True
    """Keep each score or live answer as the tree's branch for its exact (state, event key),
    so the next such event is a tree hit (with the tree tier on; a planned branch is never
    replaced)."""
    measure_after_s: float = Field(default=2.0, gt=0)
    """When the live tier's p95 keeps it from starting and the latency model has measured
    nothing for this long, one call is made in the background (a latency measurement, at the
    planner's priority, so any event's call preempts it) to measure the model again. Its old
    name ``probe_after_s`` is still read, with a warning, until the next release. A tier
    that never runs is never measured: without this, a p95 learned in a slow moment (a cold
    start, a busy neighbour) would keep the live tier off for good once the model is fast
    again. The same holds when
    the model refuses a live call before any pass (``not_started``): the state's prompt is then
    usually not cached, its prefill alone is longer than the budget, and the background call
    is what prefills it. On a server backend, a live call whose p95 does not fit because the
    state's prompt was never sent starts that call at once, whatever the measurements' age."""

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        """Read the old names of renamed fields (see ``_RENAMED``), with a warning."""
        return renamed_keys(data, _RENAMED, where="executor")


@dataclass(slots=True)
class ExecutorStats:
    """Counters and recent latencies."""

    decisions: int = 0
    tiers: dict[str, int] = field(default_factory=lambda: {t.value: 0 for t in Tier})
    met: int = 0
    missed: int = 0
    approximate: int = 0
    near_state: int = 0
    out_of_space: int = 0
    duplicates: int = 0
    invalid: int = 0
    model_errors: int = 0
    answers_kept: int = 0
    """Score or live answers kept in the tree as branches (see ``keep_answers``)."""
    guards: GuardCounts = field(default_factory=GuardCounts)
    """Guard refusals by tier and guard, branches dropped at load."""
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))

    def latency_ms(self) -> dict[str, float | None]:
        """Recent decision latency in milliseconds: p50, p99, p999 and max (None before any)."""
        lat = sorted(self.latencies_s)

        def q(p: float) -> float | None:
            return lat[min(int(p * len(lat)), len(lat) - 1)] * 1e3 if lat else None

        return {
            "p50": q(0.5),
            "p99": q(0.99),
            "p999": q(0.999),
            "max": lat[-1] * 1e3 if lat else None,
        }

    def as_dict(self) -> dict[str, Any]:
        """Plain data (latencies summarised)."""
        return {
            "decisions": self.decisions,
            "tiers": dict(self.tiers),
            "met": self.met,
            "missed": self.missed,
            "approximate": self.approximate,
            "near_state": self.near_state,
            "out_of_space": self.out_of_space,
            "duplicates": self.duplicates,
            "invalid": self.invalid,
            "model_errors": self.model_errors,
            "answers_kept": self.answers_kept,
            "guards": self.guards.as_dict(),
            "latency_ms": self.latency_ms(),
        }


class Executor:
    """Decides events from the tree, falling back through score, live and default.

    Args:
        space: the event space.
        schema: the action schema.
        tree: the policy tree the planner fills.
        default_action: the safe action (validated here).
        description: the task context (for the model tiers' prompts).
        backend: the model for the score and live tiers (None: tree and default only).
        gate: shared with the planner.
        candidates: actions the score tier chooses from when the schema is not enumerable.
        config: settings.
        watchdog: answers events with the default when the loop stalls (its decision then
            stands for the event).
        guards: rules no action may break: an answer a guard refuses is never sent, the next
            tier answers (the score tier's candidates and the live tier's grammar are narrowed
            by them first); a loaded tree's branches they refuse are dropped.
        type_defaults: per event type, its own safe action (else ``default_action``).

    """

    def __init__(
        self,
        *,
        space: EventSpace,
        schema: ActionSchema,
        tree: PolicyTree,
        default_action: dict[str, Any] | BaseModel,
        description: str,
        backend: ModelBackend | None = None,
        gate: ModelGate | None = None,
        candidates: Sequence[dict[str, Any]] | None = None,
        config: ExecutorConfig | None = None,
        watchdog: StallWatchdog | None = None,
        guards: GuardSet | None = None,
        type_defaults: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._space = space
        self._watchdog = watchdog
        self._schema = schema
        self._tree = tree
        self._default = schema.validate(default_action)
        self._default_json = schema.readable(self._default)
        self._type_defaults = {
            t: schema.readable(schema.validate(a)) for t, a in (type_defaults or {}).items()
        }
        self._guards = guards if guards is not None else GuardSet()
        self._guarded = bool(self._guards)
        self._description = description
        self._backend = backend
        self._gate = gate or ModelGate()
        self._config = config or ExecutorConfig()
        cfg = self._config
        if candidates:
            cands: list[BaseModel] | None = [schema.validate(c) for c in candidates]
        else:
            cands = schema.enumerate(cfg.max_candidates)
        self._candidates = cands if cands and len(cands) <= cfg.max_candidates else None
        self._cand_tokens = (
            sum(len(schema.compact(c)) for c in self._candidates) // 3 if self._candidates else 0
        )
        self.stats = ExecutorStats()
        # The tree admits only actions the validator of record accepts, so a hit is a lookup.
        self.stats.invalid += tree.admit_only(schema.validate)
        if self._guarded:
            self.stats.guards.dropped = drop_guarded(tree, self._guards)
        self._cand_readable = [schema.readable(c) for c in self._candidates or []]
        self._done: OrderedDict[str, Decision] = OrderedDict()
        self._seen = IdWindow(  # the ids decided, by when
            max_ids=self._config.max_remembered_ids, window_s=self._config.remember_ids_s
        )
        self._inflight: dict[str, asyncio.Future[Decision]] = {}
        # Model calls that keep losing their events are not started (:mod:`._tier_backoff`).
        self._backoff = TierBackoff()
        self._evidence = (-1, 0.0)  # latency measurements seen, and when that count changed
        self._measuring: asyncio.Task[None] | None = None

    @property
    def gate(self) -> ModelGate:
        """The model gate shared with the planner."""
        return self._gate

    @property
    def candidates(self) -> list[BaseModel] | None:
        """What the score tier chooses from (None: the score tier is off)."""
        return self._candidates

    def arrived(self, event: Event) -> Event:
        """``event`` with its absolute deadline resolved, once, at arrival.

        By :func:`with_deadline`: the sender's deadline, else the type's ``deadline_ms`` (or
        the configured default for an undeclared type), from when it was sent if known, else
        from arrival.
        """
        spec = self._space.types.get(event.type)
        ms = spec.deadline_ms if spec is not None else self._config.default_deadline_ms
        return with_deadline(event, ms)

    def known(self, event_id: str) -> bool:
        """Whether ``event_id`` is being decided or was decided within the id window."""
        self._forget_old()
        return event_id in self._inflight or event_id in self._seen

    def _forget_old(self) -> None:
        self._seen.forget_old(asyncio.get_running_loop().time())

    def earlier(self, event_id: str) -> asyncio.Future[Decision] | None:
        """The decision already made or being made for ``event_id``; None for a new id.

        The one duplicate check of the event path (the agent asks it before applying the
        event's state patch; :meth:`decide` for direct callers). A repeat is counted. A repeat
        whose decision is no longer kept (but whose id is still remembered) raises
        :class:`InvalidEvent`: it is never decided a second time.
        """
        done = self._done.get(event_id)
        if done is not None:
            self.stats.duplicates += 1
            kept: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
            kept.set_result(done)
            return kept
        pending = self._inflight.get(event_id)
        if pending is not None:
            self.stats.duplicates += 1
            return pending
        self._forget_old()
        if event_id in self._seen:
            self.stats.duplicates += 1
            raise InvalidEvent("id", event_id, "already decided (that decision is no longer kept)")
        return None

    async def decide(self, event: Event, state: WorldState) -> Decision:
        """The decision for ``event`` in ``state``; a repeated id gets the first decision again.

        A repeat whose decision is no longer kept (but whose id is still remembered) raises
        :class:`InvalidEvent`: it is never decided a second time.
        """
        earlier = self.earlier(event.id)
        if earlier is not None:
            return await asyncio.shield(earlier)
        return await self.decide_new(event, state)

    async def decide_new(self, event: Event, state: WorldState) -> Decision:
        """:meth:`decide` for an id :meth:`earlier` has just found new (no await between).

        The event's deadline is read as resolved where it entered (the serve loop's
        :meth:`arrived`); an event handed in without one (a direct caller) gets it here.
        """
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._inflight[event.id] = future
        arrived = event if event.deadline is not None else self.arrived(event)
        watchdog = self._watchdog
        if watchdog is not None:
            watchdog.watch(arrived)
        try:
            decision = await self._decide(arrived, state)
        except BaseException as exc:
            # What the watchdog sent while the loop was stalled was acted on: it stands.
            taken = watchdog.settle(event.id) if watchdog is not None else None
            if taken is None:
                future.set_exception(exc)
                future.exception()  # retrieved: no "never retrieved" warning for lone waiters
            else:
                future.set_result(taken)
                self._remember(taken)
            raise
        finally:
            self._inflight.pop(event.id, None)
        if watchdog is not None:
            decision = watchdog.settle(event.id) or decision
        future.set_result(decision)
        self._remember(decision)
        return decision

    def not_sent(self, d: Decision) -> None:
        """Count ``d`` as missed: decided in time, it was not sent (late at sending).

        So no report counts an unsent action as on time.
        """
        if d.met:
            self.stats.met -= 1
            self.stats.missed += 1

    def _remember(self, d: Decision) -> None:
        cfg = self._config
        self._done[d.event_id] = d
        while len(self._done) > cfg.remember:
            self._done.popitem(last=False)
        self._seen.add(d.event_id, now=d.decided_at)
        s = self.stats
        s.decisions += 1
        s.tiers[d.tier.value] += 1
        s.met += d.met
        s.missed += not d.met
        s.approximate += d.approximate
        s.near_state += d.nearest == "state"
        s.out_of_space += d.out_of_space
        s.latencies_s.append(d.latency_s)

    async def _decide(self, event: Event, state: WorldState) -> Decision:
        loop = asyncio.get_running_loop()
        assert event.deadline is not None
        end = event.deadline - self._config.margin_ms / 1e3
        key = self._space.key(event.type, event.params)
        skipped: list[tuple[str, str]] = []
        guarded: list[tuple[str, str]] = []

        def finish(tier: Tier, action: dict[str, Any], nearest: str | None = None) -> Decision:
            now = loop.time()
            in_time = now <= end + 1e-9  # 1 ns: float noise is not a miss
            return Decision(
                event_id=event.id,
                tier=tier,
                action=action,
                latency_s=now - event.arrived_at,
                budget_s=end - event.arrived_at,
                met=in_time and not event.default_only,
                approximate=nearest is not None,
                nearest=nearest,
                out_of_space=key is None,
                key=key,
                skipped=tuple(skipped),
                decided_at=now,
                late=None if in_time else late_reason(event, tier, now, self._config.margin_ms),
                deadline_ns=wall_ns(event.deadline, event),
                decided_at_ns=wall_ns(now, event),
                guarded=tuple(guarded),
            )

        if event.default_only:
            skipped.append(("all", "age unknown: default only (events.no_age)"))
            decision = finish(Tier.DEFAULT, self._default_for(event, state))
            late = decision.late or "age unknown: when it was sent is not known (events.no_age)"
            return replace(decision, late=late)
        # 1. tree
        if not self._config.use_tree:
            skipped.append(("tree", "disabled"))
        elif key is None:
            skipped.append(("tree", "out of space"))
        else:
            found = self._from_tree(state, key)
            if found is None:
                skipped.append(("tree", "no branch for this state"))
            elif not self._guarded:
                return finish(Tier.TREE, *found)
            else:
                refused = self._guards.refusal(found[0], event.params, state)
                if refused is None:
                    return finish(Tier.TREE, *found)
                self._refused("tree", refused, skipped, guarded)
        # 2. score, 3. live
        if self._backend is not None:
            context = state_text(self._description, state.to_json())
            text = self._describe(event, key)
            applies = self._guards.applicable(event.params, state) if self._guarded else ()
            kind = (event.type, len(context) + len(text))
            answer = await self._score(context, text, end, skipped, kind, applies)
            if answer is not None and self._kept(answer[0], applies, "score", skipped, guarded):
                self._keep_answer(state, key, answer)
                return finish(Tier.SCORE, answer[0])
            answer = await self._live(context, text, end, skipped, kind, applies)
            if answer is not None and self._kept(answer[0], applies, "live", skipped, guarded):
                self._keep_answer(state, key, answer)
                return finish(Tier.LIVE, answer[0])
        else:
            skipped.append(("model", "no backend"))
        return finish(Tier.DEFAULT, self._default_for(event, state))

    def _default_for(self, event: Event, state: WorldState) -> dict[str, Any]:
        """The event type's safe action (a copy); a guard it breaks is counted, not obeyed.

        ``forethought check`` proves the defaults keep every guard over the declared states
        and events; outside them the default is still the last answer there is.
        """
        default = self._type_defaults.get(event.type, self._default_json)
        if self._guarded and self._guards.refusal(default, event.params, state) is not None:
            self.stats.guards.default_breaks += 1
        return dict(default)

    def _kept(
        self,
        action: dict[str, Any],
        applies: tuple[int, ...],
        tier: str,
        skipped: list[tuple[str, str]],
        guarded: list[tuple[str, str]],
    ) -> bool:
        """Whether no guard that applies refuses a model tier's ``action`` (else counted)."""
        refused = self._guards.refusal_among(action, applies) if applies else None
        if refused is None:
            return True
        self._refused(tier, refused, skipped, guarded)
        return False

    def _refused(
        self,
        tier: str,
        guard: str,
        skipped: list[tuple[str, str]],
        guarded: list[tuple[str, str]],
    ) -> None:
        self.stats.guards.refuse(tier, guard)
        skipped.append((tier, f"refused by guard {guard}"))
        guarded.append((tier, guard))

    def _keep_answer(self, state: WorldState, key: EventKey | None, answer: _Answer) -> None:
        """Keep a score or live answer as the tree's branch for its exact (state, key).

        The answer is the model's for the very prompt the planner would write that branch
        from, so the next such event is a tree hit instead of another model call: without
        this, a live tier that answers a frequent key pays the model for it every time, and
        its urgent calls can keep the planner from ever writing that key (hybrid would then
        answer fewer events than the tree alone). Only with the tree tier on (the ``live``
        strategy stays a pure live caller), only for in-space keys, never over a branch
        already there (a planned one stands). The answer was validated once, by
        :meth:`_validated`: the tree is told so and does not validate it again.
        """
        if not self._config.use_tree or not self._config.keep_answers or key is None:
            return
        fp = state.fingerprint_for(key.type)
        if self._tree.lookup(fp, key) is not None:
            return
        assert self._backend is not None
        spec = self._space.types[key.type]
        after = state.after(spec, key) if spec.effects else state
        action, model = answer
        try:
            self._tree.insert(
                PolicyNode(
                    fingerprint=fp,
                    key=key,
                    action=action,
                    compact=self._schema.compact(model),
                    # It was asked for: as likely as anything the planner ranks.
                    probability=1.0,
                    model_id=self._backend.model_id,
                    tokens=0,
                    gen_seconds=0.0,
                    created_at=asyncio.get_running_loop().time(),
                    next_fingerprint=after.fingerprint if after != state else None,
                    origin="answered",
                ),
                checked_by=self._schema.validate,
            )
        except ForethoughtError as exc:  # the tree's check refused it: keep nothing
            log.warning("answer not kept in the tree: %s", exc)
            return
        self.stats.answers_kept += 1

    @staticmethod
    def _describe(event: Event, key: EventKey | None) -> str:
        if key is not None:
            return key.describe()
        params = " ".join(f"{k}={v}" for k, v in sorted(event.params.items()))
        return f"{event.type}: {params}" if params else event.type

    def _from_tree(
        self, state: WorldState, key: EventKey
    ) -> tuple[dict[str, Any], str | None] | None:
        """The stored action (validated when it entered the tree) and what was borrowed.

        No validation here: this is the hot path, and the tree admits valid actions only.
        """
        found = self.tree_node(state, key)
        if found is None:
            return None
        node, nearest = found
        self._tree.touch(node)
        return dict(node.action), nearest  # a copy: the caller may change its decision

    def tree_node(self, state: WorldState, key: EventKey) -> tuple[PolicyNode, str | None] | None:
        """The node the tree tier would answer ``key`` with in ``state``; None when it has none.

        With the node, what it borrowed across: ``"event"``, ``"state"``, or None for the exact
        key. Reads only: the node's recency is not touched.
        """
        fp = state.fingerprint_for(key.type)
        node = self._tree.lookup(fp, key)
        nearest: str | None = None
        if node is None:
            for near, _ in self._space.neighbours(key):
                node = self._tree.lookup(fp, near)
                if node is not None:
                    nearest = "event"
                    break
        if node is None and self._config.near_states:
            for near_fp, _ in state.near(key.type):
                node = self._tree.lookup(near_fp, key)
                if node is not None:
                    nearest = "state"
                    break
        if node is None:
            return None
        return node, nearest

    async def _model_call(
        self,
        tier: str,
        predicted_s: float,
        end: float,
        call: Callable[[], Awaitable[_R]],
        skipped: list[tuple[str, str]],
        measure: Callable[[], Awaitable[object]] | None = None,
        *,
        cold: bool = False,
    ) -> _R | None:
        """Run one model tier if its p95 fits, holding the model, abandoned at the budget.

        ``measure``: the latency measurement to run in the background when the p95 does not
        fit and the latency model's measurements are stale (see
        ``ExecutorConfig.measure_after_s``), or at once when ``cold`` (the state's prompt is
        not in the server's cache).
        """
        now = asyncio.get_running_loop().time()
        if now + predicted_s > end:
            skipped.append((tier, does_not_fit(predicted_s, end - now)))
            if measure is not None:
                self._measure_if_stale(measure, cold=cold)
            return None
        try:
            async with asyncio.timeout_at(end), self._gate.urgent():
                return await call()
        except TimeoutError:
            skipped.append((tier, "timed out at the budget"))
        except Exception as exc:  # any model failure falls to the next tier
            self.stats.model_errors += 1
            log.warning("%s tier failed: %r", tier, exc)
            skipped.append((tier, f"error: {exc!r}"[:200]))
        return None

    def _stale(self) -> bool:
        """Whether the latency model has measured nothing for ``measure_after_s``."""
        assert self._backend is not None
        now = asyncio.get_running_loop().time()
        seen, since = self._evidence
        observed = self._backend.latency.observed
        if observed != seen:
            self._evidence = (observed, now)
            return False
        return now - since >= self._config.measure_after_s

    def _measure_if_stale(
        self, measure: Callable[[], Awaitable[object]], *, cold: bool = False
    ) -> None:
        """Measure the model again in the background when its measurements are stale.

        One measurement at a time. ``cold``: the state's prompt is not in the server's cache, so
        the measurement is started whatever the measurements' age: it is what prefills that
        prompt, and until it has, every event in this state is predicted to prefill it too.
        """
        stale = self._stale()  # first: it also notes the latest measurement's time
        if not (stale or cold) or (self._measuring is not None and not self._measuring.done()):
            return

        async def run() -> None:
            try:
                await measure()
            except Exception as exc:  # a failed measurement measures nothing; the tier stays off
                log.info("latency measurement failed: %r", exc)

        self._evidence = (self._evidence[0], asyncio.get_running_loop().time())
        self._measuring = asyncio.get_running_loop().create_task(run(), name="executor.measure")

    async def aclose(self) -> None:
        """Stop a latency measurement under way (the agent calls this as it stops)."""
        measuring, self._measuring = self._measuring, None
        if measuring is not None and not measuring.done():
            measuring.cancel()
            await wait_cancelled(measuring)

    def _backed_off(self, tier: str, kind: tuple[str, int], skipped: list[tuple[str, str]]) -> bool:
        """Whether not to start ``tier``'s call for this kind of event (type, prompt length).

        True when its recent calls for such events lost theirs (:class:`TierBackoff`).
        """
        if not self._config.use_tree:
            # No tree, no planner filling it: a call that loses its event takes model time
            # from no one, so every call that fits on paper is started.
            return False
        why = self._backoff.skip(tier, *kind)
        if why is not None:
            skipped.append((tier, why))
        return why is not None

    async def _score(
        self,
        context: str,
        text: str,
        end: float,
        skipped: list[tuple[str, str]],
        kind: tuple[str, int],
        applies: tuple[int, ...] = (),
    ) -> _Answer | None:
        backend, cands = self._backend, self._candidates
        assert backend is not None
        if not self._config.use_score:
            skipped.append(("score", "disabled"))
            return None
        if cands is None:
            skipped.append(("score", "action space not enumerable"))
            return None
        if applies:  # only the candidates the guards that apply allow (cached per guard set)
            allowed = self._guards.allowed_candidates(self._cand_readable, applies)
            if not allowed:
                skipped.append(("score", "guards leave no candidate"))
                return None
            if len(allowed) < len(cands):
                cands = [cands[j] for j in allowed]
        if self._backed_off("score", kind, skipped):
            return None
        predicted = backend.latency.prefill(self._config.event_tokens + self._cand_tokens).p95
        started = asyncio.get_running_loop().time() + predicted <= end  # as _model_call decides
        scores = await self._model_call(
            "score",
            predicted,
            end,
            lambda: backend.score(context, text, cands, self._schema, deadline=end),
            skipped,
        )
        answer = None
        if scores is not None:
            if scores.best is None:
                skipped.append(("score", scores.status.value))
            else:
                answer = self._validated(cands[scores.best], skipped, "score")
        refused = scores is not None and scores.status is GenerationStatus.NOT_STARTED
        if started and not refused:  # a call that ran: did it answer in time?
            self._backoff.outcome("score", *kind, answered=answer is not None)
        return answer

    async def _live(
        self,
        context: str,
        text: str,
        end: float,
        skipped: list[tuple[str, str]],
        kind: tuple[str, int],
        applies: tuple[int, ...] = (),
    ) -> _Answer | None:
        backend = self._backend
        assert backend is not None
        if not self._config.use_live:
            skipped.append(("live", "disabled"))
            return None
        # The grammar with the guards that apply written in (cached per guard set).
        schema = self._guards.narrowed(self._schema, applies) if applies else self._schema
        if schema is None:
            skipped.append(("live", "guards leave no action to write"))
            return None
        if self._backed_off("live", kind, skipped):
            return None
        lat = backend.latency
        cold = False
        if isinstance(backend, SupportsLivePrediction):
            predicted = backend.predict_live(context, text, schema).p95
            cold = not backend.prompt_cached(context, schema)
        else:
            predicted = lat.call(self._config.event_tokens, lat.typical_steps()).p95

        async def measure() -> None:
            async with self._gate.background() as cancel:
                await backend.generate(
                    context,
                    [text],
                    schema,
                    deadline=asyncio.get_running_loop().time() + _MEASURE_S,
                    cancel=cancel,
                    max_new_tokens=self._config.live_max_new_tokens,
                )

        started = asyncio.get_running_loop().time() + predicted <= end  # as _model_call decides
        gens = await self._model_call(
            "live",
            predicted,
            end,
            lambda: backend.generate(
                context,
                [text],
                schema,
                deadline=end,
                max_new_tokens=self._config.live_max_new_tokens,
            ),
            skipped,
            measure,
            cold=cold,
        )
        if gens is None:
            if started:  # it ran and did not answer by the budget (or failed)
                self._backoff.outcome("live", *kind, answered=False)
            return None
        gen = gens[0]
        answer = (
            None if gen.action is None else self._validated(gen.action, skipped, "live", schema)
        )
        if gen.status is not GenerationStatus.NOT_STARTED:  # refused at once: it cost nothing
            self._backoff.outcome("live", *kind, answered=answer is not None)
        if gen.action is None:
            if gen.status is GenerationStatus.NOT_STARTED:
                # The model refused before any pass: most often the state's prompt is not
                # cached and its prefill alone is longer than any event's budget. Nothing
                # on the event path would ever prefill it, so the tier would stay off for
                # good; the latency measurement prefills it (and measures) in the background.
                self._measure_if_stale(measure)
            skipped.append(("live", gen.status.value))
            return None
        return answer

    def _validated(
        self,
        action: BaseModel,
        skipped: list[tuple[str, str]],
        tier: str,
        written_with: ActionSchema | None = None,
    ) -> _Answer | None:
        """The readable action and its model when the validator of record accepts it, else None.

        The one validation of a model tier's answer on its way out (the tree, keeping it as a
        branch, is told so). ``written_with``: the (narrowed) schema it was generated under.
        """
        readable = (written_with or self._schema).readable(action)
        try:
            model = self._schema.validate(readable)
        except ForethoughtError:
            self.stats.invalid += 1
            skipped.append((tier, "invalid action"))
            return None
        return readable, model
