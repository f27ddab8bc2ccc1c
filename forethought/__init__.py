"""Forethought: act on LLM decisions within hard deadlines.

The model writes actions while the system is idle; when an event arrives, the runtime only
selects one. This package re-exports the public API of its layers, lazily: importing
``forethought`` (or ``forethought.policies``) loads nothing heavy, and a name is imported from
its layer the first time it is used.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from forethought.models import (
        DEFAULT_MODEL,
        CancelSignal,
        Clock,
        DecodeOptions,
        Generation,
        GenerationStatus,
        LatencyModel,
        LatencyPredictor,
        LatencyProfile,
        LoopClock,
        ModelBackend,
        MonotonicClock,
        Prediction,
        ProcessBackend,
        Scores,
        ScriptedBackend,
        ScriptMode,
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
        InputError,
        InvalidAction,
        InvalidEvent,
        InvalidState,
        ModelNotFound,
        NoDecision,
        NotStarted,
        PromptTooLong,
        SchemaError,
        SnapshotError,
    )
    from forethought.runtime import (
        Agent,
        AgentConfig,
        Decision,
        Event,
        EventBus,
        EventPayload,
        InProcessBus,
        MqttBus,
        MqttConfig,
        Tier,
    )

__version__ = "0.1.0"
"""The package's version (the distribution's, as pyproject.toml gives it)."""

_LAYER = {
    "forethought.policies": (
        "ActionForm",
        "ActionSchema",
        "AgentSpec",
        "BackendError",
        "ConfigError",
        "DeadlinePassed",
        "ForethoughtError",
        "InputError",
        "InvalidAction",
        "InvalidEvent",
        "InvalidState",
        "ModelNotFound",
        "NoDecision",
        "NotStarted",
        "PromptTooLong",
        "SchemaError",
        "SnapshotError",
    ),
    "forethought.models": (
        "DEFAULT_MODEL",
        "CancelSignal",
        "Clock",
        "DecodeOptions",
        "Generation",
        "GenerationStatus",
        "LatencyModel",
        "LatencyPredictor",
        "LatencyProfile",
        "LoopClock",
        "ModelBackend",
        "MonotonicClock",
        "Prediction",
        "ProcessBackend",
        "Scores",
        "ScriptMode",
        "ScriptedBackend",
        "TransformersBackend",
    ),
    "forethought.runtime": (
        "Agent",
        "AgentConfig",
        "Decision",
        "Event",
        "EventBus",
        "EventPayload",
        "InProcessBus",
        "MqttBus",
        "MqttConfig",
        "Tier",
    ),
}
_WHERE = {name: module for module, names in _LAYER.items() for name in names}

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
    "DecodeOptions",
    "Event",
    "EventBus",
    "EventPayload",
    "ForethoughtError",
    "Generation",
    "GenerationStatus",
    "InProcessBus",
    "InputError",
    "InvalidAction",
    "InvalidEvent",
    "InvalidState",
    "LatencyModel",
    "LatencyPredictor",
    "LatencyProfile",
    "LoopClock",
    "ModelBackend",
    "ModelNotFound",
    "MonotonicClock",
    "MqttBus",
    "MqttConfig",
    "NoDecision",
    "NotStarted",
    "Prediction",
    "ProcessBackend",
    "PromptTooLong",
    "SchemaError",
    "Scores",
    "ScriptMode",
    "ScriptedBackend",
    "SnapshotError",
    "Tier",
    "TransformersBackend",
    "__version__",
]


def __getattr__(name: str) -> _typing.Any:
    """Import a public name from its layer on first use (PEP 562)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'forethought' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
