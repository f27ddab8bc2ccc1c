"""MqttBus: events from an MQTT broker, decisions back to it (aiomqtt 2.x, MQTT 5).

Topics under ``forethought/<agent_id>/``: events arrive on ``events/#`` (configurable), each
decision goes to ``actions`` at QoS 1 (and to the event's MQTT 5 response topic with its
correlation data, when it carries one), malformed payloads are reported on ``errors``, and a
retained ``status`` says ``{"online": true}`` on connecting, then carries the agent's
:class:`HealthReport` (refreshed every ``health.interval_s``); the will publishes
``{"online": false}`` if the connection dies.

The connection is kept by one task: on loss it reconnects with exponential backoff and
resubscribes, counting outages and timing each reconnection. Incoming events wait in a bounded
queue; when it is full, a QoS 0 event pushes out the oldest (a stale event is worth least;
counted), and a QoS 1 event waits, unacknowledged, for room: the broker holds the backlog.

Nothing accepted is lost to an outage: delivery is at least once, and every action carries its
event id so that an actuator acts once per id (:class:`ActedIds` does it in a line):

* the session is persistent (``clean_start`` off, ``session_expiry_s``), so QoS 1 events that
  arrive while the agent is reconnecting wait for it at the broker;
* decisions go through one MQTT client kept for the bus's whole life, whose session outlives
  each connection: a decision handed to it while the connection is down, or whose handshake
  an outage cut, is sent again on the next connection by the session itself;
* a broker that answers before it saves its state -- Mosquitto does, at QoS 1 and 2 -- and then
  dies restarts without what it had acknowledged but not yet passed on, and the sender cannot
  tell (R3 under load: 1-2 decisions lost in some runs of 20 kills, acknowledged 1-141 ms before
  a kill). So decisions completed within ``resend_window_s`` before the broker was last heard,
  or since, are published again, as new messages, once a lost connection is back; an actuator
  drops the copies by id;
* refusals on the errors topic go the same way: handed to the session at QoS 1, connected or
  not (a refusal made while the broker is down goes out once it is back), kept among the
  recent outcomes and published again like decisions;
* a broker that comes back without our session (``session present`` off in its CONNACK:
  restarted without persistence, or our session expired) has lost everything it held for us
  and for subscribers away at the time, acknowledged or not. Then every outcome completed
  within ``replay_s`` before is published again, save decisions whose deadline has passed
  (an actuator would drop them);
* QoS 1 by default: Mosquitto passes a QoS 2 message on only at its PUBREL, which widens that
  window by a round trip, and a restarted broker answers a PUBREL for a handshake it forgot
  with "complete" -- so at QoS 2 a decision completed on a later connection than it was handed
  over on is published again too. QoS 2 (``actions_qos=2``) buys nothing through crashes here;
* a redelivered event (the same id) is decided once -- the executor remembers ids, the one
  check of what was decided -- and its decision is not handed to the session again: the bus
  remembers the ids whose decisions the broker has, or are on their way. That is another fact
  than the executor's: a decision that never reached the broker (the outbox full, a refusal
  by the broker, a publish the session refused) was decided but is published when its event
  comes again, and only the bus knows which it was;
* an event is acknowledged to the broker (QoS 1 PUBACK) only once its outcome is out -- its
  decision completed its handshake, or its refusal reported -- so an agent killed before that
  gets it again from the broker when it comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Self

import aiomqtt
import orjson
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from pydantic import Field

from forethought.models.internals import raise_lost_cancel
from forethought.policies import ConfigError, InvalidEvent

from .._age import expiry_interval_s
from .._capabilities import SupportsAgentId, SupportsBusStats, SupportsConnected, SupportsStatus
from .._decision import Decision
from .._event import Arrival, Event, ReplyTo, parse_payload, raw_id
from .._health_report import BusSection, HealthReport
from .._id_window import MQTT_PUBLISHED_MAX_IDS, IdWindow
from ._bus import BusStats
from ._drop_oldest import DropOldestQueue
from ._mqtt_security import MqttSecurity, parse_broker_url, refusal
from ._paho_session import PahoSession
from ._topics import Topics

if TYPE_CHECKING:
    from .._config import MqttConfig

__all__ = [
    "MqttBus",
    "MqttBusSection",
    "MqttStats",
    "expiry_properties",
    "parse_mqtt_url",
    "payload_bytes",
]

log = logging.getLogger("forethought.mqtt")


def parse_mqtt_url(url: str) -> tuple[str, int]:
    """``mqtt://host:port`` or ``mqtts://host:port`` -> (host, port); 1883 / 8883 by default."""
    host, port, _ = parse_broker_url(url)
    return host, port


def payload_bytes(message: aiomqtt.Message) -> bytes:
    """A message's payload as bytes (aiomqtt types it as bytes, str, numbers or None)."""
    raw = message.payload
    return raw if isinstance(raw, bytes) else str(raw).encode()


def expiry_properties(
    deadline_ms: float | None, properties: Properties | None = None
) -> Properties:
    """PUBLISH properties for an event: its Message Expiry Interval set from its deadline.

    The broker drops the event once it has waited that long (whole seconds, rounded up), and
    lowers the interval by the time it waited (MQTT 5 §3.3.2.3.3). No deadline: no expiry.
    """
    props = properties or Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if deadline_ms is not None:
        props.MessageExpiryInterval = expiry_interval_s(deadline_ms)
    return props


# PUBCOMP's "packet identifier not found": the broker lost the state of a handshake its own
# crash cut (a PUBREL sent again). The decision was received once, before: it is not repeated.
_HANDSHAKE_FORGOTTEN = 0x92


def _check_delivery(queue_size: int, actions_qos: int, resend_s: float, replay_s: float) -> None:
    """Refuse delivery settings that cannot work, naming the field."""
    if queue_size < 1:
        raise ConfigError("queue_size", queue_size, "must be at least 1")
    if actions_qos not in (1, 2):
        raise ConfigError("actions_qos", actions_qos, "must be 1 or 2")
    if not resend_s >= 0:
        raise ConfigError("resend_window_s", resend_s, "must be >= 0")
    if not replay_s >= 0:
        raise ConfigError("replay_s", replay_s, "must be >= 0")


@dataclass(frozen=True, slots=True)
class _Outcome:
    """A decision or refusal whose handshake completed: what may have to be published again."""

    done_at: float
    """Loop time its handshake completed."""
    topic: str
    body: bytes
    qos: int
    stale_at: float | None
    """Loop time after which no actuator would act on it (a decision's deadline); None: never."""


@dataclass(slots=True)
class MqttStats(BusStats):
    """Counters of one MQTT bus: the common ones, then its own."""

    outages: int = 0
    connects: int = 0
    replies_refused: int = 0
    """Response topics outside ``forethought/<agent>/replies/`` (not published to)."""
    held: int = 0
    """Decisions handed to the session while the connection was down."""
    republished: int = 0
    """Decisions whose handshake completed on a later connection than the one they were
    handed to the session on (sent again by the session, not by us)."""
    resent: int = 0
    """Decisions and refusals published again, as new messages, after an outage
    (``resend_window_s``, or ``replay_s`` when the broker lost our session): the broker may
    have restarted without them. An actuator acting once per id drops the copies of those
    that had arrived."""
    outbox_dropped: int = 0
    """Decisions not handed to the session because ``outbox_size`` were waiting already (their
    events stay unacknowledged: the broker sends them again)."""
    refused: int = 0
    """Decisions the broker refused (a PUBACK or PUBCOMP with a failure reason), reported."""
    stale_dropped: int = 0
    """Messages a lost connection left unhandled (QoS 1 ones come again from the broker)."""
    repeats_suppressed: int = 0
    """Decisions not published again for a redelivered event id."""
    unanswered_probes: int = 0
    """Connections ended because the broker did not answer a probe (frozen, or a dead link)."""
    reconnect_s: list[float] = field(default_factory=list)
    """Per outage: from losing the connection to being subscribed again."""


class MqttBusSection(BusSection):
    """An MQTT bus's section of the health report: every field of :class:`MqttStats`."""

    outages: int = 0
    connects: int = 0
    replies_refused: int = 0
    held: int = 0
    republished: int = 0
    resent: int = 0
    outbox_dropped: int = 0
    refused: int = 0
    stale_dropped: int = 0
    repeats_suppressed: int = 0
    unanswered_probes: int = 0
    reconnect_s: list[float] = Field(default_factory=list)


class MqttBus(SupportsAgentId, SupportsStatus, SupportsConnected, SupportsBusStats):
    """An EventBus on an MQTT broker.

    Args:
        url: ``mqtt://host:port``, or ``mqtts://host:port`` for TLS.
        agent_id: names the topics (``forethought/<agent_id>/...``).
        events_filter: the subscription (default ``forethought/<agent_id>/events/#``).
        max_payload_bytes: larger payloads are rejected on the errors topic.
        queue_size: the most events waiting to be decided.
        reconnect_min_s, reconnect_max_s: backoff bounds after a lost connection.
        wall_ns: the wall clock, read only to place ``deadline_ns`` on the loop's clock.
        security: credentials and TLS settings (:class:`MqttSecurity`); a refusal (wrong
            credentials, a certificate not accepted) ends :meth:`run` with a ConfigError
            naming the cause instead of retrying.
        session_expiry_s: how long the broker keeps the session (subscription and queued
            QoS 1 events) after the connection is lost (0: a clean session each time).
        outbox_size: the most decisions waiting in the session for their handshake (held
            through an outage); past it an event stays unacknowledged until there is room.
        actions_qos: 1 (the default) or 2; see above for why not 2 through broker crashes.
        resend_window_s: decisions whose handshake completed this long before the broker was
            last heard, or since, are published again once a lost connection is back (0:
            never); see above.
        replay_s: on a connection to a broker that lost our session, outcomes (decisions
            and refusals) completed this long before are published again (0: never).
        remember_published: how many published event ids are remembered, so a redelivered
            event's decision is not published twice.

    """

    def __init__(
        self,
        *,
        url: str,
        agent_id: str,
        events_filter: str | None = None,
        max_payload_bytes: int = 65_536,
        queue_size: int = 256,
        reconnect_min_s: float = 0.1,
        reconnect_max_s: float = 5.0,
        keepalive: int = 10,
        wall_ns: Callable[[], int] = time.time_ns,
        security: MqttSecurity | None = None,
        session_expiry_s: int = 300,
        outbox_size: int = 1024,
        remember_published: int = MQTT_PUBLISHED_MAX_IDS,
        actions_qos: int = 1,
        resend_window_s: float = 0.5,
        replay_s: float = 10.0,
    ) -> None:
        self._host, self._port, self._tls = parse_broker_url(url)
        self.url = url
        self._security = security or MqttSecurity()
        if not agent_id or any(c in agent_id for c in "#+/"):
            raise ConfigError("agent_id", agent_id, "must be non-empty, without # + or /")
        _check_delivery(queue_size, actions_qos, resend_window_s, replay_s)
        if remember_published < 1:
            raise ConfigError("remember_published", remember_published, "must be at least 1")
        self.agent_id = agent_id
        self.topics = Topics(agent_id)
        self.events_filter = events_filter or self.topics.events_filter
        self.actions_topic = self.topics.actions
        self.errors_topic = self.topics.errors
        self.status_topic = self.topics.status
        self.replies_prefix = self.topics.replies_prefix
        self.probe_topic = self.topics.probe
        """Only ever unsubscribed from: the round trip that tells a silent broker is alive."""
        self._max_bytes = max_payload_bytes
        self._backoff = (reconnect_min_s, reconnect_max_s)
        self._keepalive = keepalive
        self._wall_ns = wall_ns
        self._pending: DropOldestQueue[Event] = DropOldestQueue(queue_size)
        self._client: aiomqtt.Client | None = None
        """One for the bus's life (made on first use): its session outlives connections."""
        self._paho: PahoSession | None = None
        """What aiomqtt does not offer (acks, packet ids, session present): _paho_session."""
        self._generation = 0
        """Moves on as each connection ends: a packet id is acknowledged only on the connection
        that brought it, and a publish completing after a move completed on a later one."""
        self._connected = asyncio.Event()
        self._expiry = session_expiry_s
        self._actions_qos = actions_qos
        self._outbox_size = outbox_size
        self._completions: dict[int, asyncio.Future[int]] = {}
        """Decisions waiting: packet id -> the reason code of the handshake that completes it
        (replies are not tracked: nothing waits on them, and they do not count against
        ``outbox_size``)."""
        self._resend_s = resend_window_s
        self._replay_s = replay_s
        self._recent: deque[_Outcome] = deque(maxlen=outbox_size)
        """The latest outcomes (decisions and refusals) whose handshake completed."""
        self._session_present = True
        """What the broker's last CONNACK said: False when it had lost our session."""
        self._published = IdWindow(max_ids=remember_published)  # by number only
        self._sending: set[str] = set()
        self._lost_at: float | None = None
        self._heard_at = 0.0
        self._quiet_from = 0.0
        """When the broker was last heard before the connection was lost."""
        self._unacked: dict[str, list[tuple[int, int]]] = {}
        self.stats = MqttStats()

    @classmethod
    def from_config(
        cls, config: MqttConfig, *, url: str | None = None, agent_id: str | None = None
    ) -> Self:
        """The bus that ``config`` describes (``url``, ``agent_id``: given instead of its own).

        Reads ``password_file`` now. Raises ConfigError when neither gives a URL.
        """
        url = url or config.url
        if url is None:
            raise ConfigError("mqtt.url", None, "give mqtt://host:port")
        return cls(
            url=url,
            agent_id=agent_id or config.agent_id,
            events_filter=config.events_filter,
            max_payload_bytes=config.max_payload_bytes,
            queue_size=config.queue_size,
            keepalive=config.keepalive,
            session_expiry_s=config.session_expiry_s,
            outbox_size=config.outbox_size,
            actions_qos=config.actions_qos,
            resend_window_s=config.resend_window_s,
            replay_s=config.replay_s,
            security=config.security(),
        )

    @property
    def connected(self) -> bool:
        """Whether the broker connection is up."""
        return self._connected.is_set()

    def bus_section(self) -> MqttBusSection:
        """The counters now, and whether the broker connection is up."""
        return MqttBusSection(**asdict(self.stats), connected=self.connected)

    async def wait_connected(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until subscribed on the broker."""
        async with asyncio.timeout(timeout):
            await self._connected.wait()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Nothing left to close: :meth:`run` said goodbye when it was cancelled."""

    async def run(self) -> None:
        """Keep the broker connection (reconnecting with backoff) until cancelled.

        The agent runs this in its TaskGroup. Cancelled, it publishes the retained
        ``offline`` status while still connected, then drops the connection (a connection
        that dies instead leaves the will to say it).
        """
        delay = self._backoff[0]
        client = self._session_client()
        while True:
            raise_lost_cancel()  # aiomqtt's waits can swallow one (Python 3.11)
            connects = self.stats.connects
            try:
                async with client:
                    await self._connection(client)
            except aiomqtt.MqttError as exc:
                if self._connected.is_set():
                    self.stats.outages += 1
                    self._lost_at = asyncio.get_running_loop().time()
                    self._quiet_from = self._heard_at
                reason = refusal(exc)
                if reason is not None:  # the same on every retry: say why and stop
                    raise ConfigError("mqtt", f"{self._host}:{self._port}", reason) from None
                # Before the first connection, the caller waits for it and says what failed
                # (``forethought run``: one error line after ``connect_timeout_s``).
                log.log(
                    logging.WARNING if self.stats.connects else logging.DEBUG,
                    "mqtt connection to %s:%s lost or refused: %s",
                    self._host,
                    self._port,
                    exc,
                )
            finally:
                self._connected.clear()
                # The next connection's generation starts when this one ends, not when the next
                # is served: paho sends the session's unfinished publishes on its CONNACK, and
                # their completions can come before the connect's await returns.
                self._generation += 1
                paho = self._paho_session()
                self.stats.stale_dropped += paho.drain()
                paho.read_disconnect()
            if self.stats.connects != connects:  # it was up: start the backoff again
                delay = self._backoff[0]
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    def _session_client(self) -> aiomqtt.Client:
        """The bus's one client, made on first use (it needs the running loop)."""
        if self._client is not None:
            return self._client
        session = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        session.SessionExpiryInterval = self._expiry
        client = aiomqtt.Client(
            self._host,
            self._port,
            identifier=f"forethought-{self.agent_id}",
            **self._security.client_options(self._tls),  # type: ignore[arg-type]
            protocol=aiomqtt.ProtocolVersion.V5,
            will=aiomqtt.Will(self.status_topic, b'{"online":false}', qos=1, retain=True),
            keepalive=self._keepalive,
            timeout=5.0,
            # Resume the session the broker kept: QoS 1 events sent while we were away are
            # waiting in it (a first connection simply starts one).
            clean_start=self._expiry == 0,
            properties=session,
            # Small messages on a deadline: Nagle plus delayed ACKs would add ~40 ms.
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        self._paho = PahoSession(client, on_completed=self._completed, on_connack=self._connack)
        self._client = client
        return client

    def _paho_session(self) -> PahoSession:
        """The paho side of the bus's one client (made with it)."""
        self._session_client()
        assert self._paho is not None
        return self._paho

    def _completed(self, mid: int, reason: int) -> None:
        """A publish's handshake completed (paho's thread-free callback, on the loop)."""
        done = self._completions.pop(mid, None)
        if done is not None and not done.done():
            done.set_result(reason)

    def _connack(self, session_present: bool) -> None:
        self._session_present = session_present

    async def _connection(self, client: aiomqtt.Client) -> None:
        """Serve one connection until it fails (it ends only by an exception)."""
        self._unacked.clear()  # unacknowledged there: the broker sends them again
        # A broker that does not answer within half a keepalive is taken for a silent one, as
        # the probe takes it (aiomqtt's own 5 s would hold a deaf connection that long).
        answer_s = min(5.0, self._keepalive / 2)
        await client.subscribe(self.events_filter, qos=1, timeout=answer_s)
        await client.publish(
            self.status_topic, b'{"online":true}', qos=1, retain=True, timeout=answer_s
        )
        self.stats.connects += 1
        if self._lost_at is not None:
            loop = asyncio.get_running_loop()
            self.stats.reconnect_s.append(loop.time() - self._lost_at)
            self._resend_recent(self._quiet_from, self._lost_at, loop.time())
            self._lost_at = None
        raise_lost_cancel()  # lost in the connect, subscribe or publish above: stop here
        self._connected.set()
        prober = asyncio.create_task(
            self._probe(client), name=f"forethought.mqtt[{self.agent_id}].probe"
        )
        try:
            async for message in client.messages:
                await self._receive(message)
        except asyncio.CancelledError:
            with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
                await client.publish(
                    self.status_topic,
                    b'{"online":false}',
                    qos=1,
                    retain=True,
                    timeout=1.0,
                )
            raise
        finally:
            prober.cancel()
            # Awaited, not abandoned; asyncio.wait, so a cancellation of this task stays ours.
            await asyncio.wait([prober])

    async def _probe(self, client: aiomqtt.Client) -> None:
        """Notice a broker that stopped answering, within 1.25 x keepalive.

        paho notices only after a ping goes unanswered for a whole keepalive (up to twice
        the keepalive from the last packet heard). Here, when nothing has been heard for half
        a keepalive, a round trip is asked for -- an UNSUBSCRIBE of a topic we never
        subscribed, which every broker acknowledges, which no ACL forbids and which nobody
        else sees -- and no answer within half a keepalive ends the connection, so the
        reconnect loop takes over.
        """
        loop = asyncio.get_running_loop()
        half = self._keepalive / 2
        self._heard_at = loop.time()
        while True:
            raise_lost_cancel()  # lost in the unsubscribe's wait: cancelled, it would loop on
            await asyncio.sleep(half / 2)
            if loop.time() - self._heard_at < half:
                continue
            try:
                await client.unsubscribe(self.probe_topic, timeout=half)
            except aiomqtt.MqttError:
                self.stats.outages += 1
                self.stats.unanswered_probes += 1
                self._lost_at = loop.time()
                self._quiet_from = self._heard_at
                self._connected.clear()
                log.warning("mqtt broker %s:%s stopped answering", self._host, self._port)
                # Not a polite DISCONNECT: a frozen broker would read it on waking as a
                # normal goodbye (and drop our will), and its answer would never come. Our
                # end of the socket closed, paho sees the connection lost, the message loop
                # ends, and the session resends what was in flight on the next one.
                sock = self._paho_session().socket()
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return
            self._heard_at = loop.time()

    async def _receive(self, message: aiomqtt.Message) -> None:
        self._heard_at = asyncio.get_running_loop().time()
        self.stats.received += 1
        raw = payload_bytes(message)
        try:
            payload = parse_payload(raw, max_bytes=self._max_bytes)
        except InvalidEvent as exc:
            self.stats.malformed += 1
            ident = raw_id(raw)
            self._report_soon(None, str(exc), raw, topic=message.topic.value, ident=ident)
            self._ack_now(message)
            return
        props = message.properties
        reply = None
        response_topic = getattr(props, "ResponseTopic", None) if props is not None else None
        if response_topic and not str(response_topic).startswith(self.replies_prefix):
            # Least privilege: the agent answers only under its own prefix, so an event
            # source cannot make it publish on another agent's topics.
            self.stats.replies_refused += 1
            log.warning(
                "response topic %r is outside %s#: answered on the actions topic only",
                str(response_topic)[:200],
                self.replies_prefix,
            )
        elif response_topic:
            corr = getattr(props, "CorrelationData", None)
            reply = ReplyTo(str(response_topic), bytes(corr) if corr is not None else None)
        # MQTT 5 §3.3.2.3.3: the broker lowers the interval by the time the message waited.
        expiry = getattr(props, "MessageExpiryInterval", None) if props is not None else None
        event = Event.from_payload(
            payload,
            arrival=Arrival.now(self._wall_ns),
            reply=reply,
            expiry_s=int(expiry) if expiry is not None else None,
        )
        if message.qos > 0:
            self._unacked.setdefault(event.id, []).append((self._generation, message.mid))
            # Never dropped: it stays unacknowledged until there is room, and the broker keeps
            # the rest of the backlog (an agent back from a restart meets all of it at once).
            # A stale one is refused as expired when its turn comes, which is reported.
            await self._pending.wait_for_room()
        dropped = self._pending.put(event)  # only a QoS 0 event pushes one out
        if dropped is not None:
            self.stats.dropped_full = self._pending.dropped  # the queue counts; stats mirror it
            self._report_soon(dropped, "queue full: dropped as the oldest waiting event", None)

    @property
    def waiting(self) -> DropOldestQueue[Event]:
        """The events waiting to be decided (the serve loop takes from it: :class:`QueuedBus`)."""
        return self._pending

    async def events(self) -> AsyncIterator[Event]:
        """Validated events, oldest first."""
        while True:
            yield await self._pending.get()

    async def publish(self, event: Event, decision: Decision) -> None:
        """Hand the decision to the session at ``actions_qos`` and wait for its handshake.

        Also to the event's response topic, if any, at QoS 1. Connected or not, the session
        keeps it, and sends it (again) on every connection until the broker has it; a
        redelivered event's decision is not handed over a second time. Returns once the
        broker has it (the event is acknowledged then), or has refused it (reported).

        The serve loop checked the deadline just before this call, and nothing here awaits
        before the session has the message: a decision past its deadline never gets here.
        One held through an outage goes out when the connection is back, carrying its
        ``deadline_ns`` for the actuator to drop if it came too late.
        """
        body = orjson.dumps(decision.payload())
        if event.id in self._published or event.id in self._sending:
            # Actuated once already, or on its way (its completion acknowledges this copy
            # too). A requester asking again on its response topic still gets the answer (a
            # reply is not an actuation).
            self.stats.repeats_suppressed += 1
            if event.reply is not None and self.connected:
                self._reply(event, body)
            if event.id in self._published:
                self._ack(event.id)
            return
        if len(self._completions) >= self._outbox_size:
            self.stats.outbox_dropped += 1
            log.warning(
                "%d decisions wait for the broker: %s left to come again",
                len(self._completions),
                event.id,
            )
            return
        # Claimed before the first await: a second copy of the event (a sensor re-sending what
        # it thought lost) decided meanwhile must not be handed over while this one waits.
        self._sending.add(event.id)
        generation, connected = self._generation, self.connected
        if not connected:
            self.stats.held += 1
        try:
            done = self._hand_over(self.actions_topic, body, self._actions_qos)
            if event.reply is not None:
                self._reply(event, body)
            reason = await done
        except aiomqtt.MqttError as exc:  # the session refused it (paho's own limits)
            self.stats.publish_failures += 1
            await self._report(event, f"not published: {exc}", None)
            self._ack(event.id)
            return
        finally:
            self._sending.discard(event.id)
        if reason >= 0x80 and reason != _HANDSHAKE_FORGOTTEN:
            self.stats.refused += 1
            await self._report(event, f"the broker refused the decision (reason {reason:#x})", None)
            self._ack(event.id)
            return
        self.stats.published += 1
        now = asyncio.get_running_loop().time()
        outcome = _Outcome(now, self.actions_topic, body, self._actions_qos, event.deadline)
        if not connected or generation != self._generation:
            self.stats.republished += 1
            if self._actions_qos == 2 and self._resend_s > 0:
                # A PUBREL sent again to a restarted broker is answered "complete" whether
                # or not it still knew the decision (Mosquitto 2.0): it may never have gone on.
                self._resend(outcome)
        self._recent.append(outcome)
        self._heard_at = now  # its handshake came
        self._published.add(event.id, now=now)
        self._ack(event.id)

    def _resend_recent(self, quiet_from: float, lost_at: float, now: float) -> None:
        """Publish again what completed from a window before the broker went quiet on.

        From the last time it was heard, not from the loss: a broker that froze (and was then
        killed, as a watchdog would) went quiet seconds before the loss was noticed. Not
        those completed since the loss: their handshake was with the broker as it is now.
        A broker that lost our session lost all it held: then everything from ``replay_s``
        before now that an actuator would still act on.
        """
        for outcome in self._recent:
            in_window = self._resend_s > 0 and (
                quiet_from - self._resend_s <= outcome.done_at <= lost_at
            )
            replayed = (
                not self._session_present
                and self._replay_s > 0
                and now - self._replay_s <= outcome.done_at <= lost_at
                and (outcome.stale_at is None or outcome.stale_at > now)
            )
            if in_window or replayed:
                self._resend(outcome)

    def _resend(self, outcome: _Outcome) -> None:
        """An outcome again, as a new message (the same bytes); nothing waits for it."""
        with contextlib.suppress(aiomqtt.MqttError):  # paho's own limits: it was sent once
            self._queue(outcome.topic, outcome.body, outcome.qos, None)
            self.stats.resent += 1

    def _hand_over(self, topic: str, body: bytes, qos: int) -> asyncio.Future[int]:
        """Queue a decision in the session; a future of its handshake's reason code."""
        mid = self._queue(topic, body, qos, None)
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._completions[mid] = done  # QoS > 0: never complete before a handshake
        return done

    def _reply(self, event: Event, body: bytes) -> None:
        """Queue the answer on the event's response topic (QoS 1, with its correlation)."""
        assert event.reply is not None
        props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        if event.reply.correlation is not None:
            props.CorrelationData = event.reply.correlation
        self._queue(event.reply.topic, body, 1, props)

    def _queue(self, topic: str, body: bytes, qos: int, properties: Properties | None) -> int:
        """Put a message in the session; its packet id.

        Connected or not: paho keeps a QoS 1 or 2 message until its handshake completes and
        sends it on every connection until then (``MQTT_ERR_NO_CONN`` means just that here).
        """
        return self._paho_session().publish(topic, body, qos, properties)

    async def publish_status(self, report: HealthReport) -> None:
        """Replace the retained status with ``report`` (skipped while disconnected)."""
        client = self._client
        if client is None or not self.connected:
            return
        body = orjson.dumps(report.model_dump(mode="json"))
        try:
            await client.publish(self.status_topic, body, qos=1, retain=True, timeout=2.0)
        except (aiomqtt.MqttError, TimeoutError) as exc:
            log.warning("refreshing the status failed: %s", exc)

    async def reject(self, event: Event | None, reason: str, raw: bytes | None = None) -> None:
        """Report an event that will not be decided on the errors topic.

        Through the session at QoS 1, as a decision: returns once the broker has the refusal
        (after an outage, once it is back), and only then acknowledges the event.
        """
        if reason.startswith("expired"):
            self.stats.expired += 1
        await self._report(event, reason, raw)
        if event is not None:
            self._ack(event.id)

    async def warn(self, event: Event, reason: str) -> None:
        """Report ``reason`` about a decided event on the errors topic, as a warning."""
        self.stats.warnings += 1
        client = self._client
        if client is None or not self.connected:
            return
        body = orjson.dumps({"warning": reason[:500], "id": event.id})
        with contextlib.suppress(aiomqtt.MqttError):
            await client.publish(self.errors_topic, body, qos=1)

    def _ack(self, event_id: str) -> None:
        """Acknowledge the event's messages now that its outcome is out.

        Only on the connection that brought them: after a reconnection the broker sends
        them again (the session is persistent), and the copy is acknowledged then.
        """
        for generation, mid in self._unacked.pop(event_id, ()):
            if generation == self._generation and self._paho is not None and self.connected:
                self._paho.ack(mid)

    def _ack_now(self, message: aiomqtt.Message) -> None:
        if message.qos > 0 and self._paho is not None and self.connected:
            self._paho.ack(message.mid)

    def _report_soon(
        self,
        event: Event | None,
        reason: str,
        raw: bytes | None,
        topic: str | None = None,
        ident: str | None = None,
    ) -> None:
        """Hand a report to the session without waiting for its handshake.

        For the message loop: waiting there for a handshake that a lost connection defers to
        the next one would hold the loop, and so the reconnection, forever.
        """
        data = _error_body(event, reason, raw, topic, ident)
        try:
            self._queue(self.errors_topic, data, 1, None)
        except aiomqtt.MqttError as exc:  # paho's own limits
            log.warning("a refusal was not handed to the session: %s", exc)

    async def _report(
        self,
        event: Event | None,
        reason: str,
        raw: bytes | None,
        topic: str | None = None,
        ident: str | None = None,
    ) -> None:
        data = _error_body(event, reason, raw, topic, ident)
        # Through the session, as a decision: connected or not, it goes out once the broker
        # has it (a refusal made during an outage waits for the next connection).
        try:
            code = await self._hand_over(self.errors_topic, data, 1)
        except aiomqtt.MqttError as exc:  # paho's own limits
            log.warning("a refusal was not handed to the session: %s", exc)
            return
        if code >= 0x80 and code != _HANDSHAKE_FORGOTTEN:
            log.warning("the broker refused a refusal (reason %#x)", code)
            return
        now = asyncio.get_running_loop().time()
        self._recent.append(_Outcome(now, self.errors_topic, data, 1, None))


def _error_body(
    event: Event | None, reason: str, raw: bytes | None, topic: str | None, ident: str | None
) -> bytes:
    """The errors topic's message: why, and which event (or payload) it is about."""
    body: dict[str, Any] = {"error": reason}
    if event is not None:
        body["id"] = event.id
    elif ident is not None:  # a refused payload's own id: its sender waits for it
        body["id"] = ident
    if raw is not None:
        body["payload"] = raw[:200].decode("utf-8", "replace")
    if topic is not None:
        body["topic"] = topic
    return orjson.dumps(body)
