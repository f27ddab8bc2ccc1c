"""The one place the MQTT bus reaches under aiomqtt, into the paho client it wraps.

aiomqtt 2's public API connects, subscribes, publishes and iterates messages; it offers
neither a manual acknowledgement of a QoS 1 message (the bus acknowledges an event only once
its outcome is out, so an agent killed before that gets it again), nor the packet id of a
publish (a decision's handshake is matched by it, and the session resends it on the next
connection by itself), nor the CONNACK's session-present flag (a broker that lost our
session has lost what it held for us). So :class:`~forethought.runtime.MqttBus` keeps its
connection with aiomqtt and, through this module only, uses paho for those three.

Each reach-in is named here with what it assumes of aiomqtt (pinned ``>=2.3,<3``):

* ``Client._client``: the ``paho.mqtt.client.Client`` it drives, with paho's v2 callback
  signatures for ``on_publish`` and ``on_connect`` (which aiomqtt sets and we wrap, calling
  aiomqtt's own first or last, so its ``publish()`` and connect still work);
* ``Client._queue``: the ``asyncio.Queue`` of received messages (messages a dead connection
  left there name packet ids of that connection, and are dropped);
* ``Client._disconnected``: the future of how the last connection ended.

``tests/unit/test_paho_session.py`` checks every assumption against the installed aiomqtt
(and the round trips on a real Mosquitto in ``tests/integration/test_mqtt.py``), so an
upgrade that breaks one fails a test, not an agent.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import aiomqtt
from paho.mqtt.client import MQTT_ERR_NO_CONN, MQTT_ERR_SUCCESS
from paho.mqtt.properties import Properties

__all__ = ["PahoSession", "read_disconnect"]


class PahoSession:
    """What the MQTT bus needs of the paho client inside one aiomqtt client.

    Made once per aiomqtt client, before its first connection: it switches paho to manual
    acknowledgements and wraps its publish-completion and CONNACK callbacks.

    Args:
        client: the aiomqtt client (not yet connected).
        on_completed: called with a publish's packet id and its handshake's reason code
            (0 success; >= 0x80 a failure) when the handshake completes.
        on_connack: called with the CONNACK's session-present flag.

    """

    def __init__(
        self,
        client: aiomqtt.Client,
        *,
        on_completed: Callable[[int, int], None],
        on_connack: Callable[[bool], None],
    ) -> None:
        self._client = client
        # Any: paho types its callbacks as a union over its two callback API versions.
        paho: Any = client._client  # see the module docstring
        paho.manual_ack_set(True)
        theirs = paho.on_publish

        def completed(c: Any, userdata: Any, mid: int, reason: Any, props: Any) -> None:
            theirs(c, userdata, mid, reason, props)  # aiomqtt's own publish() waits on it
            on_completed(mid, int(getattr(reason, "value", 0)))

        paho.on_publish = completed
        their_connect = paho.on_connect

        def connected(c: Any, userdata: Any, flags: Any, reason: Any, props: Any = None) -> None:
            on_connack(bool(getattr(flags, "session_present", True)))
            their_connect(c, userdata, flags, reason, props)

        paho.on_connect = connected
        self._paho = paho

    def publish(self, topic: str, body: bytes, qos: int, properties: Properties | None) -> int:
        """Put a message in the session; its packet id.

        Connected or not: paho keeps a QoS 1 or 2 message until its handshake completes and
        sends it on every connection until then (``MQTT_ERR_NO_CONN`` means just that here).
        Raises MqttCodeError when paho does not take it (its own limits).
        """
        info = self._paho.publish(topic, body, qos, False, properties)
        if info.rc not in (MQTT_ERR_SUCCESS, MQTT_ERR_NO_CONN):
            raise aiomqtt.MqttCodeError(info.rc, "the session did not take the message")
        return int(info.mid)

    def ack(self, mid: int) -> None:
        """Acknowledge the QoS 1 message ``mid`` (on the current connection)."""
        self._paho.ack(mid, 1)

    def socket(self) -> socket.socket | None:
        """The connection's socket (None when there is none)."""
        sock = self._paho.socket()
        return sock if isinstance(sock, socket.socket) else None

    def drain(self) -> int:
        """Drop messages a dead connection left in the client's queue; how many.

        Their acknowledgements would name packet ids of that connection, so they must not be
        handled on the next: unacknowledged, the broker sends QoS 1 ones again.
        """
        queue = self._client._queue  # see the module docstring
        dropped = 0
        while not queue.empty():
            queue.get_nowait()
            dropped += 1
        return dropped

    def read_disconnect(self) -> None:
        """Mark how the last connection ended as read (:func:`read_disconnect`)."""
        read_disconnect(self._client)


def read_disconnect(client: aiomqtt.Client) -> None:
    """Mark how ``client``'s last connection ended as read.

    aiomqtt keeps it in a future that the next connection of a reused client replaces; when
    a connection died while no message loop was waiting on it (say, during the subscribe),
    nothing read it, and asyncio would log "exception was never retrieved".
    """
    ended = client._disconnected  # see the module docstring
    if ended.done() and not ended.cancelled():
        ended.exception()
