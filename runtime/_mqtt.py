"""MqttBus: events from an MQTT broker, decisions back to it (aiomqtt 2.x, MQTT 5).

Topics under ``forethought/<agent_id>/``: events arrive on ``events/#`` (configurable), each
decision goes to ``actions`` at QoS 1 (and to the event's MQTT 5 response topic with its
correlation data, when it carries one), malformed payloads are reported on ``errors``, and a
retained ``status`` says ``{"online": true}`` on connecting, then carries the agent's
:class:`HealthReport` (refreshed every ``health.interval_s``); the will publishes
``{"online": false}`` if the connection dies.

The connection is kept by one task: on loss it reconnects with exponential backoff and
resubscribes, counting outages. Incoming events wait in a bounded queue; when it is full the
oldest is dropped (a stale event is worth least) and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
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
        self._max_bytes = max_payload_bytes
        self._queue_size = queue_size
        self._backoff = (reconnect_min_s, reconnect_max_s)
        self._keepalive = keepalive
        self._wall_ns = wall_ns
        self._pending: deque[Event] = deque()
        self._arrived = asyncio.Event()
        self._client: aiomqtt.Client | None = None
        self._connected = asyncio.Event()
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
                    # Small messages on a deadline: Nagle plus delayed ACKs would add ~40 ms.
                    socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                ) as client:
                    self._client = client
                    await client.subscribe(self.events_filter, qos=1)
                    await client.publish(self.status_topic, b'{"online":true}', qos=1, retain=True)
                    self.stats.connects += 1
                    self._connected.set()
                    delay = self._backoff[0]
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
            except aiomqtt.MqttError as exc:
                if self._connected.is_set():
                    self.stats.outages += 1
                reason = refusal(exc)
                if reason is not None:  # the same on every retry: say why and stop
                    raise ConfigError("mqtt", f"{self._host}:{self._port}", reason) from None
                log.warning(
                    "mqtt connection to %s:%s lost or refused: %s", self._host, self._port, exc
                )
            finally:
                self._connected.clear()
                self._client = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    async def _receive(self, message: aiomqtt.Message) -> None:
        self.stats.received += 1
        raw = payload_bytes(message)
        try:
            payload = parse_payload(raw, max_bytes=self._max_bytes)
        except InvalidEvent as exc:
            self.stats.malformed += 1
            await self._report(None, str(exc), raw, topic=message.topic.value)
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
        if len(self._pending) >= self._queue_size:
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
            yield self._pending.popleft()

    async def publish(self, event: Event, decision: Decision) -> None:
        """Publish the decision at QoS 1 (and to the event's response topic, if any)."""
        body = orjson.dumps(decision.payload())
        client = await self._client_or_none()
        if client is None:
            self.stats.publish_failures += 1
            return
        try:
            await client.publish(self.actions_topic, body, qos=1)
            if event.reply is not None:
                props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
                if event.reply.correlation is not None:
                    props.CorrelationData = event.reply.correlation
                await client.publish(event.reply.topic, body, qos=1, properties=props)
            self.stats.published += 1
        except aiomqtt.MqttError as exc:
            self.stats.publish_failures += 1
            log.warning("publishing the decision for %s failed: %s", event.id, exc)

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

    async def _client_or_none(self) -> aiomqtt.Client | None:
        if not self._connected.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._connected.wait()
        return self._client
