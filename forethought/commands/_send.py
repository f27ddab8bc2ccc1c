"""``forethought send``: a test client that sends one event and prints the agent's decision."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from typing import Any

import aiomqtt
import orjson
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from forethought.policies import ConfigError, ForethoughtError, NoDecision
from forethought.runtime import (
    MqttSecurity,
    Topics,
    ZenohSecurity,
    expiry_properties,
    stamp_event,
    zenoh_config,
)
from forethought.runtime.internals import parse_broker_url, payload_bytes

__all__ = ["Refused", "send_event", "send_event_zenoh"]


class Refused(ForethoughtError):
    """The agent refused the event (on its errors topic): the reason, as the agent gave it."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason


async def send_event(
    *,
    mqtt: str,
    agent_id: str,
    event_type: str,
    params: dict[str, Any],
    deadline_ms: float | None,
    wait_s: float,
    security: MqttSecurity | None = None,
) -> dict[str, Any]:
    """Publish one event with a response topic and return the decision payload.

    The event says when it was sent (``sent_at_ns``) and expires at the broker with its
    deadline. The agent's errors topic is watched too: a refusal of this event raises
    :class:`Refused` as soon as it comes (a warning beside the decision goes in ``warning``).
    """
    host, port, tls = parse_broker_url(mqtt)
    options = (security or MqttSecurity()).client_options(tls)
    event_id = f"send-{uuid.uuid4().hex[:12]}"
    topics = Topics(agent_id)
    reply_topic = topics.reply(event_id)
    errors_topic = topics.errors
    body: dict[str, Any] = {"id": event_id, "type": event_type, "params": params}
    if deadline_ms is not None:
        body["deadline_ms"] = deadline_ms
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    props.ResponseTopic = reply_topic
    props.CorrelationData = event_id.encode()
    # A bad deadline (0, negative) gets no expiry: the agent's refusal says what is wrong.
    expiring = deadline_ms if deadline_ms is not None and deadline_ms > 0 else None
    async with aiomqtt.Client(
        host,
        port,
        protocol=aiomqtt.ProtocolVersion.V5,
        identifier=f"forethought-send-{event_id}",
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        **options,  # type: ignore[arg-type]
    ) as client:
        await client.subscribe(reply_topic, qos=1)
        await client.subscribe(errors_topic, qos=1)
        t0 = time.perf_counter()
        await client.publish(
            topics.event(event_type),
            orjson.dumps(stamp_event(body)),
            qos=1,
            properties=expiry_properties(expiring, props),
        )
        try:
            async with asyncio.timeout(wait_s):
                return await _answer(client, event_id, errors_topic, t0)
        except TimeoutError:
            raise NoDecision(event_id, wait_s, f"is agent {agent_id!r} running?") from None


async def _answer(
    client: aiomqtt.Client, event_id: str, errors_topic: str, t0: float
) -> dict[str, Any]:
    """The decision for ``event_id``, or :class:`Refused` at the first refusal of it."""
    reply: dict[str, Any] | None = None
    warning: str | None = None
    messages = aiter(client.messages)
    while reply is None or (reply.get("out_of_space") and warning is None):
        try:
            if reply is None:
                message = await anext(messages)
            else:  # out of the event space: its warning follows the decision at once
                async with asyncio.timeout(0.5):
                    message = await anext(messages)
        except (TimeoutError, StopAsyncIteration):
            break
        body = orjson.loads(payload_bytes(message))
        if not message.topic.matches(errors_topic):
            reply = body
            reply["round_trip_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        elif isinstance(body, dict) and body.get("id") == event_id:  # not another sender's
            if "error" in body:
                raise Refused(str(body["error"]))
            warning = str(body.get("warning"))
    if reply is None:
        raise NoDecision(event_id, 0, "the connection closed before a decision came")
    if warning is not None:
        reply["warning"] = warning
    return reply


def _get_decision(
    connect: list[str], key: str, body: bytes, wait_s: float, security: ZenohSecurity | None
) -> dict[str, Any]:
    import zenoh  # noqa: PLC0415 - forethought[zenoh]

    sec = security or ZenohSecurity()
    try:
        session = zenoh.open(zenoh_config(connect=connect, security=sec))
    except zenoh.ZError as exc:
        why = sec.explain(connect, str(exc).split(" at /", 1)[0])
        raise ConfigError("--zenoh", connect, f"cannot open a session: {why}") from None
    with session:
        t0 = time.perf_counter()
        for reply in session.get(key, payload=body, timeout=wait_s):
            if reply.ok is not None:
                out: dict[str, Any] = orjson.loads(reply.ok.payload.to_bytes())
            elif reply.err is not None:
                out = {"error": orjson.loads(reply.err.payload.to_bytes())}
            else:
                continue
            out["round_trip_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            return out
    raise NoDecision(key, wait_s, "no agent answered the decide query")


async def send_event_zenoh(
    *,
    connect: list[str],
    agent_id: str,
    event_type: str,
    params: dict[str, Any],
    deadline_ms: float | None,
    wait_s: float,
    security: ZenohSecurity | None = None,
) -> dict[str, Any]:
    """Ask the agent's ``decide`` queryable for one decision and return it."""
    event_id = f"send-{uuid.uuid4().hex[:12]}"
    body: dict[str, Any] = {"id": event_id, "type": event_type, "params": params}
    if deadline_ms is not None:
        body["deadline_ms"] = deadline_ms
    key = Topics(agent_id).decide
    return await asyncio.to_thread(
        _get_decision, connect, key, orjson.dumps(stamp_event(body)), wait_s, security
    )
