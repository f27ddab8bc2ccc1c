"""The fleet tree: a JetStream key-value bucket of branches, watched into a local PolicyTree.

One NATS connection per agent (or planner worker). A background task watches the fleet's bucket
and inserts every branch into the local, bounded :class:`PolicyTree` (through the validator of
record; a branch written from another prompt is refused); an event only ever reads the local
tree, so a tree hit never waits on the network. The watch restarts from the bucket's last value
per key after a reconnect, or when the stream holds a revision it has not delivered: that is the
catch-up after an outage, and the cure for a consumer lost with a server node.

An agent publishes its state and the keys of its events (the fleet's demand) through a bounded
outbox that drops the oldest when the fleet is away. As a :class:`FleetLink` it leaves planning
to the fleet's workers while connected; cut off, its own planner plans, and the branches it
writes are offered to the workers when the fleet is back (an agent may not write the bucket:
a worker validates each offer and writes it only if the key is still absent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Self

import nats
import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from forethought.models.internals import raise_lost_cancel, wait_cancelled
from forethought.policies import EventKey, ForethoughtError, PolicyNode, PolicyTree, WorldState

from ._config import FleetConfig
from ._record import BranchRecord, decode_key

if TYPE_CHECKING:
    from forethought.planner.internals import Branch

__all__ = ["FleetStats", "FleetTree", "describe"]

log = logging.getLogger("forethought.fleet")

NATS_ERRORS = (nats.errors.Error, OSError, TimeoutError)
"""What a call to NATS raises when the fleet is away (retried, never fatal)."""

_DELETE_OPS = ("DEL", "PURGE")


def describe(exc: BaseException) -> str:
    """An error's type and message (a client timeout carries no message of its own)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(slots=True)
class FleetStats:
    """What the fleet tree has done."""

    received: int = 0
    """Branches inserted into the local tree from the bucket."""
    refused: int = 0
    """Branches refused: another prompt, an invalid action, an unreadable value."""
    resyncs: int = 0
    """Times the watch started over from the bucket (the first start included)."""
    disconnects: int = 0
    published: int = 0
    """States and events published."""
    dropped: int = 0
    """States and events dropped from a full outbox while the fleet was away."""
    offered: int = 0
    """Branches planned while cut off and offered to the workers."""


class FleetTree:
    """A connection to the fleet that keeps ``tree`` in step with the fleet's bucket.

    Args:
        config: the fleet (``config.url`` must be set).
        tree: the local tree an event reads.
        prompt: :func:`prompt_hash` of the spec: branches written from another are refused.
        role: ``agent`` (reads the tree, publishes demand) or ``planner`` (a worker's view).
        outbox_size: the most states and events held while the fleet is away.
        on_branch: called with each branch inserted from the bucket and the wall-clock time
            it arrived (the propagation benchmark).

    """

    def __init__(
        self,
        *,
        config: FleetConfig,
        tree: PolicyTree,
        prompt: str,
        role: Literal["agent", "planner"] = "agent",
        outbox_size: int = 1024,
        on_branch: Callable[[BranchRecord, float], None] | None = None,
    ) -> None:
        self.config = config
        self.names = config.names
        self.tree = tree
        self.prompt = prompt
        self.role = role
        self.on_branch = on_branch
        self.on_change: Callable[[], None] | None = None
        """Called when the connection comes or goes (the agent wakes its planner)."""
        self.stats = FleetStats()
        self.caught_up = asyncio.Event()
        """Set once the watch has delivered every branch in the bucket (after each resync)."""
        self._options = config.connect_options()
        self._nc: Client | None = None
        self._connected = asyncio.Event()
        self._reconnects = 0
        self._revision = 0
        self._outbox: deque[tuple[str, bytes]] = deque(maxlen=outbox_size)
        self._offers: deque[BranchRecord] = deque()
        self._wake_outbox = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    # -- connection ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """Whether the fleet is reachable now."""
        return self._connected.is_set()

    @property
    def cut_off(self) -> bool:
        """Whether the fleet was reachable once and is not now.

        An agent that has not reached the fleet yet is starting, not cut off: the workers'
        branches arrive once it connects, and planning alone meanwhile would write (and offer)
        what the fleet has planned already.
        """
        return self._nc is not None and not self._connected.is_set()

    @property
    def js(self) -> JetStreamContext:
        """The JetStream context (raises before the first connection)."""
        if self._nc is None:
            raise ForethoughtError("the fleet tree is not connected yet")
        return self._nc.jetstream(timeout=2.0)

    @property
    def reconnects(self) -> int:
        """Times the connection came back after a loss (subscriptions restart on a change)."""
        return self._reconnects

    async def wait_connected(self) -> None:
        """Return once the fleet is reachable."""
        await self._connected.wait()

    async def __aenter__(self) -> Self:
        self._runner = asyncio.create_task(self._run(), name=f"fleet[{self.names.fleet}]")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            self._runner.cancel()
            await wait_cancelled(self._runner)
        if self._nc is not None:
            with contextlib.suppress(*NATS_ERRORS):
                await self._nc.close()

    async def _run(self) -> None:
        await self._connect()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._watch(), name=f"fleet[{self.names.fleet}].watch")
            if self.role == "agent":
                tg.create_task(self._send(), name=f"fleet[{self.names.fleet}].outbox")

    async def _connect(self) -> None:
        """Connect, retrying until the fleet answers (an agent runs meanwhile, on its own)."""

        async def disconnected() -> None:
            if self._connected.is_set():
                self.stats.disconnects += 1
            self._connected.clear()
            self._changed()

        async def reconnected() -> None:
            self._reconnects += 1
            self._connected.set()
            self._wake_outbox.set()
            self._changed()

        async def error(exc: Exception) -> None:
            # Some of the client's errors carry no message: the type says what happened.
            log.warning("fleet connection: %s", str(exc) or type(exc).__name__)

        while True:
            raise_lost_cancel()  # nats-py's waits can swallow one (Python 3.11)
            try:
                self._nc = await nats.connect(
                    **self._options,
                    name=f"forethought-{self.role}-{self.config.robot}",
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.25,
                    connect_timeout=1,
                    disconnected_cb=disconnected,
                    reconnected_cb=reconnected,
                    error_cb=error,
                )
            except NATS_ERRORS as exc:
                log.info("fleet not reachable yet (%s); retrying", describe(exc))
                await asyncio.sleep(0.5)
                continue
            self._connected.set()
            self._changed()
            return

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # -- the watch ----------------------------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            raise_lost_cancel()  # nats-py's waits can swallow one (Python 3.11)
            await self._connected.wait()
            try:
                kv = await self.js.key_value(self.names.tree)
                await self._follow(kv)
            except nats.js.errors.BucketNotFoundError:
                await asyncio.sleep(0.5)  # no worker has created the tree yet
            except NATS_ERRORS as exc:
                log.info("fleet watch interrupted (%s); starting over", describe(exc))
                await asyncio.sleep(0.25)

    async def _follow(self, kv: KeyValue) -> None:
        """Deliver the bucket's last value per key, then every write, until a resync is due."""
        self.caught_up.clear()
        self.stats.resyncs += 1
        reconnects = self._reconnects
        watcher = await kv.watchall()
        try:
            while True:
                raise_lost_cancel()  # nats-py's waits can swallow one (Python 3.11)
                try:
                    entry = await watcher.updates(timeout=1.0)  # type: ignore[no-untyped-call]
                except nats.errors.TimeoutError:
                    if self._reconnects != reconnects or await self._behind():
                        return
                    continue
                if entry is None:
                    self.caught_up.set()
                    continue
                self._revision = max(self._revision, entry.revision or 0)
                self._apply(entry.key, entry.value, entry.operation)
        finally:
            with contextlib.suppress(*NATS_ERRORS, AttributeError):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def _behind(self) -> bool:
        """Whether the bucket holds a write the watch has not delivered (its consumer is lost)."""
        info = await self.js.stream_info(f"KV_{self.names.tree}")
        return info.state.last_seq > self._revision and info.state.messages > 0

    def _apply(self, bucket_key: str, value: bytes | None, op: str | None) -> None:
        try:
            if op in _DELETE_OPS or not value:
                fp, key = decode_key(bucket_key)
                self.tree.remove(fp, key)
                return
            record = BranchRecord.decode(value)
        except ValueError as exc:
            self.stats.refused += 1
            log.warning("fleet branch %s unreadable: %s", bucket_key, exc)
            return
        if record.prompt != self.prompt:
            self.stats.refused += 1
            return
        node = record.node
        held = self.tree.lookup(node.fingerprint, node.key)
        if held is not None and held.compact == node.compact:
            return  # a resync delivers what we hold already
        try:
            self.tree.insert(node)
        except ForethoughtError as exc:  # never an invalid action in the tree
            self.stats.refused += 1
            log.warning("fleet branch refused: %s", exc)
            return
        self.stats.received += 1
        if self.on_branch is not None:
            # The wall clock, not the loop's: the writer, elsewhere, stamped the record with it.
            self.on_branch(record, time.time())

    # -- an agent's demand and offers ---------------------------------------------------------

    def publish_state(self, state: WorldState) -> None:
        """Tell the fleet which state this robot is in (never blocks; dropped if away long)."""
        self._queue(self.names.state_subject(self.config.robot), state.to_json().encode())

    def publish_event(self, key: EventKey | None, fingerprint: str) -> None:
        """Tell the fleet this robot saw ``key`` in state ``fingerprint``."""
        data = {"key": None if key is None else key.as_json(), "fingerprint": fingerprint}
        self._queue(self.names.event_subject(self.config.robot), orjson.dumps(data))

    def _queue(self, subject: str, data: bytes) -> None:
        if len(self._outbox) == self._outbox.maxlen:
            self.stats.dropped += 1
        self._outbox.append((subject, data))
        self._wake_outbox.set()

    async def _send(self) -> None:
        while True:
            raise_lost_cancel()  # nats-py's waits can swallow one (Python 3.11)
            await self._wake_outbox.wait()
            self._wake_outbox.clear()
            await self._connected.wait()
            nc = self._nc
            assert nc is not None
            try:
                while self._outbox:
                    subject, data = self._outbox[0]
                    await nc.publish(subject, data)
                    self._outbox.popleft()
                    self.stats.published += 1
                while self._offers:
                    record = self._offers[0]
                    await self.js.publish(
                        self.names.offer_subject(self.config.robot),
                        record.encode(),
                        stream=self.names.demand,
                    )
                    self._offers.popleft()
                    self.stats.offered += 1
            except NATS_ERRORS as exc:
                log.info("fleet publish failed (%s); retrying", describe(exc))
                await asyncio.sleep(0.25)
                self._wake_outbox.set()

    # -- FleetLink: an agent plans only when cut off ------------------------------------------

    def origins(self, own: WorldState) -> Sequence[tuple[WorldState, float]]:
        """An agent plans for its own state."""
        return ((own, 1.0),)

    def taken(self, fingerprint: str, key: EventKey) -> bool:
        """The fleet's workers plan every branch unless this agent is cut off."""
        return not self.cut_off

    async def claim(self, branches: Sequence[Branch]) -> list[Branch]:
        """Cut off, every branch is ours to write (and to offer later)."""
        return list(branches) if self.cut_off else []

    def written(self, node: PolicyNode) -> None:
        """A branch planned while cut off: offer it once the fleet is back."""
        self._offers.append(BranchRecord.of(node, prompt=self.prompt, writer=self.config.robot))
        self._wake_outbox.set()
