"""The agent and its event-time path: executor, events, decisions, buses, the serve loop."""

from ._acted_ids import ActedIds, ActedIdsStats
from ._age import AgeSource, expiry_interval_s, stamp_event
from ._agent import Agent
from ._backend_choice import backend_for
from ._backlog import Backlog
from ._bus import EventBus, InProcessBus
from ._config import (
    AgentConfig,
    EngineConfig,
    MqttConfig,
    ServerConfig,
    WatchdogConfig,
    ZenohConfig,
)
from ._decision import Decision, Tier
from ._event import Arrival, Event, EventPayload, ReplyTo, parse_payload
from ._executor import Executor, ExecutorConfig, ExecutorStats
from ._fleet_config import FleetConfig, FleetNames, fleet_permissions, parse_fleet_urls
from ._fleet_record import BranchRecord, branch_key, decode_key, prompt_hash
from ._fleet_tree import FleetStats, FleetTree
from ._fleet_worker import FleetWorker, WorkerStats, ensure_fleet
from ._freshness import EventsConfig, Freshness, FreshnessStats, Verdict
from ._health import (
    BusSection,
    CountersSection,
    HealthConfig,
    HealthReport,
    LatencySection,
    ModelSection,
    PlannerSection,
    TreeSection,
    WatchdogSection,
    WorkerSection,
    health_report,
)
from ._health_server import HealthServer, prometheus_text
from ._mqtt import MqttBus, MqttStats, expiry_properties, parse_mqtt_url, payload_bytes
from ._mqtt_security import MqttSecurity, parse_broker_url, refusal
from ._recorder import CHANNELS, McapMessage, McapRecorder, read_mcap_json
from ._serve import serve
from ._watchdog import StallWatchdog, WatchdogStats
from ._zenoh import ZenohBus, ZenohStats, zenoh_config
from ._zenoh_security import ZenohSecurity

__all__ = [
    "CHANNELS",
    "ActedIds",
    "ActedIdsStats",
    "AgeSource",
    "Agent",
    "AgentConfig",
    "Arrival",
    "Backlog",
    "BranchRecord",
    "BusSection",
    "CountersSection",
    "Decision",
    "EngineConfig",
    "Event",
    "EventBus",
    "EventPayload",
    "EventsConfig",
    "Executor",
    "ExecutorConfig",
    "ExecutorStats",
    "FleetConfig",
    "FleetNames",
    "FleetStats",
    "FleetTree",
    "FleetWorker",
    "Freshness",
    "FreshnessStats",
    "HealthConfig",
    "HealthReport",
    "HealthServer",
    "InProcessBus",
    "LatencySection",
    "McapMessage",
    "McapRecorder",
    "ModelSection",
    "MqttBus",
    "MqttConfig",
    "MqttSecurity",
    "MqttStats",
    "PlannerSection",
    "ReplyTo",
    "ServerConfig",
    "StallWatchdog",
    "Tier",
    "TreeSection",
    "Verdict",
    "WatchdogConfig",
    "WatchdogSection",
    "WatchdogStats",
    "WorkerSection",
    "WorkerStats",
    "ZenohBus",
    "ZenohConfig",
    "ZenohSecurity",
    "ZenohStats",
    "backend_for",
    "branch_key",
    "decode_key",
    "ensure_fleet",
    "expiry_interval_s",
    "expiry_properties",
    "fleet_permissions",
    "health_report",
    "parse_broker_url",
    "parse_fleet_urls",
    "parse_mqtt_url",
    "parse_payload",
    "payload_bytes",
    "prometheus_text",
    "prompt_hash",
    "read_mcap_json",
    "refusal",
    "serve",
    "stamp_event",
    "zenoh_config",
]
