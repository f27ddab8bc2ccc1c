"""A planner worker: plans the branches the fleet needs most into the fleet's bucket.

``forethought plan SPEC --fleet nats://… --model URL`` runs one. It has no bus of events: what
to plan comes from the fleet's demand stream, where every agent publishes its state and the
keys of its events. The forecaster learns from every robot's events, and the planner looks
ahead from every state a robot is in, each weighted by the robots there, so a branch's value is
its chance of use summed over the fleet (and through learned drift, over the states robots are
heading to).

Workers never plan the same branch twice: before a batch is written each branch is claimed
with the claims bucket's create-if-absent (compare-and-set). Claims expire with the bucket's
``max_age``, so a crashed worker's claims lapse and another takes them over. A branch itself
is written with create-if-absent too: an agent's offer (a branch it planned while cut off)
enters the bucket only where nobody wrote that key first, after the validator of record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

import nats.errors
import nats.js.api
import nats.js.errors
import orjson
from nats.aio.msg import Msg
from nats.js.kv import KeyValue

from forethought.models import ModelBackend
from forethought.models.internals import ModelGate, raise_lost_cancel, wait_cancelled
from forethought.planner import PlannerConfig
from forethought.planner.internals import Forecaster, Planner
from forethought.policies import (
    AgentSpec,
    EventKey,
    ForethoughtError,
    PolicyNode,
    PolicyTree,
    WorldState,
)

from ._config import FleetConfig
from ._record import BranchRecord, branch_key, prompt_hash
from ._tree import NATS_ERRORS, FleetTree, describe

if TYPE_CHECKING:
    from nats.js import JetStreamContext

    from forethought.planner.internals import Branch

__all__ = ["FleetWorker", "WorkerStats", "ensure_fleet"]

log = logging.getLogger("forethought.fleet")

OFFER_ACK_WAIT_S = 5.0
"""How long an offer fetched and not acknowledged waits before it is delivered again.

An offer is acknowledged only once written (or refused); one whose write timed out, in a
cluster electing its leaders after a restart, comes back after this wait rather than the
server's default 30 s.
"""


_NO_PLACEMENT = 10005
"""JetStream's ``err_code`` for "no suitable peers for placement": a replica's node is not
(yet) counted as an online peer by the meta leader."""
_NOT_AVAILABLE = 10008
"""JetStream's ``err_code`` for "JetStream system temporarily unavailable" (503): no meta leader
yet. A 503 without it is nats-py's answer to no responders at all (JetStream not enabled)."""
_PLACE_RETRY_S = (0.2, 2.0)
"""The first and the longest pause between tries of a placement the cluster cannot make yet."""


def _not_placeable_yet(exc: BaseException) -> bool:
    """The cluster cannot place a replicated stream now, and may once its peers are back.

    While a node starts (or restarts), ``/healthz`` already answers and clients connect, but
    the meta leader counts a peer online only once it has heard from it; until then, and while
    a leader is elected, creating a stream is refused. Any other refusal (more replicas than
    nodes, JetStream not enabled, a bucket that exists with other settings, a permission) is
    final.
    """
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return exc.err_code == _NOT_AVAILABLE
    # The same code answers a request no cluster could meet (more replicas than nodes); only
    # a peer that is offline may come back.
    return (
        isinstance(exc, nats.js.errors.APIError)
        and exc.err_code == _NO_PLACEMENT
        and "offline" in (exc.description or "")
    )


async def ensure_fleet(js: JetStreamContext, config: FleetConfig) -> None:
    """Create the fleet's buckets and demand stream where missing (idempotent).

    A cluster that cannot place them yet (see :func:`_not_placeable_yet`) is waited for, as a
    fleet not yet reachable is: tried again with a pause that doubles up to 2 s, logged once.
    """
    pause, longest = _PLACE_RETRY_S
    said = False
    while True:
        raise_lost_cancel()  # nats-py's waits can swallow one (Python 3.11)
        try:
            await _create_fleet(js, config)
        except nats.js.errors.APIError as exc:
            if not _not_placeable_yet(exc):
                raise
            if not said:
                log.warning(
                    "fleet %s: the cluster cannot place its %d-replica streams yet (%s); "
                    "trying again until it can",
                    config.names.fleet,
                    config.replicas,
                    exc.description,
                )
                said = True
            await asyncio.sleep(pause)
            pause = min(2 * pause, longest)
        else:
            return


async def _create_fleet(js: JetStreamContext, config: FleetConfig) -> None:
    names = config.names
    r = config.replicas
    await js.create_key_value(bucket=names.tree, history=1, replicas=r)
    await js.create_key_value(bucket=names.claims, history=1, replicas=r, ttl=config.claim_ttl_s)
    await js.add_stream(
        name=names.demand,
        subjects=names.demand_subjects,
        max_age=config.demand_max_age_s,
        num_replicas=r,
    )


@dataclass(slots=True)
class WorkerStats:
    """What a worker has done."""

    claimed: int = 0
    """Branches this worker claimed (and so planned)."""
    claimed_elsewhere: int = 0
    """Claims refused because another worker held the branch."""
    written: int = 0
    """Branches written to the bucket."""
    already_written: int = 0
    """Writes refused because the key was in the bucket already (no duplicate entered)."""
    offers_written: int = 0
    offers_refused: int = 0
    """Offers that failed validation or came from another prompt."""
    states: int = 0
    events: int = 0


class FleetWorker:
    """A planner that plans for a fleet (see the module docstring).

    Args:
        spec: the spec the fleet's agents run.
        backend: the model (started and stopped with the worker).
        config: the fleet.
        worker_id: this worker's name in claims.
        planner: planner settings.
        tree_max_nodes: the worker's local view of the tree is bounded too.

    """

    def __init__(
        self,
        spec: AgentSpec,
        *,
        backend: ModelBackend,
        config: FleetConfig,
        worker_id: str = "worker",
        planner: PlannerConfig | None = None,
        tree_max_nodes: int = 10_000,
    ) -> None:
        self.spec = spec
        self.config = config
        self.names = config.names
        self.worker_id = worker_id
        self.backend = backend
        self.schema = spec.action_schema()
        self.space = spec.event_space()
        self._initial = spec.initial_state()
        self.prompt = prompt_hash(spec.description, self.schema.fingerprint)
        self.tree = PolicyTree(max_nodes=tree_max_nodes, check=self.schema.validate)
        self.forecaster = Forecaster(self.space)
        self.fleet = FleetTree(config=config, tree=self.tree, prompt=self.prompt, role="planner")
        self.planner = Planner(
            backend=backend,
            gate=ModelGate(),
            space=self.space,
            schema=self.schema,
            tree=self.tree,
            forecaster=self.forecaster,
            description=spec.description,
            state=self._initial,
            config=planner,
            live_tiers=False,  # a worker answers no event: every branch is worth its time
            candidates=(
                [self.schema.validate(c) for c in spec.candidates]
                if spec.candidates
                else self.schema.enumerate(16)
            ),
            fleet=self,
        )
        self.fleet.on_change = self.planner.wake
        self.stats = WorkerStats()
        self._robots: dict[str, WorldState] = {}
        self._elsewhere: dict[str, float] = {}
        self._writes: deque[BranchRecord] = deque()
        self.wrote: list[str] = []
        """The bucket keys this worker wrote, as the cluster acknowledged them."""
        self._wake_writer = asyncio.Event()
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> Self:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.backend)
            await self.backend.prepare(self.schema)
            await stack.enter_async_context(self.fleet)
            await self.fleet.wait_connected()
            await ensure_fleet(self.fleet.js, self.config)
            tg = await stack.enter_async_context(_Tasks())
            tg.start(self.planner.run(), f"fleet-worker[{self.worker_id}].planner")
            tg.start(self._write(), f"fleet-worker[{self.worker_id}].writer")
            tg.start(self._demand(), f"fleet-worker[{self.worker_id}].demand")
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    @property
    def pending_writes(self) -> int:
        """Branches written by the planner and not yet in the bucket."""
        return len(self._writes)

    # -- FleetLink ----------------------------------------------------------------------------

    def origins(self, own: WorldState) -> Sequence[tuple[WorldState, float]]:
        """Every state a robot is in, weighted by the robots there (``own`` before any)."""
        counts: dict[str, tuple[WorldState, float]] = {}
        for state in self._robots.values():
            held = counts.get(state.fingerprint)
            counts[state.fingerprint] = (state, 1.0 + (held[1] if held else 0.0))
        return list(counts.values()) or [(own, 1.0)]

    def taken(self, fingerprint: str, key: EventKey) -> bool:
        """Held by another worker's unexpired claim, or nothing to claim with (cut off)."""
        if not self.fleet.connected:
            return True
        until = self._elsewhere.get(branch_key(fingerprint, key))
        return until is not None and until > asyncio.get_running_loop().time()

    async def claim(self, branches: Sequence[Branch]) -> list[Branch]:
        """Claim each branch with create-if-absent; returns the ones won."""
        won: list[Branch] = []
        now = asyncio.get_running_loop().time()
        try:
            kv = await self.fleet.js.key_value(self.names.claims)
        except NATS_ERRORS as exc:
            log.info("claiming failed (%s); retrying later", describe(exc))
            return won
        for branch in branches:
            key = branch_key(branch.fingerprint, branch.key)
            try:
                await kv.create(key, self.worker_id.encode())
            except nats.js.errors.KeyWrongLastSequenceError:
                try:
                    ours = await self._holds(kv, key)
                except NATS_ERRORS as exc:
                    log.info("reading a claim failed (%s); retrying later", describe(exc))
                    break
                if ours:
                    won.append(branch)  # ours from an earlier round that wrote nothing
                    continue
                self.stats.claimed_elsewhere += 1
                self._elsewhere[key] = now + self.config.claim_ttl_s
                continue
            except NATS_ERRORS as exc:
                log.info("claiming failed (%s); retrying later", describe(exc))
                break
            self.stats.claimed += 1
            won.append(branch)
        return won

    async def _holds(self, kv: KeyValue, key: str) -> bool:
        try:
            entry = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return False
        return entry.value == self.worker_id.encode()

    def written(self, node: PolicyNode) -> None:
        """Queue a branch for the bucket."""
        self._writes.append(BranchRecord.of(node, prompt=self.prompt, writer=self.worker_id))
        self._wake_writer.set()

    # -- the bucket ---------------------------------------------------------------------------

    async def _write(self) -> None:
        while True:
            raise_lost_cancel()  # nats-py's waits can swallow one (Python 3.11)
            await self._wake_writer.wait()
            self._wake_writer.clear()
            await self.fleet.wait_connected()
            try:
                kv = await self.fleet.js.key_value(self.names.tree)
                while self._writes:
                    if await self._create(kv, self._writes[0]):
                        self.stats.written += 1
                    self._writes.popleft()
            except NATS_ERRORS as exc:
                log.info("writing the tree failed (%s); retrying", describe(exc))
                await asyncio.sleep(0.25)
                self._wake_writer.set()

    async def _create(self, kv: KeyValue, record: BranchRecord) -> bool:
        """Write ``record`` unless its key is there already; returns whether it was written."""
        value = record.encode()
        try:
            await kv.create(record.key, value)
        except nats.js.errors.KeyWrongLastSequenceError:
            held = await kv.get(record.key)
            if held.value != value:
                self.stats.already_written += 1
                return False
            # Our own write, stored, whose acknowledgement was lost (a timeout, a failover):
            # the retry finds it there. It is written, once.
        self.wrote.append(record.key)
        return True

    # -- demand -------------------------------------------------------------------------------

    async def _demand(self) -> None:
        """Follow robots' states, events and offers; start over after a reconnect."""
        names = self.names
        while True:
            raise_lost_cancel()  # nats-py's waits can swallow one (Python 3.11)
            await self.fleet.wait_connected()
            reconnects = self.fleet.reconnects
            js = self.fleet.js
            subs = []
            try:
                subs.append(
                    await js.subscribe(
                        f"ft.{names.fleet}.state.*",
                        stream=names.demand,
                        cb=self._on_state,
                        ordered_consumer=True,
                        deliver_policy=nats.js.api.DeliverPolicy.LAST_PER_SUBJECT,
                    )
                )
                subs.append(
                    await js.subscribe(
                        f"ft.{names.fleet}.event.*",
                        stream=names.demand,
                        cb=self._on_event,
                        ordered_consumer=True,
                        deliver_policy=nats.js.api.DeliverPolicy.NEW,
                    )
                )
                offers = await js.pull_subscribe(
                    f"ft.{names.fleet}.offer.*",
                    durable=names.offers_consumer,
                    stream=names.demand,
                    config=nats.js.api.ConsumerConfig(ack_wait=OFFER_ACK_WAIT_S),
                )
                while self.fleet.reconnects == reconnects:
                    raise_lost_cancel()
                    try:
                        msgs = await offers.fetch(16, timeout=1.0)
                    except TimeoutError:
                        # No offer within the second. The client raises its own TimeoutError
                        # or asyncio's, depending on where in the fetch the time ran out.
                        continue
                    kv = await js.key_value(names.tree)
                    for msg in msgs:
                        await self._offer(kv, msg)
            except NATS_ERRORS as exc:
                log.info("fleet demand interrupted (%s); starting over", describe(exc))
                await asyncio.sleep(0.25)
            finally:
                for sub in subs:
                    with contextlib.suppress(*NATS_ERRORS):
                        await sub.unsubscribe()

    async def _on_state(self, msg: Msg) -> None:
        robot = msg.subject.rsplit(".", 1)[-1]
        try:
            state = WorldState(orjson.loads(msg.data), abstraction=self._initial.abstraction)
        except (ForethoughtError, orjson.JSONDecodeError) as exc:
            log.warning("robot %s sent a bad state: %s", robot, exc)
            return
        self._robots[robot] = state
        self.stats.states += 1
        self.planner.wake()

    async def _on_event(self, msg: Msg) -> None:
        try:
            data = orjson.loads(msg.data)
            key = None if data["key"] is None else EventKey.from_json(data["key"])
            fingerprint = str(data["fingerprint"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning("a robot sent a bad event record: %s", exc)
            return
        self.forecaster.observe(key, fingerprint)
        self.stats.events += 1
        self.planner.wake()

    async def _offer(self, kv: KeyValue, msg: Msg) -> None:
        """Write an agent's offered branch if valid, of our prompt, and not there yet."""
        try:
            record = BranchRecord.decode(msg.data)
            self.schema.validate(record.node.action)
        except (ValueError, ForethoughtError) as exc:
            self.stats.offers_refused += 1
            log.warning("refused an offered branch: %s", exc)
        else:
            if record.prompt != self.prompt:
                self.stats.offers_refused += 1
                await msg.ack()
                return
            if await self._create(kv, record):
                self.stats.offers_written += 1
        await msg.ack()


class _Tasks:
    """Background tasks that end with the worker (cancelled on exit, failures logged)."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, coro: object, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))  # type: ignore[arg-type]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            await wait_cancelled(task)
