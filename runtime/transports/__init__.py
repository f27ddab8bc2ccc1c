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
from ._ros2_bus import Ros2Bus, Ros2BusSection
from ._ros2_map import (
    ActionMap,
    MappedMessage,
    Ros2Map,
    TopicMap,
    action_message,
    check_ros2_map,
    is_ros2_map,
    load_ros2_map,
    map_message,
)
from ._ros2_types import Ros2TypeError, Ros2Types
from ._topics import Topics
from ._zenoh import ZenohBus, ZenohBusSection, zenoh_config
from ._zenoh_security import ZenohSecurity

__all__ = [
    "ActionMap",
    "EventBus",
    "InProcessBus",
    "MappedMessage",
    "MqttBus",
    "MqttBusSection",
    "MqttSecurity",
    "Ros2Bus",
    "Ros2BusSection",
    "Ros2Map",
    "Ros2TypeError",
    "Ros2Types",
    "TopicMap",
    "Topics",
    "ZenohBus",
    "ZenohBusSection",
    "ZenohSecurity",
    "action_message",
    "check_ros2_map",
    "expiry_properties",
    "is_ros2_map",
    "load_ros2_map",
    "map_message",
    "zenoh_config",
]
