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

Nothing accepted is lost to an outage, and nothing is actuated twice because of one -- save
where QoS 1 cannot tell: a decision whose PUBACK a dying or frozen broker never sent may have
reached it, and goes out again on reconnection (every action carries its event id: actuators
dedupe by it; the reliability bench counts these):

* the session is persistent (``clean_start`` off, ``session_expiry_s``), so QoS 1 events that
  arrive while the agent is reconnecting wait for it at the broker;
* a decision that cannot be published (no connection, or no PUBACK) waits in a bounded outbox
  and goes out, in order, as soon as the connection is back;
* a redelivered event (the same id) is decided once -- the executor remembers ids -- and its
  decision is not published again: the ids whose decisions went out are remembered too;
* an event is acknowledged to the broker (QoS 1 PUBACK) only once its outcome is out -- its
  decision published, or its refusal reported -- so an agent killed before that gets it again
  from the broker when it comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Self

import aiomqtt
import orjson
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from forethought.policies import ConfigError, InvalidEvent

from ._decision import Decision
from ._event import Arrival, Event, ReplyTo, parse_payload
from ._health import HealthReport
from ._mqtt_security import MqttSecurity, parse_broker_url, refusal

__all__ = ["MqttBus", "MqttStats", "parse_mqtt_url", "payload_bytes"]

log = logging.getLogger("forethought.mqtt")


def parse_mqtt_url(url: str) -> tuple[str, int]:
    """``mqtt://host:port`` or ``mqtts://host:port`` -> (host, port); 1883 / 8883 by default."""
    host, port, _ = parse_broker_url(url)
    return host, port


def _paho(client: aiomqtt.Client) -> Any:
    """The paho client inside an aiomqtt one (aiomqtt 2 does not expose manual acks)."""
    return client._client  # aiomqtt is pinned to 2.x; the R3 tests exercise the acks


def payload_bytes(message: aiomqtt.Message) -> bytes:
    """A message's payload as bytes (aiomqtt types it as bytes, str, numbers or None)."""
    raw = message.payload
    return raw if isinstance(raw, bytes) else str(raw).encode()


@dataclass(slots=True)
class MqttStats:
    """Counters of one bus."""

    received: int = 0
    malformed: int = 0
    dropped_full: int = 0
    expired: int = 0
    published: int = 0
    publish_failures: int = 0
    outages: int = 0
    connects: int = 0
    replies_refused: int = 0
    """Response topics outside ``forethought/<agent>/replies/`` (not published to)."""
    held: int = 0
    """Decisions put in the outbox because they could not be published at once."""
    republished: int = 0
    """Outbox decisions published after the connection came back."""
    outbox_dropped: int = 0
    """Decisions dropped because the outbox was full (the oldest go first)."""
    repeats_suppressed: int = 0
    """Decisions not published again for a redelivered event id."""
    unanswered_probes: int = 0
    """Connections ended because the broker did not answer a probe (frozen, or a dead link)."""
    reconnect_s: list[float] = field(default_factory=list)
    """Per outage: from losing the connection to being subscribed again."""


class MqttBus:
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
        outbox_size: the most decisions held for publishing after an outage.
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
        remember_published: int = 65_536,
    ) -> None:
        self._host, self._port, self._tls = parse_broker_url(url)
        self._security = security or MqttSecurity()
        if not agent_id or any(c in agent_id for c in "#+/"):
            raise ConfigError("agent_id", agent_id, "must be non-empty, without # + or /")
        if queue_size < 1:
            raise ConfigError("queue_size", queue_size, "must be at least 1")
        base = f"forethought/{agent_id}"
        self.agent_id = agent_id
        self.events_filter = events_filter or f"{base}/events/#"
        self.actions_topic = f"{base}/actions"
        self.errors_topic = f"{base}/errors"
        self.status_topic = f"{base}/status"
        self.replies_prefix = f"{base}/replies/"
        self.probe_topic = f"{base}/probe"
        """Only ever unsubscribed from: the round trip that tells a silent broker is alive."""
        self._max_bytes = max_payload_bytes
        self._queue_size = queue_size
        self._backoff = (reconnect_min_s, reconnect_max_s)
        self._keepalive = keepalive
        self._wall_ns = wall_ns
        self._pending: deque[Event] = deque()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._client: aiomqtt.Client | None = None
        self._connected = asyncio.Event()
        self._expiry = session_expiry_s
        self._outbox: deque[tuple[Event, bytes]] = deque()
        self._outbox_size = outbox_size
        self._published: OrderedDict[str, None] = OrderedDict()
        self._remember = remember_published
        self._lost_at: float | None = None
        self._heard_at = 0.0
        self._unacked: dict[str, list[tuple[aiomqtt.Client, int]]] = {}
        self.stats = MqttStats()

    @property
    def connected(self) -> bool:
        """Whether the broker connection is up."""
        return self._connected.is_set()

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
        options = self._security.client_options(self._tls)  # reads the TLS files, once
        while True:
            will = aiomqtt.Will(self.status_topic, b'{"online":false}', qos=1, retain=True)
            session = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            session.SessionExpiryInterval = self._expiry
            connects = self.stats.connects
            try:
                async with aiomqtt.Client(
                    self._host,
                    self._port,
                    identifier=f"forethought-{self.agent_id}",
                    **options,  # type: ignore[arg-type]
                    protocol=aiomqtt.ProtocolVersion.V5,
                    will=will,
                    keepalive=self._keepalive,
                    timeout=5.0,
                    # Resume the session the broker kept: QoS 1 events sent while we were
                    # away are waiting in it (a first connection simply starts one).
                    clean_start=self._expiry == 0,
                    properties=session,
                    # Small messages on a deadline: Nagle plus delayed ACKs would add ~40 ms.
                    socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                ) as client:
                    await self._connection(client)
            except aiomqtt.MqttError as exc:
                if self._connected.is_set():
                    self.stats.outages += 1
                    self._lost_at = asyncio.get_running_loop().time()
                reason = refusal(exc)
                if reason is not None:  # the same on every retry: say why and stop
                    raise ConfigError("mqtt", f"{self._host}:{self._port}", reason) from None
                log.warning(
                    "mqtt connection to %s:%s lost or refused: %s", self._host, self._port, exc
                )
            finally:
                self._connected.clear()
                self._client = None
            if self.stats.connects != connects:  # it was up: start the backoff again
                delay = self._backoff[0]
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    async def _connection(self, client: aiomqtt.Client) -> None:
        """Serve one connection until it fails (it ends only by an exception)."""
        self._client = client
        self._unacked.clear()  # unacknowledged there: the broker sends them again
        _paho(client).manual_ack_set(True)
        await client.subscribe(self.events_filter, qos=1)
        await client.publish(self.status_topic, b'{"online":true}', qos=1, retain=True)
        self.stats.connects += 1
        if self._lost_at is not None:
            loop = asyncio.get_running_loop()
            self.stats.reconnect_s.append(loop.time() - self._lost_at)
            self._lost_at = None
        self._connected.set()
        await self._flush_outbox(client)
        watch = asyncio.timeout(None)
        prober = asyncio.create_task(
            self._probe(client, watch), name=f"forethought.mqtt[{self.agent_id}].probe"
        )
        try:
            async with watch:
                async for message in client.messages:
                    await self._receive(message)
        except TimeoutError:
            raise aiomqtt.MqttError("the broker stopped answering") from None
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

    async def _probe(self, client: aiomqtt.Client, watch: asyncio.Timeout) -> None:
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
            await asyncio.sleep(half / 2)
            if loop.time() - self._heard_at < half:
                continue
            try:
                await client.unsubscribe(self.probe_topic, timeout=half)
            except aiomqtt.MqttError:
                self.stats.outages += 1
                self.stats.unanswered_probes += 1
                self._lost_at = loop.time()
                self._connected.clear()
                log.warning("mqtt broker %s:%s stopped answering", self._host, self._port)
                watch.reschedule(loop.time())  # ends the message loop: reconnect
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
            await self._report(None, str(exc), raw, topic=message.topic.value)
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
        event = Event.from_payload(payload, arrival=Arrival.now(self._wall_ns), reply=reply)
        if message.qos > 0 and self._client is not None:
            self._unacked.setdefault(event.id, []).append((self._client, message.mid))
        if message.qos > 0:
            # Never dropped: it stays unacknowledged until there is room, and the broker keeps
            # the rest of the backlog (an agent back from a restart meets all of it at once).
            # A stale one is refused as expired when its turn comes, which is reported.
            while len(self._pending) >= self._queue_size:
                self._room.clear()
                await self._room.wait()
        elif len(self._pending) >= self._queue_size:
            dropped = self._pending.popleft()
            self.stats.dropped_full += 1
            await self._report(dropped, "queue full: dropped as the oldest waiting event", None)
        self._pending.append(event)
        self._arrived.set()

    async def events(self) -> AsyncIterator[Event]:
        """Validated events, oldest first."""
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            self._room.set()
            yield self._pending.popleft()

    async def publish(self, event: Event, decision: Decision) -> None:
        """Publish the decision at QoS 1 (and to the event's response topic, if any).

        Without a connection, or without the broker's PUBACK, it waits in the outbox for the
        next connection; a redelivered event's decision is not published on the actions topic
        a second time.
        """
        body = orjson.dumps(decision.payload())
        client = self._client
        if event.id in self._published:
            # Actuated once already. A requester asking again on its response topic still
            # gets the answer (a reply is not an actuation).
            self.stats.repeats_suppressed += 1
            if client is not None and event.reply is not None:
                await self._send(client, event, body, actuate=False)
            self._ack(event.id)
            return
        # Claimed before the first await: a second copy of the event (a sensor re-sending what
        # it thought lost) decided meanwhile must not be sent while this one is in flight.
        self._remember_published(event.id)
        if client is None or self._outbox or not await self._send(client, event, body):
            self._published.pop(event.id, None)
            self._hold(event, body)  # behind what already waits: decisions keep their order
            return
        self._ack(event.id)

    async def _send(
        self, client: aiomqtt.Client, event: Event, body: bytes, *, actuate: bool = True
    ) -> bool:
        try:
            if actuate:
                await client.publish(self.actions_topic, body, qos=1)
            if event.reply is not None:
                props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
                if event.reply.correlation is not None:
                    props.CorrelationData = event.reply.correlation
                await client.publish(event.reply.topic, body, qos=1, properties=props)
        except aiomqtt.MqttError as exc:
            self.stats.publish_failures += 1
            log.warning("publishing the decision for %s failed (held): %s", event.id, exc)
            return False
        self.stats.published += 1
        self._heard_at = asyncio.get_running_loop().time()  # its PUBACK came
        self._remember_published(event.id)
        return True

    def _remember_published(self, event_id: str) -> None:
        self._published[event_id] = None
        if len(self._published) > self._remember:
            self._published.popitem(last=False)

    def _hold(self, event: Event, body: bytes) -> None:
        if len(self._outbox) >= self._outbox_size:
            self._outbox.popleft()
            self.stats.outbox_dropped += 1
        self._outbox.append((event, body))
        self.stats.held += 1

    async def _flush_outbox(self, client: aiomqtt.Client) -> None:
        """Publish held decisions, oldest first, until done or the connection fails again."""
        while self._outbox:
            event, body = self._outbox[0]
            if event.id not in self._published and not await self._send(client, event, body):
                return
            self._outbox.popleft()
            self.stats.republished += 1

    async def publish_status(self, report: HealthReport) -> None:
        """Replace the retained status with ``report`` (skipped while disconnected)."""
        client = self._client
        if client is None:
            return
        body = orjson.dumps(report.model_dump(mode="json"))
        try:
            await client.publish(self.status_topic, body, qos=1, retain=True, timeout=2.0)
        except (aiomqtt.MqttError, TimeoutError) as exc:
            log.warning("refreshing the status failed: %s", exc)

    async def reject(self, event: Event | None, reason: str, raw: bytes | None = None) -> None:
        """Report an event that will not be decided on the errors topic."""
        if reason.startswith("expired"):
            self.stats.expired += 1
        await self._report(event, reason, raw)
        if event is not None:
            self._ack(event.id)

    def _ack(self, event_id: str) -> None:
        """Acknowledge the event's messages now that its outcome is out.

        Only on the connection that brought them: after a reconnection the broker sends
        them again (the session is persistent), and the copy is acknowledged then.
        """
        for client, mid in self._unacked.pop(event_id, ()):
            if client is self._client:
                _paho(client).ack(mid, 1)

    def _ack_now(self, message: aiomqtt.Message) -> None:
        if message.qos > 0 and self._client is not None:
            _paho(self._client).ack(message.mid, 1)

    async def _report(
        self, event: Event | None, reason: str, raw: bytes | None, topic: str | None = None
    ) -> None:
        body: dict[str, Any] = {"error": reason}
        if event is not None:
            body["id"] = event.id
        if raw is not None:
            body["payload"] = raw[:200].decode("utf-8", "replace")
        if topic is not None:
            body["topic"] = topic
        client = self._client
        if client is None:
            return
        with contextlib.suppress(aiomqtt.MqttError):
            await client.publish(self.errors_topic, orjson.dumps(body), qos=1)
