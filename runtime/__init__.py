"""The deadline-aware executor, events and decisions, and event buses (in-process, MQTT)."""

from ._bus import EventBus, InProcessBus
from ._decision import Decision, Tier
from ._event import Event, EventPayload, ReplyTo, parse_payload
from ._executor import Executor, ExecutorConfig, ExecutorStats
from ._mqtt import MqttBus, MqttStats, parse_mqtt_url, payload_bytes

__all__ = [
    "Decision",
    "Event",
    "EventBus",
    "EventPayload",
    "Executor",
    "ExecutorConfig",
    "ExecutorStats",
    "InProcessBus",
    "MqttBus",
    "MqttStats",
    "ReplyTo",
    "Tier",
    "parse_mqtt_url",
    "parse_payload",
    "payload_bytes",
]
