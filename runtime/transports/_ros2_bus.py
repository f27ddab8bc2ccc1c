"""Ros2Bus: an agent as a node of a ROS 2 graph over rmw_zenoh, with no ROS installed.

The map (:class:`~forethought.runtime.Ros2Map`) names the topics: each subscribed topic's
messages (CDR) become events, or patch the state of the next one (a state-only topic); each
decision goes out on the action topic, as a ``std_msgs/msg/String`` carrying the decision's JSON
or as a typed message filled from the action's fields. On the wire it is rmw_zenoh's format
(:mod:`._ros2_wire`): exact topic keys with the type hash, liveliness tokens for the node, its
subscriptions and its publisher (``ros2 node list`` / ``ros2 topic info`` see them), the 33-byte
attachment on every sample it puts. A session is a peer that connects to a Zenoh router at
``tcp/localhost:7447`` by default (as rmw_zenoh's nodes do), or listens.

An event's age: a message's ``header.stamp`` says when it was made (the deadline counts from it,
with the skew and expiry rules of ``sent_at_ns``); without a header, the attachment's source
timestamp says when it was published.

Bad input never crashes the agent and is never decided: a sample without a valid attachment
(rmw_zenoh drops those too), a payload that does not decode as the topic's type (truncated,
another type), a message without a mapped field -- each is counted as malformed and logged once
per topic. (A sample of another type or hash is on another key and never arrives.) An action
that cannot be encoded into the mapped type is never published in part: the spec's default goes
instead, counted as ``encode_failures``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Self

from forethought.policies import ConfigError, InputError, InvalidEvent, NotStarted

from .._capabilities import SupportsAgentId, SupportsBusStats
from .._decision import Decision
from .._event import Arrival, Event, parse_payload
from .._health_report import BusSection
from ._bus import BusStats
from ._drop_oldest import DropOldestQueue
from ._ros2_map import Ros2Map, TopicMap, action_message, map_message
from ._ros2_types import Ros2TypeError, Ros2Types
from ._ros2_wire import Attachment, Qos, endpoint_token, entity_gid, node_token, topic_key
from ._zenoh import zenoh_config
from ._zenoh_security import ZenohSecurity

__all__ = ["ROS2_ROUTER", "Ros2Bus", "Ros2BusSection", "Ros2Stats"]

log = logging.getLogger("forethought.ros2")

ROS2_ROUTER = "tcp/localhost:7447"
"""Where rmw_zenoh's nodes find their router."""


@dataclass(slots=True)
class Ros2Stats(BusStats):
    """Counters of one ROS 2 bus: the common ones, then its own."""

    state_patches: int = 0
    """Messages on state-only topics (they decide nothing)."""
    encode_failures: int = 0
    """Actions that did not fit the action type: the default went instead."""


class Ros2BusSection(BusSection):
    """A ROS 2 bus's section of the health report."""

    state_patches: int = 0
    encode_failures: int = 0


@dataclass(frozen=True, slots=True)
class _Subscribed:
    topic: str
    mapping: TopicMap
    msg_type: str
    key: str


class Ros2Bus(SupportsAgentId, SupportsBusStats):
    """An EventBus on a ROS 2 graph (rmw_zenoh).

    Args:
        ros2_map: the topics, the action topic and custom message types.
        default_action: what goes out when an action does not fit the action type (the spec's
            ``default_action``); checked to fit at construction.
        type_defaults: an event type's own default (the spec's per-type ``default_action``),
            sent instead for that type's events; each checked to fit at construction.
        node: the ROS 2 node name (also the health report's agent id).
        namespace: the node's namespace (``/`` by default).
        domain_id: ``ROS_DOMAIN_ID`` (0 by default).
        connect: Zenoh endpoints to connect to (default: the local router, as rmw_zenoh).
        listen: endpoints to listen on (a peer that others connect to).
        security: TLS and credentials, as the Zenoh bus takes them.
        queue_size: the most events waiting to be decided.
        wall_ns: the wall clock, read only to place deadlines and stamp attachments.

    """

    def __init__(
        self,
        ros2_map: Ros2Map,
        *,
        default_action: Mapping[str, Any],
        type_defaults: Mapping[str, Mapping[str, Any]] | None = None,
        node: str = "forethought",
        namespace: str = "/",
        domain_id: int = 0,
        connect: Sequence[str] | None = None,
        listen: Sequence[str] = (),
        security: ZenohSecurity | None = None,
        queue_size: int = 256,
        max_payload_bytes: int = 1 << 20,
        wall_ns: Callable[[], int] = time.time_ns,
        types: Ros2Types | None = None,
    ) -> None:
        if not node or not node.replace("_", "a").isalnum() or node[0].isdigit():
            raise ConfigError("node", node, "a ROS 2 node name: letters, digits and _")
        if not 0 <= domain_id <= 232:
            raise ConfigError("ROS_DOMAIN_ID", domain_id, "a domain id is 0..232")
        if queue_size < 1:
            raise ConfigError("queue_size", queue_size, "must be at least 1")
        self.map = ros2_map
        self.types = types or ros2_map.types()
        self.agent_id = node
        self.node, self.namespace, self.domain_id = node, namespace, domain_id
        self._connect = tuple(connect) if connect is not None else (ROS2_ROUTER,)
        self._listen = tuple(listen)
        self._security = security or ZenohSecurity()
        self._max_bytes = max_payload_bytes
        self._wall_ns = wall_ns
        self._subscribed = [self._subscription(t, m) for t, m in ros2_map.topics.items()]
        actions = ros2_map.actions
        if not self.types.has(actions.type):
            raise ConfigError("actions.type", actions.type, "not a known message type")
        self.action_key = topic_key(
            domain_id, actions.topic, actions.type, self.types.rihs01(actions.type)
        )
        self._default_cdr = self._encode({"action": dict(default_action)}, "default_action")
        self._type_default_cdr = {
            t: self._encode({"action": dict(a)}, f"events[{t}].default_action")
            for t, a in (type_defaults or {}).items()
        }
        zenoh_config(connect=self._connect, listen=self._listen, security=self._security)
        self._pending: DropOldestQueue[Event] = DropOldestQueue(queue_size)
        self._state: dict[str, Any] = {}
        self._logged: set[str] = set()
        self._session: Any = None
        self._declared: list[Any] = []
        self._publisher: Any = None
        self._gid = b"\0" * 16
        self._sequence = 0
        self.tokens: list[str] = []
        """The liveliness tokens declared (node, subscriptions, publisher), once started."""
        self.stats = Ros2Stats()

    def _subscription(self, topic: str, mapping: TopicMap) -> _Subscribed:
        if mapping.msg_type is None:
            raise ConfigError(
                f"topics.{topic}.msg_type", None, "a live topic needs its type: msg_type: T"
            )
        for path in (*mapping.params.values(), *mapping.state.values(), mapping.type):
            why = self.types.check_path(mapping.msg_type, path) if path else None
            if why is not None:
                raise ConfigError(f"topics.{topic}", path, why)
        key = topic_key(
            self.domain_id, topic, mapping.msg_type, self.types.rihs01(mapping.msg_type)
        )
        return _Subscribed(topic, mapping, mapping.msg_type, key)

    def bus_section(self) -> Ros2BusSection:
        """The counters now."""
        return Ros2BusSection(**asdict(self.stats))

    @property
    def keys(self) -> dict[str, str]:
        """Topic -> the Zenoh key it is on (subscriptions and the action topic)."""
        out = {s.topic: s.key for s in self._subscribed}
        out[self.map.actions.topic] = self.action_key
        return out

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        try:
            import zenoh  # noqa: PLC0415 - forethought[ros2]
        except ImportError:
            raise ConfigError(
                "ros2", None, "not installed: pip install 'forethought[ros2]'"
            ) from None
        config = zenoh_config(
            connect=self._connect,
            listen=self._listen,
            security=self._security,
            timestamping=False,
        )
        try:
            session = await asyncio.to_thread(zenoh.open, config)
        except zenoh.ZError as exc:
            where = [*self._connect, *self._listen]
            why = self._security.explain(self._connect, str(exc).split(" at /", 1)[0])
            raise ConfigError("ros2", where, f"cannot open a Zenoh session: {why}") from None
        self._session = session
        loop = asyncio.get_running_loop()
        zid = str(session.info.zid())
        liveliness = session.liveliness()
        self.tokens = [node_token(self.domain_id, zid, 0, self.namespace, self.node)]
        qos = Qos()
        for i, sub in enumerate(self._subscribed, start=1):

            def on_sample(sample: Any, topic: str = sub.topic) -> None:  # a Zenoh thread
                attachment = sample.attachment
                loop.call_soon_threadsafe(
                    self._receive,
                    topic,
                    sample.payload.to_bytes(),
                    None if attachment is None else attachment.to_bytes(),
                )

            self._declared.append(session.declare_subscriber(sub.key, on_sample))
            self.tokens.append(self._token("MS", zid, i, sub.topic, sub.msg_type, qos))
        actions = self.map.actions
        publisher_token = self._token(
            "MP", zid, len(self._subscribed) + 1, actions.topic, actions.type, qos
        )
        self.tokens.append(publisher_token)
        self._gid = entity_gid(publisher_token)
        self._publisher = session.declare_publisher(self.action_key)
        self._declared += [liveliness.declare_token(t) for t in self.tokens]
        return self

    def _token(self, kind: str, zid: str, entity: int, topic: str, typ: str, qos: Qos) -> str:
        return endpoint_token(
            kind,
            self.domain_id,
            zid,
            0,
            entity,
            self.namespace,
            self.node,
            topic,
            typ,
            self.types.rihs01(typ),
            qos,
        )

    async def __aexit__(self, *exc_info: object) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        for entity in (*self._declared, self._publisher):
            with contextlib.suppress(Exception):
                entity.undeclare()
        self._declared, self._publisher = [], None
        await asyncio.to_thread(session.close)  # the tokens go: the graph sees the node leave

    async def run(self) -> None:
        """Zenoh keeps its links itself: wait until cancelled."""
        await asyncio.Event().wait()

    # -- incoming -----------------------------------------------------------------------------

    def _bad(self, topic: str, why: str) -> None:
        self.stats.malformed += 1
        if topic not in self._logged:  # once per topic: a bad publisher would flood the log
            self._logged.add(topic)
            log.warning("%s: %s (further bad samples on it are counted, not logged)", topic, why)

    def _receive(self, topic: str, raw: bytes, attachment: bytes | None) -> None:
        self.stats.received += 1
        sub = next(s for s in self._subscribed if s.topic == topic)
        try:
            meta = Attachment.decode(attachment)
        except ValueError as exc:
            self._bad(topic, str(exc))
            return
        if len(raw) > self._max_bytes:
            self._bad(topic, f"a payload of {len(raw)} bytes (limit {self._max_bytes})")
            return
        try:
            message = self.types.decode(sub.msg_type, raw)
            mapped = map_message(sub.mapping, message, topic)
        except (Ros2TypeError, InputError) as exc:
            self._bad(topic, str(exc))
            return
        self._state.update(mapped.state)
        if mapped.type is None:
            self.stats.state_patches += 1
            return
        body: dict[str, Any] = {
            "id": f"{topic}#{meta.gid[:4].hex()}-{meta.sequence}",
            "type": mapped.type,
            "params": mapped.params,
            "sent_at_ns": mapped.stamp_ns or meta.timestamp_ns or None,
        }
        if mapped.deadline_ms is not None:
            body["deadline_ms"] = mapped.deadline_ms
        if self._state:
            body["state"], self._state = self._state, {}
        try:
            payload = parse_payload({k: v for k, v in body.items() if v is not None}, max_bytes=0)
            event = Event.from_payload(payload, arrival=Arrival.now(self._wall_ns))
        except InvalidEvent as exc:
            self._bad(topic, str(exc))
            return
        dropped = self._pending.put(event)
        if dropped is not None:
            self.stats.dropped_full = self._pending.dropped
            log.warning("queue full: dropped %s, the oldest waiting event", dropped.id)

    @property
    def waiting(self) -> DropOldestQueue[Event]:
        """The events waiting to be decided (the serve loop takes from it: :class:`QueuedBus`)."""
        return self._pending

    async def events(self) -> AsyncIterator[Event]:
        """Validated events, oldest first."""
        while True:
            yield await self._pending.get()

    # -- outgoing -----------------------------------------------------------------------------

    def _encode(self, payload: Mapping[str, Any], where: str) -> bytes:
        actions = self.map.actions
        try:
            return self.types.encode(actions.type, action_message(actions, payload))
        except Ros2TypeError as exc:
            raise ConfigError(
                where, payload.get("action"), f"does not fit {actions.type}: {exc}"
            ) from None

    async def publish(self, event: Event, decision: Decision) -> None:
        """Put the decision on the action topic (the default, if the action does not fit)."""
        if self._publisher is None:
            raise NotStarted("Ros2Bus")
        payload = decision.payload()
        try:
            cdr = self.types.encode(
                self.map.actions.type, action_message(self.map.actions, payload)
            )
        except Ros2TypeError as exc:
            self.stats.encode_failures += 1
            log.warning("%s: the action does not fit (%s): the default goes instead", event.id, exc)
            cdr = self._type_default_cdr.get(event.type, self._default_cdr)
        self._sequence += 1
        attachment = Attachment(self._sequence, self._wall_ns(), self._gid).encode()
        try:
            self._publisher.put(cdr, attachment=attachment)
            self.stats.published += 1
        except Exception as exc:  # a Zenoh failure must not stop the agent
            self.stats.publish_failures += 1
            log.warning("putting the action for %s failed: %s", event.id, exc)

    async def reject(self, event: Event | None, reason: str, raw: bytes | None = None) -> None:
        """An event that will not be decided (expired, say): counted and logged."""
        if reason.startswith("expired"):
            self.stats.expired += 1
        log.info("not decided: %s (%s)", event.id if event else "?", reason[:200])

    async def warn(self, event: Event, reason: str) -> None:
        """Something about a decided event (outside the event space): counted and logged."""
        self.stats.warnings += 1
        log.info("%s: %s", event.id, reason[:200])
