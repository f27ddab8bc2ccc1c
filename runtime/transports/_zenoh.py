"""ZenohBus: events from a Zenoh network, decisions back to it (eclipse-zenoh 1.x).

The same contract as :class:`~forethought.runtime.MqttBus`, on Zenoh's key expressions under
``forethought/<agent_id>/``:

* events are subscribed on ``events/**``; each decision is put on ``actions``;
* malformed payloads (too large, not UTF-8, not JSON, wrong fields) are reported on ``errors``;
* a liveliness token ``alive`` says the agent is up -- Zenoh's counterpart of a retained status
  and a last will: it disappears for every subscriber when the session closes or dies;
* a queryable ``decide`` answers a ``get`` with the decision (request/reply, the counterpart of
  MQTT 5's response topic); a malformed query gets an error reply;
* a queryable ``health`` answers a ``get`` with the agent's last :class:`HealthReport` (as of
  its last refresh, every ``health.interval_s``) -- what MQTT's retained status carries, for a
  network without retained messages.

Peer mode by default, with explicit ``connect``/``listen`` endpoints (multicast scouting off
unless asked for). Senders' sessions made by :func:`zenoh_config` stamp what they put (a sample
then says when it was sent); the agent's own session does not, or it would stamp an unstamped
sample as it arrives and an event of unknown age would look fresh. Zenoh delivers samples on its
own threads: the callbacks only copy the bytes and hand them to the event loop, where everything
else happens. Waiting events are bounded: when the queue is full the oldest is dropped and
counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Self

import orjson

from forethought.policies import ConfigError, InvalidEvent, NotStarted

from .._age import zenoh_sent_ns
from .._capabilities import SupportsAgentId, SupportsBusStats, SupportsStatus
from .._decision import Decision
from .._event import Arrival, Event, parse_payload
from .._health_report import BusSection, HealthReport
from ._bus import BusStats
from ._drop_oldest import DropOldestQueue
from ._topics import Topics
from ._zenoh_security import ZenohSecurity

if TYPE_CHECKING:
    from .._config import ZenohConfig

__all__ = ["ZenohBus", "ZenohBusSection", "ZenohStats", "zenoh_config"]

log = logging.getLogger("forethought.zenoh")


@dataclass(slots=True)
class ZenohStats(BusStats):
    """Counters of one Zenoh bus: the common ones, then its own."""

    queries: int = 0
    queries_answered: int = 0
    health_queries: int = 0


class ZenohBusSection(BusSection):
    """A Zenoh bus's section of the health report: every field of :class:`ZenohStats`.

    ``connected`` stays None: Zenoh keeps its links itself and says nothing of them.
    """

    queries: int = 0
    queries_answered: int = 0
    health_queries: int = 0


def zenoh_config(
    *,
    mode: str = "peer",
    connect: Sequence[str] = (),
    listen: Sequence[str] = (),
    multicast: bool = False,
    security: ZenohSecurity | None = None,
    timestamping: bool = True,
) -> Any:
    """A ``zenoh.Config`` for these endpoints (``tcp/127.0.0.1:7447``, ``tls/host:7447``).

    With ``security``, TLS material and credentials go in, and where they are set the first
    connection is required at open (see :class:`ZenohSecurity`). ``timestamping``: every
    sample this session puts carries its hybrid-logical-clock timestamp, which tells an agent
    when the event was sent (its deadline counts from then).
    """
    import zenoh  # noqa: PLC0415 - an optional extra: forethought[zenoh]

    if mode not in ("peer", "client"):
        raise ConfigError("zenoh.mode", mode, "choose peer or client")
    for field, endpoints in (("zenoh.connect", connect), ("zenoh.listen", listen)):
        for e in endpoints:
            if "/" not in e:
                raise ConfigError(field, e, "an endpoint looks like tcp/127.0.0.1:7447")
    config = zenoh.Config()
    config.insert_json5("mode", json.dumps(mode))
    config.insert_json5("connect/endpoints", json.dumps(list(connect)))
    config.insert_json5("listen/endpoints", json.dumps(list(listen)))
    config.insert_json5("scouting/multicast/enabled", json.dumps(multicast))
    config.insert_json5("timestamping/enabled", json.dumps(timestamping))
    (security or ZenohSecurity()).apply(config, connect, listen)
    return config


def _zenoh() -> Any:
    try:
        import zenoh  # noqa: PLC0415
    except ImportError:
        raise ConfigError(
            "zenoh", None, "not installed: pip install 'forethought[zenoh]'"
        ) from None
    return zenoh


class ZenohBus(SupportsAgentId, SupportsStatus, SupportsBusStats):
    """An EventBus on a Zenoh network.

    Args:
        agent_id: names the keys (``forethought/<agent_id>/...``).
        connect: endpoints to connect to (``tcp/host:port``).
        listen: endpoints to listen on.
        mode: ``peer`` (default) or ``client`` (through a router).
        multicast: discover peers by multicast scouting (off: explicit endpoints only).
        security: TLS and credentials (``tls/`` endpoints, user/password authentication).
        max_payload_bytes: larger payloads are rejected on the errors key.
        queue_size: the most events waiting to be decided.
        wall_ns: the wall clock, read only to place ``deadline_ns`` on the loop's clock.

    """

    def __init__(
        self,
        *,
        agent_id: str,
        connect: Sequence[str] = (),
        listen: Sequence[str] = (),
        mode: str = "peer",
        multicast: bool = False,
        security: ZenohSecurity | None = None,
        max_payload_bytes: int = 65_536,
        queue_size: int = 256,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        if not agent_id or any(c in agent_id for c in "*$?#/"):
            raise ConfigError("agent_id", agent_id, "must be non-empty, without * $ ? # or /")
        if queue_size < 1:
            raise ConfigError("queue_size", queue_size, "must be at least 1")
        self._mode, self._multicast = mode, multicast
        self._security = security or ZenohSecurity()
        self._connect, self._listen = tuple(connect), tuple(listen)
        self._config()  # validates now; opens nothing
        self.agent_id = agent_id
        self.topics = Topics(agent_id)
        self.events_key = self.topics.events_key
        self.actions_key = self.topics.actions
        self.errors_key = self.topics.errors
        self.decide_key = self.topics.decide
        self.alive_key = self.topics.alive
        self.health_key = self.topics.health
        self._health = b'{"online":true,"status":"starting"}'
        """The last report pushed by :meth:`publish_status`, as the ``health`` answer."""
        self._max_bytes = max_payload_bytes
        self._wall_ns = wall_ns
        self._pending: DropOldestQueue[Event] = DropOldestQueue(queue_size)
        self._queries: dict[str, Any] = {}
        self._session: Any = None
        self._declared: list[Any] = []
        self._actions: Any = None
        self._errors: Any = None
        self.stats = ZenohStats()

    @classmethod
    def from_config(
        cls,
        config: ZenohConfig,
        *,
        connect: Sequence[str] | None = None,
        listen: Sequence[str] | None = None,
        agent_id: str | None = None,
    ) -> Self:
        """The bus that ``config`` describes.

        ``connect``, ``listen``, ``agent_id``: given instead of its own (an empty list counts
        as not given). Reads ``password_file`` now.
        """
        return cls(
            agent_id=agent_id or config.agent_id,
            connect=connect or config.connect,
            listen=listen or config.listen,
            mode=config.mode,
            multicast=config.multicast,
            security=config.security(),
            max_payload_bytes=config.max_payload_bytes,
            queue_size=config.queue_size,
        )

    def bus_section(self) -> ZenohBusSection:
        """The counters now."""
        return ZenohBusSection(**asdict(self.stats))

    def _config(self) -> Any:
        return zenoh_config(
            mode=self._mode,
            connect=self._connect,
            listen=self._listen,
            multicast=self._multicast,
            security=self._security,
            # Off here: a session with it on stamps samples that come without a timestamp as
            # they arrive, which would make an event of unknown age look fresh.
            timestamping=False,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        zenoh = _zenoh()
        loop = asyncio.get_running_loop()
        config = self._config()
        try:
            session = await asyncio.to_thread(zenoh.open, config)
        except zenoh.ZError as exc:
            where = [*self._connect, *self._listen]
            why = self._security.explain(self._connect, str(exc).split(" at /", 1)[0])
            raise ConfigError("zenoh", where, f"cannot open a session: {why}") from None
        self._session = session

        def on_sample(sample: Any) -> None:  # a Zenoh thread: copy, hand over, return
            loop.call_soon_threadsafe(
                self._receive,
                sample.payload.to_bytes(),
                str(sample.key_expr),
                zenoh_sent_ns(sample.timestamp),
            )

        def on_query(query: Any) -> None:
            payload = query.payload.to_bytes() if query.payload is not None else b""
            loop.call_soon_threadsafe(self._query, query, payload)

        def on_health(query: Any) -> None:
            loop.call_soon_threadsafe(self._answer_health, query)

        self._declared = [
            session.declare_subscriber(self.events_key, on_sample),
            session.declare_queryable(self.decide_key, on_query),
            session.declare_queryable(self.health_key, on_health),
            session.liveliness().declare_token(self.alive_key),
        ]
        self._actions = session.declare_publisher(self.actions_key)
        self._errors = session.declare_publisher(self.errors_key)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        session, self._session = self._session, None
        for query in self._queries.values():
            with contextlib.suppress(Exception):
                query.drop()
        self._queries.clear()
        if session is None:
            return
        for entity in (*self._declared, self._actions, self._errors):
            with contextlib.suppress(Exception):
                entity.undeclare()
        self._declared = []
        # Closing drops the liveliness token: every watcher sees the agent go.
        await asyncio.to_thread(session.close)

    async def run(self) -> None:
        """Zenoh keeps its links itself (peers reconnect on their own): wait until cancelled."""
        await asyncio.Event().wait()

    # -- incoming -----------------------------------------------------------------------------

    def _parse(self, raw: bytes, sent_ns: int | None = None) -> Event:
        payload = parse_payload(raw, max_bytes=self._max_bytes)
        return Event.from_payload(payload, arrival=Arrival.now(self._wall_ns), sent_ns=sent_ns)

    def _receive(self, raw: bytes, key: str, sent_ns: int | None = None) -> None:
        self.stats.received += 1
        try:
            event = self._parse(raw, sent_ns)
        except InvalidEvent as exc:
            self.stats.malformed += 1
            self._report(None, str(exc), raw, key=key)
            return
        self._enqueue(event)

    def _query(self, query: Any, raw: bytes) -> None:
        self.stats.queries += 1
        try:
            event = self._parse(raw)
        except InvalidEvent as exc:
            self.stats.malformed += 1
            self._report(None, str(exc), raw, key=self.decide_key)
            with contextlib.suppress(Exception):
                query.reply_err(orjson.dumps({"error": str(exc)}))
                query.drop()
            return
        previous = self._queries.pop(event.id, None)
        if previous is not None:  # the same id asked again: the older asker gets an answer
            with contextlib.suppress(Exception):
                previous.reply_err(orjson.dumps({"error": "superseded by a newer query"}))
                previous.drop()
        self._queries[event.id] = query
        self._enqueue(event)

    def _enqueue(self, event: Event) -> None:
        dropped = self._pending.put(event)
        if dropped is not None:
            self.stats.dropped_full = self._pending.dropped  # the queue counts; stats mirror it
            self._report(dropped, "queue full: dropped as the oldest waiting event", None)
            self._answer_error(dropped.id, "queue full: dropped")

    @property
    def waiting(self) -> DropOldestQueue[Event]:
        """The events waiting to be decided (the serve loop takes from it: :class:`QueuedBus`)."""
        return self._pending

    async def events(self) -> AsyncIterator[Event]:
        """Validated events, oldest first."""
        while True:
            yield await self._pending.get()

    # -- outgoing -----------------------------------------------------------------------------

    async def publish(self, event: Event, decision: Decision) -> None:
        """Put the decision on ``actions`` (and answer the event's ``decide`` query, if any).

        The serve loop checked the deadline just before this call; nothing awaits between.
        """
        if self._actions is None:
            raise NotStarted("ZenohBus")
        body = orjson.dumps(decision.payload())
        try:
            self._actions.put(body)
            self.stats.published += 1
        except Exception as exc:  # a Zenoh failure must not stop the agent
            self.stats.publish_failures += 1
            log.warning("putting the decision for %s failed: %s", event.id, exc)
        query = self._queries.pop(event.id, None)
        if query is not None:
            try:
                query.reply(self.decide_key, body)
                self.stats.queries_answered += 1
            except Exception as exc:
                log.warning("answering the query for %s failed: %s", event.id, exc)
            finally:
                with contextlib.suppress(Exception):
                    query.drop()

    async def reject(self, event: Event | None, reason: str, raw: bytes | None = None) -> None:
        """Report an event that will not be decided on ``errors`` (and to its asker)."""
        if reason.startswith("expired"):
            self.stats.expired += 1
        self._report(event, reason, raw)
        if event is not None:
            self._answer_error(event.id, reason)

    async def warn(self, event: Event, reason: str) -> None:
        """Report ``reason`` about a decided event on ``errors``, as a warning."""
        self.stats.warnings += 1
        if self._errors is not None:
            with contextlib.suppress(Exception):
                self._errors.put(orjson.dumps({"warning": reason[:500], "id": event.id}))

    async def publish_status(self, report: HealthReport) -> None:
        """Keep ``report`` as the answer of the ``health`` queryable."""
        self._health = orjson.dumps(report.model_dump(mode="json"))

    def _answer_health(self, query: Any) -> None:
        self.stats.health_queries += 1
        try:
            query.reply(self.health_key, self._health)
        except Exception as exc:  # a Zenoh failure must not stop the agent
            log.warning("answering a health query failed: %s", exc)
        finally:
            with contextlib.suppress(Exception):
                query.drop()

    def _answer_error(self, event_id: str, reason: str) -> None:
        query = self._queries.pop(event_id, None)
        if query is not None:
            with contextlib.suppress(Exception):
                query.reply_err(orjson.dumps({"id": event_id, "error": reason}))
                query.drop()

    def _report(
        self, event: Event | None, reason: str, raw: bytes | None, key: str | None = None
    ) -> None:
        body: dict[str, Any] = {"error": reason}
        if event is not None:
            body["id"] = event.id
        if raw is not None:
            body["payload"] = raw[:200].decode("utf-8", "replace")
        if key is not None:
            body["key"] = key
        if self._errors is None:
            return
        with contextlib.suppress(Exception):
            self._errors.put(orjson.dumps(body))
