"""The idle-time planner: writes actions for the events most likely to come next.

One background task (owned by the agent's TaskGroup). Each round it ranks uncovered branches by
value -- the chance the branch is needed within the next ``horizon`` events (:func:`look_ahead`:
the forecaster, effects and learned state drift; a branch also counts for the grid neighbours
it answers as far as the model agrees with itself across the step, :func:`cover`) x urgency,
where urgency is high for events whose deadline is shorter than what the live tiers can do
(per the latency model) -- drops those
whose value does not cover their cost (the events expected to arrive while the model writes
them), takes the best batch that shares one state, and generates it in one prefix-sharing batch.
When nothing valuable is left it waits on an event (no polling, no CPU) until a state change, an
observed event or an eviction wakes it.
An urgent caller takes the model at once through the :class:`ModelGate`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from forethought.models import GenerationStatus, ModelBackend
from forethought.models.internals import ModelGate, PlannerHealth, state_text
from forethought.policies import (
    ActionSchema,
    ConfigError,
    EventKey,
    EventSpace,
    ForethoughtError,
    GuardSet,
    PolicyNode,
    PolicyTree,
    WorldState,
)

from ._branch import Branch
from ._budget import BudgetBucket, PlannerBudget
from ._cover import BorrowAgreement, cover
from ._drift import StateDrift
from ._fleet_link import FleetLink
from ._forecaster import Forecaster
from ._live_record import LiveRecord
from ._lookahead import Expected, Pace, look_ahead
from ._method_cost import MeasuredCosts

__all__ = ["Branch", "Planner", "PlannerConfig", "PlannerStats"]

log = logging.getLogger("forethought.planner")

_GAPS_KEPT = 64
"""Recent gaps between events the pace is drawn from: enough to see a burst pattern, few
enough to follow a shift's changing rhythm."""


class PlannerConfig(BaseModel):
    """Planner settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """Whether the agent runs a planner at all (off: the live tiers and the default only)."""
    batch_size: int = Field(default=8, ge=1, le=64)
    """Most branches generated in one batch."""
    max_prefill_s: float = Field(default=0.6, gt=0)
    """A batch's prefill cannot be interrupted: batches shrink so it stays under this."""
    horizon: int = Field(default=16, ge=1, le=256)
    """Events looked ahead: a branch's value is the chance it is needed within this many
    events, through effects and learned state drift (1: the current state's next event)."""
    drift: bool = True
    """Learn how the state changes from outside (patches) and plan for the states it leads to."""
    learn: bool = True
    """Learn the event stream (off: the declared weights alone predict the next event)."""
    min_rate: float = Field(default=3e-3, ge=0, le=1)
    """Branches expected to answer fewer than this many events per event of the horizon
    (expected uses within the horizon / ``horizon``, x urgency) are not planned: the planner
    sleeps instead. A rate, not a chance within the horizon, so one floor means the same at a
    horizon of 1 and of 16. Where no live tier exists a branch displaces nothing, so this floor
    alone decides how much speculative work is done: raise it to spend less model time, at
    the cost of the rarest keys (0: plan every uncovered key the look-ahead reaches). 3e-3 is
    a chance of 0.05 within the default 16 events; the docs' results: the frontier it was
    read from."""
    cost_weight: float = Field(default=1.0, ge=0)
    """A branch is planned only when its value exceeds ``cost_weight`` x its cost: the
    live-tier work it displaces (:meth:`Planner.branch_cost`). 0: plan everything above
    ``min_rate``."""
    method: Literal["auto", "generate", "score"] = "auto"
    """How branches are written: ``generate`` (constrained generation, a batch of branches
    sharing one prefix), ``score`` (one forward pass ranks every candidate action for one
    event; only for enumerable action spaces), or ``auto``: whichever the latency model
    predicts is cheaper per branch for this schema and device."""
    prior_gap_s: float | None = Field(default=None, gt=0)
    """The event gap assumed until two events have been seen, by the cost rule and the pace of
    the look-ahead (None: no cost and no pace until then, so a fresh agent plans everything
    above ``min_rate``, in every state it may reach)."""
    relaxed_urgency: float = Field(default=0.3, ge=0, le=1)
    """Urgency of an event the live tiers could still answer in time."""
    margin_s: float = Field(default=0.02, ge=0)
    """Publishing and actuation time kept aside from each deadline."""
    max_new_tokens: int = Field(default=48, ge=4)
    batch_timeout_s: float = Field(default=60.0, gt=0)
    """The deadline given to the model for one batch."""
    hang_grace_s: float = Field(default=5.0, gt=0)
    """A batch with no reply this long past its deadline is a hang: abandoned, counted, and
    retried after the backoff."""
    retry_base_s: float = Field(default=0.5, gt=0)
    retry_max_s: float = Field(default=30.0, gt=0)
    budget: PlannerBudget | None = None
    """At most so many branches, or device-seconds, per minute (None: whatever idle time
    allows); the most valuable branches are written first (:mod:`._budget`)."""


@dataclass(slots=True)
class PlannerStats:
    """What the planner has done."""

    rounds: int = 0
    branches: int = 0
    """Branches generated and inserted (a branch planned twice counts twice)."""
    tokens: int = 0
    scored: int = 0
    """Branches written by scoring candidates (the rest were generated)."""
    below_cost: int = 0
    """Branches left out of a ranking because their value did not cover their cost (counted
    once per ranking they were left out of)."""
    errors: dict[str, int] = field(default_factory=dict)
    cancelled: int = 0
    refused_rounds: int = 0
    """Rounds the backend refused whole, predicting they would not fit the round's time limit
    (each is followed by a retry round: one branch, with no such check)."""
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
            "below_cost": self.below_cost,
            "scored": self.scored,
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
        cover_top: how many likely events :meth:`track_cover` waits for.
        live_tiers: whether the executor has model tiers that can answer an event the tree
            does not (off: every event relies on the tree, so every type is urgent).
        near_states: whether the executor borrows answers from neighbouring states (then a
            branch is not planned where a neighbour's would answer it).
        candidates: the enumerable actions (the executor's score tier's), for scoring-based
            planning.
        fleet: the fleet this planner shares its tree with (None: it plans alone): the states
            it plans for, the branches it may write, and where written ones go.
        guards: the spec's guards: each branch is written under the grammar they narrow for
            its (state, event), scored among the candidates they allow, and never stored when
            one refuses it (a guard that cannot be compiled).

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
        live_tiers: bool = True,
        near_states: bool = True,
        candidates: Sequence[BaseModel] | None = None,
        fleet: FleetLink | None = None,
        guards: GuardSet | None = None,
    ) -> None:
        self._backend = backend
        self._guards = guards if guards is not None else GuardSet()
        self._cand_readable = [schema.readable(c) for c in candidates or []]
        self._fleet = fleet
        self._live_tiers = live_tiers
        self._near_states = near_states
        self._gate = gate
        self._space = space
        self._schema = schema
        self._tree = tree
        self._forecaster = forecaster
        self._description = description
        self._state = state
        self._config = config or PlannerConfig()
        self._candidates = list(candidates) if candidates else None
        if self._config.method == "score" and not self._candidates:
            raise ConfigError(
                "planner.method", "score", "needs an enumerable action space or candidates"
            )
        self._cand_tokens = (
            sum(len(schema.compact(c)) for c in self._candidates) // 3 if self._candidates else 0
        )
        self._drift = StateDrift(state.abstraction) if self._config.drift else None
        self._agreement = BorrowAgreement()
        self._cover_top = cover_top
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._covered = asyncio.Event()
        # Set whenever coverage may have moved (a branch written, the state changed, the
        # planner fell asleep): what until_covered waits on instead of polling.
        self._progress = asyncio.Event()
        self._retry_at: dict[tuple[str, EventKey], tuple[float, int]] = {}
        self._cover_watch: tuple[float, str, list[EventKey]] | None = None
        self._last_event_at: float | None = None
        self._mean_gap_s: float | None = None
        # The recent gaps themselves, not only their mean: bursts change when events come.
        self._gaps: deque[float] = deque(maxlen=_GAPS_KEPT)
        # Per type and prompt length: the events the tree missed that reached the live tiers,
        # and those they answered in time, decayed (:mod:`._live_record`).
        self.live_record = LiveRecord()
        """What the live tiers achieved on the tree's misses in this run."""
        # The mean length of an event's text, per type: with the state's, a prompt's length.
        lengths: dict[str, list[int]] = {name: [] for name in space.types}
        for k in space:
            lengths[k.type].append(len(k.describe()))
        self._event_chars = {name: sum(n) // max(len(n), 1) for name, n in lengths.items()}
        self._bucket: BudgetBucket | None = None
        # Set when a whole round came back NOT_STARTED: the backend predicted that not even
        # the round fits its time limit, from samples that may be stale (a warm-up measured
        # on a busy machine). Nothing then runs to correct the prediction, so the next round
        # is a retry round: one branch with no predicted-time check (the hang limit still holds),
        # whose time becomes a fresh sample -- instead of asking, and being refused, forever.
        self._retry_round = False
        self.stats = PlannerStats()
        self.measured = MeasuredCosts()
        """Seconds per branch each method measured here (``auto`` prefers them to predictions)."""
        self.health = PlannerHealth(
            retry_base_s=self._config.retry_base_s, retry_max_s=self._config.retry_max_s
        )
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

    @property
    def agreement(self) -> BorrowAgreement:
        """How often neighbouring branches it wrote agree, per event type (read only)."""
        return self._agreement

    @property
    def pending_retries(self) -> int:
        """Branches backed off after a failed round, waiting for their retry time."""
        now = self._now()
        return sum(at > now for at, _ in self._retry_at.values())

    @property
    def mean_gap_s(self) -> float | None:
        """The mean time between observed events (None before two have been seen)."""
        return self._mean_gap_s

    def set_state(self, state: WorldState, *, external: bool = False) -> None:
        """Plan for ``state`` now; its most likely events become the first work.

        ``external``: the change came from outside (a patch), not from an event's effects;
        the drift model learns from it.
        """
        changed = state.fingerprint != self._state.fingerprint
        if external and self._drift is not None:
            self._drift.observe_change(self._state, state)
        self._state = state
        if changed:
            self.track_cover()
        self.wake()
        self._progress.set()

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

    async def until_covered(
        self, min_coverage: float, answered: Callable[[EventKey], bool] | None = None
    ) -> float:
        """Wait until the next event's mass that ``answered`` covers reaches ``min_coverage``.

        ``answered`` says whether the tree answers a key in the current state (default: its
        exact branch, as :meth:`coverage`; the agent passes its executor's lookup, which also
        borrows from neighbours). Returns the share then. Returns early, below the target, when
        the planner has nothing left worth writing (its floor, ``min_rate``, leaves the rarest
        keys out): waiting longer would not raise it.
        """

        def exact(key: EventKey) -> bool:
            return self._tree.lookup(self._state.fingerprint_for(key.type), key) is not None

        covered = answered or exact
        while True:
            reached = self._forecaster.coverage(self._state.fingerprint, covered)
            # 1e-9: a sum of probabilities that should be 1 can come out a hair below it.
            if reached >= min_coverage - 1e-9 or self._idle.is_set():
                return reached
            self._progress.clear()
            await self._progress.wait()

    def observe(self, key: EventKey | None, *, live: bool | None = None) -> None:
        """An event was decided: learn from it and re-plan.

        ``live``: the tree did not answer it and the live tiers did in time (True) or did not
        (False); None when the tree answered or no live tier was asked. The cost rule trusts
        the live tiers with a type only as far as they have answered it.
        """
        now = self._now()
        if live is not None and key is not None and self._live_tiers:
            chars = len(self._state.to_json()) + len(key.describe())
            self.live_record.observe(key.type, chars, live, now)
        if self._last_event_at is not None:
            gap = now - self._last_event_at
            # An exponentially weighted mean: the rate of events drifts over a shift.
            self._mean_gap_s = (
                gap if self._mean_gap_s is None else 0.9 * self._mean_gap_s + 0.1 * gap
            )
            self._gaps.append(gap)
        self._last_event_at = now
        if self._drift is not None:
            self._drift.observe_event()
        if self._config.learn:
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

    def live_success(self) -> dict[str, float]:
        """Per event type: the share of the tree's misses the live tiers answer in time.

        Observed, per type and prompt length (the state's and the event's), decayed: events
        the tree did not answer, and how many of those the score or live tier answered by the
        deadline (:class:`LiveRecord`). Before a type has such events the live tiers are taken
        to answer none of them: a prediction that one call fits its deadline is not an answer
        (a slow model that fits on paper can lose every event to queueing and spread), and an
        unfinished live call loses its event where an unneeded branch costs only idle time.
        """
        if not self._live_tiers:
            return dict.fromkeys(self._space.types, 0.0)
        now = self._now()
        state_chars = len(self._state.to_json())
        record = self.live_record
        return {
            name: record.success(name, state_chars + self._event_chars[name], now)
            for name in self._space.types
        }

    def _urgencies(self, success: dict[str, float] | None = None) -> dict[str, float]:
        """Urgency per event type, from the live tiers' success (:meth:`live_success`).

        1 where they answer none of the tree's misses, ``relaxed_urgency`` where they answer
        all, in between as they are seen to.
        """
        success = self.live_success() if success is None else success
        relaxed = self._config.relaxed_urgency
        return {name: 1.0 - s * (1.0 - relaxed) for name, s in success.items()}

    def _batch_size(self) -> int:
        size = self._config.batch_size
        lat = self._backend.latency
        while size > 1 and lat.prefill(size * 32).p95 > self._config.max_prefill_s:
            size //= 2
        return size

    def seconds_per_branch(self) -> dict[str, float]:
        """Predicted model seconds per branch for each way of writing one (p50)."""
        size = self._batch_size()
        lat = self._backend.latency
        out = {"generate": lat.call(size * 32, lat.typical_steps(), rows=size).p50 / size}
        if self._candidates:
            out["score"] = lat.prefill(32 + self._cand_tokens).p50
        # A way that has run costs what it measured on this backend, not what the law predicts.
        for way in out:
            measured = self.measured.get(way)
            if measured is not None:
                out[way] = measured
        return out

    def _writing(self) -> tuple[str, float]:
        """The way branches are written now and its predicted seconds per branch."""
        costs = self.seconds_per_branch()
        way: str = self._config.method
        if way == "auto":  # the cheapest, or one that lost, due to be measured again
            way = self.measured.choose(costs)
        return way, costs[way]

    def _revisiting(self) -> str | None:
        """The way the next round writes with when it is a revisit of one that lost."""
        if self._config.method != "auto":
            return None
        costs = self.seconds_per_branch()
        way = self.measured.choose(costs)
        return None if way == min(costs, key=costs.__getitem__) else way

    def method(self) -> str:
        """How the next branches are written (``auto`` resolved by :meth:`seconds_per_branch`)."""
        return self._writing()[0]

    def pace(self) -> Pace | None:
        """How fast branches are written next to how fast events come (None: rate unknown).

        The look-ahead uses it to count, in a state not reached yet, only the events that
        would arrive before the planner, once there, has written their branches.
        """
        way, seconds = self._writing()
        return self._pace(way, seconds)

    def _pace(self, way: str, seconds_per_branch: float) -> Pace | None:
        gap = self._mean_gap_s if self._mean_gap_s is not None else self._config.prior_gap_s
        if gap is None or gap <= 0:
            return None  # plan ahead fully until the rate is known
        batch = 1 if way == "score" else self._batch_size()  # scoring: one event a pass
        return Pace(
            gap_s=gap, batch=batch, batch_s=seconds_per_branch * batch, gaps=tuple(self._gaps)
        )

    def branch_cost(self) -> float:
        """A branch's cost: the live-tier work it displaces, in events.

        The events expected to arrive while the model writes it (model seconds per branch, a
        full batch's predicted time shared by its rows, over the mean gap), times the share of
        them the live tiers answer in time (:meth:`live_success`, per type, weighted by the
        forecast mix): only those lose anything to planning. With no live tier, or live tiers
        that answer nothing, planning displaces nothing and costs nothing. Zero until the gap
        is known: a fresh agent plans freely.
        """
        return self._cost(self.live_success(), self._writing()[1])

    def _cost(self, success: dict[str, float], seconds_per_branch: float) -> float:
        gap = self._mean_gap_s if self._mean_gap_s is not None else self._config.prior_gap_s
        if gap is None or gap <= 0 or self._config.cost_weight == 0 or not self._live_tiers:
            return 0.0
        p_type = self._forecaster.type_distribution(self._state.fingerprint)
        live_share = sum(
            float(p) * success[name] for name, p in zip(self._space.types, p_type, strict=True)
        )
        if live_share == 0.0:
            return 0.0
        return self._config.cost_weight * seconds_per_branch / gap * live_share

    def candidates(self) -> list[Branch]:
        """Uncovered branches worth planning, most valuable first.

        Value = chance the branch is needed within the horizon x its type's urgency
        (:func:`look_ahead`). A branch is kept when its expected uses per event of the horizon
        (x urgency) reach ``min_rate`` and its value reaches its cost (:meth:`branch_cost`).
        Runs on the event loop after every observed event: the look-ahead prunes unlikely
        states so it stays in the milliseconds.
        """
        now = self._now()
        cfg = self._config
        success = self.live_success()
        urgency = self._urgencies(success)
        # The model-time figures once per ranking: this runs on the loop after every event.
        way, seconds = self._writing()
        cost = self._cost(success, seconds)
        found: dict[tuple[str, EventKey], Expected] = {}
        need: dict[tuple[str, EventKey], float] = {}
        fleet = self._fleet
        origins = fleet.origins(self._state) if fleet is not None else ((self._state, 1.0),)
        for origin, robots in origins:
            for e in look_ahead(
                origin,
                forecaster=self._forecaster,
                space=self._space,
                drift=self._drift,
                horizon=cfg.horizon,
                pace=self._pace(way, seconds),
            ):
                left = self._unanswered(e.state, e.fingerprint, e.key)
                if left == 0.0:
                    continue
                if fleet is not None and fleet.taken(e.fingerprint, e.key):
                    continue
                retry = self._retry_at.get((e.fingerprint, e.key))
                if retry is not None and retry[0] > now:
                    continue
                found.setdefault((e.fingerprint, e.key), e)
                # Expected uses add up over the robots that may need the branch.
                ident = (e.fingerprint, e.key)
                need[ident] = need.get(ident, 0.0) + robots * e.uses * left
        out: list[Branch] = []
        for ident, uses in cover(need, self._space, self._agreement):
            e = found[ident]
            p_used = 1.0 - math.exp(-uses)
            weight = urgency[e.key.type]
            if uses / cfg.horizon * weight < cfg.min_rate:
                continue
            value = p_used * weight
            if value < cost:
                self.stats.below_cost += 1
                continue
            out.append(Branch(e.state, e.key, p_used, value, e.next_fingerprint))
        out.sort(key=lambda b: -b.value)
        return out

    def _unanswered(self, state: WorldState, fp: str, key: EventKey) -> float:
        """The share of the branch's events the executor would not answer as the model would.

        0 when the tree holds it (or a nearby state does: the executor borrows that without
        asking). A grid neighbour within tolerance answers too, but only as often as
        neighbouring answers agree (:class:`BorrowAgreement`): the rest is still open.
        """
        tree = self._tree
        if tree.lookup(fp, key) is not None:
            return 0.0
        if self._near_states and any(
            tree.lookup(near, key) is not None for near, _ in state.near(key.type)
        ):
            return 0.0
        if any(tree.lookup(fp, near) is not None for near, _ in self._space.neighbours(key)):
            return 1.0 - self._agreement.rate(key.type)
        return 1.0

    def _next_batch(self) -> list[Branch]:
        ranked = self.candidates()
        if not ranked:
            return []
        # One batch shares one prompt prefix: the state the best branch is planned in.
        first = ranked[0].state
        same = [b for b in ranked if b.state == first]
        return same[: self._batch_size()]

    # -- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Plan forever (until cancelled); no model failure ends it.

        A round that raises, hangs past ``batch_timeout_s`` + ``hang_grace_s``, or gets only
        unusable outputs back is counted in :attr:`health`, its branches are backed off, and
        the next round waits the health's backoff (see :class:`PlannerHealth`).
        """
        cfg = self._config
        if cfg.budget is not None:
            self._bucket = BudgetBucket(cfg.budget, self._now())
        while True:
            self._wake.clear()
            # Let ready I/O callbacks (a decision being published) go before ranking work.
            await asyncio.sleep(0)
            paid = await self._paid_branches()
            if paid is None:
                continue
            batch = self._next_batch()[:paid]
            if not batch:
                if self.health.status == "starting":
                    self.health.succeeded(self._now())  # nothing to write is not a failure
                self.sleeping = True
                self.stats.idle_waits += 1
                self._idle.set()
                self._progress.set()
                await self._wake.wait()
                self.sleeping = False
                continue
            t0 = self._now()
            branches0, busy0 = self.stats.branches, self.stats.busy_s
            try:
                async with asyncio.timeout(cfg.batch_timeout_s + cfg.hang_grace_s) as limit:
                    failure = await self._run_batch(batch)
            except Exception as exc:  # anything at all: the planner outlives its model
                self.stats.busy_s += self._now() - t0
                hung = isinstance(exc, TimeoutError) and limit.expired()
                kind = "hang" if hung else type(exc).__name__
                failure = (kind, "no reply within the batch time limit" if hung else str(exc))
            if self._bucket is not None:
                self._bucket.spend(
                    self._now(),
                    branches=self.stats.branches - branches0,
                    device_s=self.stats.busy_s - busy0,
                )
            if failure is None:
                self.health.succeeded(self._now())
                continue
            kind, detail = failure
            self._count_error(kind)
            log.warning("planner round failed (%s): %s", kind, detail)
            for b in batch:
                self._backoff(b)
            await asyncio.sleep(self.health.failed(kind, detail, self._now()))

    async def _paid_branches(self) -> int | None:
        """How many branches the budget pays for now (no budget: a whole batch).

        None after waiting for the bucket to refill: the ranking is then stale.
        """
        if self._bucket is None:
            return self._batch_size()
        seconds = self._writing()[1]
        paid = self._bucket.branches(self._now(), seconds)
        if paid > 0:
            return min(paid, self._batch_size())
        await asyncio.sleep(self._bucket.wait_s(self._now(), seconds))
        return None

    def _take_round(self, batch: list[Branch]) -> tuple[list[Branch], bool]:
        """The round to run, and whether it is a retry round (after a round refused whole).

        A retry round is one branch, with no predicted-time check. One branch too when scoring,
        having lost, is revisited: scoring costs the same per branch however many are scored,
        so one measures it at the least cost (:meth:`MeasuredCosts.choose`).
        """
        retry, self._retry_round = self._retry_round, False
        if retry:
            return batch[:1], True
        return (batch[:1] if self._revisiting() == "score" else batch), False

    def _note_refused(self, whole_round: bool) -> None:
        """A round the backend refused whole: the next one is a retry round (``_retry_round``)."""
        if whole_round:
            self.stats.refused_rounds += 1
            self._retry_round = True

    async def _run_batch(self, batch: list[Branch]) -> tuple[str, str] | None:
        """Write one batch; returns (kind, detail) when it wrote nothing usable."""
        # Cut to a retry round before claiming: a claimed branch is one this planner writes.
        batch, retry = self._take_round(batch)
        scoring = self.method() == "score"
        # Before claiming too: a branch left for a later round's grammar is not claimed.
        batch, schema = (batch, self._schema) if scoring else self._one_grammar(batch)
        if self._fleet is not None and batch:
            batch = await self._fleet.claim(batch)  # others' branches are theirs to write
        if not batch:
            return None
        if scoring:
            return await self._score_batch(batch, retry=retry)
        cfg = self._config
        state = batch[0].state
        context = state_text(self._description, state.to_json())
        events = [b.key.describe() for b in batch]
        async with self._gate.background() as cancel:
            t0 = self._now()
            try:
                gens = await self._backend.generate(
                    context,
                    events,
                    schema,
                    deadline=math.inf if retry else self._now() + cfg.batch_timeout_s,
                    cancel=cancel,
                    max_new_tokens=cfg.max_new_tokens,
                )
            finally:
                self.stats.busy_s += self._now() - t0
        if gens and not any(g.status.cut for g in gens):  # a preempted batch measured nothing
            self.measured.observe("generate", self._now() - t0, len(gens))
        self.stats.rounds += 1
        written, bad = 0, []
        for branch, gen in zip(batch, gens, strict=True):
            if gen.ok and gen.action is not None:
                if self._insert(
                    branch, gen.action, gen.text, gen.output_tokens, gen.seconds, schema
                ):
                    written += 1
                else:
                    bad.append("invalid")
            elif gen.status in (
                GenerationStatus.CANCELLED,
                GenerationStatus.DEADLINE,
                GenerationStatus.NOT_STARTED,
            ):
                self.stats.cancelled += 1  # preempted: it stays a candidate
            else:
                bad.append(gen.status.value)
                self._count_error(gen.status.value)
                self._backoff(branch)
        self._check_cover()
        self._note_refused(
            bool(gens) and all(g.status is GenerationStatus.NOT_STARTED for g in gens)
        )
        if written == 0 and bad:
            return "outputs", f"{len(bad)} of {len(batch)} unusable ({', '.join(sorted(set(bad)))})"
        return None

    def _one_grammar(self, batch: list[Branch]) -> tuple[list[Branch], ActionSchema]:
        """The branches of ``batch`` that share the first one's guard-narrowed grammar.

        A round is one constrained call, so one grammar: the others stay candidates for the
        next rounds. A branch the guards leave no action for is not planned (the default
        answers it) and backs off.
        """
        if not self._guards:
            return batch, self._schema
        grammars: list[tuple[Branch, ActionSchema]] = []
        for b in batch:
            narrowed = self._guards.narrowed(self._schema, self._applies(b))
            if narrowed is None:
                self._count_error("guarded")
                self._backoff(b)
            else:
                grammars.append((b, narrowed))
        if not grammars:
            return [], self._schema
        first = grammars[0][1]
        return [b for b, g in grammars if g is first], first

    def _applies(self, b: Branch) -> tuple[int, ...]:
        return self._guards.applicable(dict(b.key.params), b.state)

    async def _score_batch(self, batch: list[Branch], *, retry: bool) -> tuple[str, str] | None:
        """Write branches by scoring every candidate action, one event per forward pass."""
        cands = self._candidates
        assert cands is not None
        cfg = self._config
        context = state_text(self._description, batch[0].state.to_json())
        refused = 0
        async with self._gate.background() as cancel:
            for branch in batch:
                if self._guards:  # the candidates the guards allow for this branch
                    allowed = self._guards.allowed_candidates(
                        self._cand_readable, self._applies(branch)
                    )
                    cands = [self._candidates[j] for j in allowed] if self._candidates else []
                    if not cands:
                        self._count_error("guarded")
                        self._backoff(branch)
                        continue
                t0 = self._now()
                try:
                    scores = await self._backend.score(
                        context,
                        branch.key.describe(),
                        cands,
                        self._schema,
                        deadline=math.inf if retry else t0 + cfg.batch_timeout_s,
                        cancel=cancel,
                    )
                finally:
                    self.stats.busy_s += self._now() - t0
                best = scores.best
                if best is not None:
                    self.measured.observe("score", scores.seconds, 1)
                if best is None:
                    self.stats.cancelled += 1  # preempted: it stays a candidate
                    if scores.status is GenerationStatus.NOT_STARTED:
                        refused += 1
                    if cancel.cancelled:
                        break
                    continue
                action = cands[best]
                if self._insert(branch, action, self._schema.compact(action), 0, scores.seconds):
                    self.stats.scored += 1
        self.stats.rounds += 1
        self._check_cover()
        self._note_refused(refused == len(batch))
        return None

    def _insert(
        self,
        branch: Branch,
        action: BaseModel,
        compact: str,
        tokens: int,
        seconds: float,
        written_with: ActionSchema | None = None,
    ) -> bool:
        """Put a written branch in the tree; False when the validator of record refuses it.

        Or when a guard refuses it; ``written_with``: the guard-narrowed schema it was written
        under.
        """
        readable = (written_with or self._schema).readable(action)
        if self._guards and self._guards.refusal(readable, dict(branch.key.params), branch.state):
            self._count_error("guarded")
            self._backoff(branch)
            return False
        try:
            node = self._tree.insert(
                PolicyNode(
                    fingerprint=branch.fingerprint,
                    key=branch.key,
                    action=readable,
                    compact=compact,
                    probability=branch.probability,
                    model_id=self._backend.model_id,
                    tokens=tokens,
                    gen_seconds=seconds,
                    created_at=self._now(),
                    next_fingerprint=branch.next_fingerprint,
                )
            )
        except ForethoughtError as exc:  # never an invalid action in the tree
            self._count_error("invalid")
            self._backoff(branch)
            log.warning("planner output refused: %s", exc)
            return False
        if self._fleet is not None:
            self._fleet.written(node)
        self._agreement.observe(self._tree, self._space, branch.fingerprint, branch.key, readable)
        self._retry_at.pop((branch.fingerprint, branch.key), None)
        self.stats.branches += 1
        self.stats.tokens += tokens
        return True

    def _count_error(self, kind: str) -> None:
        self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1

    def _backoff(self, branch: Branch) -> None:
        ident = (branch.fingerprint, branch.key)
        _, tries = self._retry_at.get(ident, (0.0, 0))
        delay = min(self._config.retry_base_s * 2**tries, self._config.retry_max_s)
        self._retry_at[ident] = (self._now() + delay, tries + 1)
        loop = asyncio.get_running_loop()
        loop.call_later(delay, self.wake)  # the branch becomes a candidate again then

    def _check_cover(self) -> None:
        self._progress.set()
        if self._cover_watch is None:
            return
        started, fp, keys = self._cover_watch
        state = self._state
        if state.fingerprint != fp:
            return  # the watched state has gone; the next set_state starts a new watch
        if all(self._tree.lookup(state.fingerprint_for(k.type), k) is not None for k in keys):
            self.stats.cover_times_s.append(self._now() - started)
            self._cover_watch = None
            self._covered.set()

    def coverage(self) -> float:
        """Next-event probability mass the tree answers in the current state."""
        state = self._state
        return self._forecaster.coverage(
            state.fingerprint,
            lambda k: self._tree.lookup(state.fingerprint_for(k.type), k) is not None,
        )
