"""Forethought: act on LLM decisions within hard deadlines.

The model writes actions while the system is idle; when an event arrives, the runtime only
selects one. This package re-exports the public API of its subpackages.
"""

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
    BackendError,
    ConfigError,
    DeadlinePassed,
    ForethoughtError,
    InvalidAction,
    ModelNotFound,
    PromptTooLong,
    SchemaError,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "ActionForm",
    "ActionSchema",
    "BackendError",
    "CancelSignal",
    "Clock",
    "ConfigError",
    "DeadlinePassed",
    "ForethoughtError",
    "Generation",
    "GenerationStatus",
    "InvalidAction",
    "LatencyModel",
    "LatencyProfile",
    "ModelBackend",
    "ModelNotFound",
    "MonotonicClock",
    "Prediction",
    "Prompt",
    "PromptTooLong",
    "SchemaError",
    "Scores",
    "TransformersBackend",
    "__version__",
]
