"""The agent and its event-time path: the agent, its configuration, events, decisions, buses.

Public: what a user embedding the runtime needs (the agent, its configuration sections, events
and decisions, the buses and what a sender or an actuator uses beside them, the health report,
the recorder). The executor, the serve loop (the agent runs it), the fleet's tree and worker and
the rest are the other layers' business: they import them from
:mod:`forethought.runtime.internals`, never from a private module.

The transports (in-process bus, MQTT, Zenoh) live in :mod:`forethought.runtime.transports`;
their public names are re-exported here.
"""

from ._acted_ids import ActedIds
from ._age import expiry_interval_s, stamp_event
from ._agent import Agent
from ._config import (
    AgentConfig,
    EngineConfig,
    MqttConfig,
    ServerConfig,
    WatchdogConfig,
    ZenohConfig,
)
from ._decision import Decision, Tier
from ._event import Event, EventPayload
from ._executor import ExecutorConfig
from ._freshness import EventsConfig
from ._health import HealthConfig
from ._health_report import (
    BusSection,
    CountersSection,
    GuardsSection,
    HealthReport,
    LatencySection,
    ModelSection,
    PlannerSection,
    TreeSection,
    WatchdogSection,
    WorkerSection,
)
from ._recorder import McapRecorder
from ._start_steps import StartSteps
from .fleet import FleetConfig, fleet_permissions
from .transports import (
    ActionMap,
    EventBus,
    InProcessBus,
    MappedMessage,
    MqttBus,
    MqttBusSection,
    MqttSecurity,
    Ros2Bus,
    Ros2BusSection,
    Ros2Map,
    Ros2TypeError,
    Ros2Types,
    TopicMap,
    Topics,
    ZenohBus,
    ZenohBusSection,
    ZenohSecurity,
    action_message,
    check_ros2_map,
    expiry_properties,
    is_ros2_map,
    load_ros2_map,
    map_message,
    zenoh_config,
)

__all__ = [
    "ActedIds",
    "ActionMap",
    "Agent",
    "AgentConfig",
    "BusSection",
    "CountersSection",
    "Decision",
    "EngineConfig",
    "Event",
    "EventBus",
    "EventPayload",
    "EventsConfig",
    "ExecutorConfig",
    "FleetConfig",
    "GuardsSection",
    "HealthConfig",
    "HealthReport",
    "InProcessBus",
    "LatencySection",
    "MappedMessage",
    "McapRecorder",
    "ModelSection",
    "MqttBus",
    "MqttBusSection",
    "MqttConfig",
    "MqttSecurity",
    "PlannerSection",
    "Ros2Bus",
    "Ros2BusSection",
    "Ros2Map",
    "Ros2TypeError",
    "Ros2Types",
    "ServerConfig",
    "StartSteps",
    "Tier",
    "TopicMap",
    "Topics",
    "TreeSection",
    "WatchdogConfig",
    "WatchdogSection",
    "WorkerSection",
    "ZenohBus",
    "ZenohBusSection",
    "ZenohConfig",
    "ZenohSecurity",
    "action_message",
    "check_ros2_map",
    "expiry_interval_s",
    "expiry_properties",
    "fleet_permissions",
    "is_ros2_map",
    "load_ros2_map",
    "map_message",
    "stamp_event",
    "zenoh_config",
]
