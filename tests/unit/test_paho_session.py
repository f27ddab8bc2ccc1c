"""The paho adapter of the MQTT bus, checked against the installed aiomqtt.

Each test is one assumption ``runtime/transports/_paho_session.py`` makes of aiomqtt's
internals (no broker needed): an aiomqtt upgrade that breaks one fails here, by name. The
round trips through a real Mosquitto are in tests/integration/test_mqtt.py.
"""

from __future__ import annotations

import asyncio

import aiomqtt
import paho.mqtt.client as paho_client
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from forethought.runtime.transports._paho_session import PahoSession, read_disconnect


def _session() -> tuple[aiomqtt.Client, PahoSession, list[tuple[int, int]], list[bool]]:
    client = aiomqtt.Client("127.0.0.1", 1, protocol=aiomqtt.ProtocolVersion.V5)
    completed: list[tuple[int, int]] = []
    connacks: list[bool] = []
    session = PahoSession(
        client,
        on_completed=lambda mid, reason: completed.append((mid, reason)),
        on_connack=connacks.append,
    )
    return client, session, completed, connacks


async def test_aiomqtt_drives_a_paho_client_with_manual_acks_on() -> None:
    client, _, _, _ = _session()
    assert isinstance(client._client, paho_client.Client)
    assert client._client._manual_ack is True  # paho's flag, set by manual_ack_set(True)


async def test_a_completed_publish_reaches_aiomqtt_and_the_bus() -> None:
    client, _, completed, _ = _session()
    waiting = asyncio.Event()
    client._pending_publishes[7] = waiting  # what aiomqtt's own publish() waits on
    fail = ReasonCode(PacketTypes.PUBACK, identifier=0x87)  # not authorised
    client._client.on_publish(client._client, None, 7, fail, None)
    assert waiting.is_set()
    assert completed == [(7, 0x87)]


async def test_a_connack_says_whether_the_session_was_present_and_connects_aiomqtt() -> None:
    client, _, _, connacks = _session()
    accepted = ReasonCode(PacketTypes.CONNACK, identifier=0)
    flags = paho_client.ConnectFlags(session_present=False)
    client._client.on_connect(client._client, None, flags, accepted, None)
    assert connacks == [False]
    assert client._connected.done()  # aiomqtt's own handler ran too
    assert client._connected.exception() is None


async def test_publishing_while_disconnected_queues_it_in_the_session() -> None:
    _, session, _, _ = _session()
    first = session.publish("t", b"x", 1, None)
    second = session.publish("t", b"y", 1, None)
    assert second == first + 1  # packet ids: the session keeps both for the next connection


async def test_drain_empties_aiomqtt_s_message_queue() -> None:
    client, session, _, _ = _session()
    assert isinstance(client._queue, asyncio.Queue)
    for i in range(3):
        client._queue.put_nowait(aiomqtt.Message("t", b"", 1, False, i, None))
    assert session.drain() == 3
    assert client._queue.empty()


async def test_read_disconnect_retrieves_the_last_connection_s_end() -> None:
    client, _, _, _ = _session()
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ended.set_exception(aiomqtt.MqttError("gone"))
    client._disconnected = ended
    read_disconnect(client)
    assert ended._log_traceback is False  # type: ignore[attr-defined]  # marked as read
