"""Forethought: act on LLM decisions within hard deadlines.

The model writes actions while the system is idle; when an event arrives, the runtime only
selects one. This package re-exports the public API of its subpackages.
"""

from forethought._agent import Agent
from forethought._config import AgentConfig, MqttConfig
from forethought.planner import (
    DEFAULT_MODEL,
    CancelSignal,
    Clock,
    Generation,
    GenerationStatus,
    LatencyModel,
    LatencyProfile,
    ModelBackend,
    MonotonicClock,
    Prediction,
    Prompt,
    Scores,
    TransformersBackend,
)
from forethought.policies import (
    ActionForm,
    ActionSchema,
    AgentSpec,
    BackendError,
    ConfigError,
    DeadlinePassed,
    ForethoughtError,
    InvalidAction,
    ModelNotFound,
    PromptTooLong,
    SchemaError,
)
from forethought.runtime import (
    Decision,
    Event,
    EventBus,
    EventPayload,
    InProcessBus,
    MqttBus,
    Tier,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "ActionForm",
    "ActionSchema",
    "Agent",
    "AgentConfig",
    "AgentSpec",
    "BackendError",
    "CancelSignal",
    "Clock",
    "ConfigError",
    "DeadlinePassed",
    "Decision",
    "Event",
    "EventBus",
    "EventPayload",
    "ForethoughtError",
    "Generation",
    "GenerationStatus",
    "InProcessBus",
    "InvalidAction",
    "LatencyModel",
    "LatencyProfile",
    "ModelBackend",
    "ModelNotFound",
    "MonotonicClock",
    "MqttBus",
    "MqttConfig",
    "Prediction",
    "Prompt",
    "PromptTooLong",
    "SchemaError",
    "Scores",
    "Tier",
    "TransformersBackend",
    "__version__",
]
