"""The transports: where events come from and decisions go, with each one's security.

The in-process bus (tests, simulations, one process), MQTT (aiomqtt, MQTT 5) and Zenoh
(eclipse-zenoh, the optional ``zenoh`` extra), their topic names and their bounded
drop-oldest queue. The agent sees a transport only as an :class:`EventBus`;
``forethought.runtime`` re-exports these names, so users import them from there. URL parsing,
payload helpers and the buses' counters are private (imported from their modules).
"""

from ._bus import EventBus, InProcessBus
from ._mqtt import MqttBus, MqttBusSection, expiry_properties
from ._mqtt_security import MqttSecurity
from ._topics import Topics
from ._zenoh import ZenohBus, ZenohBusSection, zenoh_config
from ._zenoh_security import ZenohSecurity

__all__ = [
    "EventBus",
    "InProcessBus",
    "MqttBus",
    "MqttBusSection",
    "MqttSecurity",
    "Topics",
    "ZenohBus",
    "ZenohBusSection",
    "ZenohSecurity",
    "expiry_properties",
    "zenoh_config",
]
