"""The agent and its event-time path: executor, events, decisions, buses, the serve loop."""

from ._acted_ids import ActedIds, ActedIdsStats
from ._agent import Agent
from ._backend_choice import backend_for
from ._bus import EventBus, InProcessBus
from ._config import AgentConfig, MqttConfig, ServerConfig, WatchdogConfig, ZenohConfig
from ._decision import Decision, Tier
from ._event import Arrival, Event, EventPayload, ReplyTo, parse_payload
from ._executor import Executor, ExecutorConfig, ExecutorStats
from ._fleet_config import FleetConfig, FleetNames, fleet_permissions, parse_fleet_urls
from ._fleet_record import BranchRecord, branch_key, decode_key, prompt_hash
from ._fleet_tree import FleetStats, FleetTree
from ._fleet_worker import FleetWorker, WorkerStats, ensure_fleet
from ._health import HealthConfig, HealthReport, health_report
from ._health_server import HealthServer, prometheus_text
from ._mqtt import MqttBus, MqttStats, parse_mqtt_url, payload_bytes
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
    "Agent",
    "AgentConfig",
    "Arrival",
    "BranchRecord",
    "Decision",
    "Event",
    "EventBus",
    "EventPayload",
    "Executor",
    "ExecutorConfig",
    "ExecutorStats",
    "FleetConfig",
    "FleetNames",
    "FleetStats",
    "FleetTree",
    "FleetWorker",
    "HealthConfig",
    "HealthReport",
    "HealthServer",
    "InProcessBus",
    "McapMessage",
    "McapRecorder",
    "MqttBus",
    "MqttConfig",
    "MqttSecurity",
    "MqttStats",
    "ReplyTo",
    "ServerConfig",
    "StallWatchdog",
    "Tier",
    "WatchdogConfig",
    "WatchdogStats",
    "WorkerStats",
    "ZenohBus",
    "ZenohConfig",
    "ZenohSecurity",
    "ZenohStats",
    "backend_for",
    "branch_key",
    "decode_key",
    "ensure_fleet",
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
    "zenoh_config",
]
