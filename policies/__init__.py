"""Pure data: action schemas, the event space, state, the policy tree, the error tree. No torch."""

from ._action import ActionForm, ActionSchema
from ._errors import (
    BackendError,
    ConfigError,
    DeadlinePassed,
    ForethoughtError,
    InvalidAction,
    InvalidEvent,
    InvalidState,
    ModelNotFound,
    PromptTooLong,
    SchemaError,
    SnapshotError,
    first_problem,
)
from ._events import EventKey, EventSpace, EventType, Grid
from ._spec import SCENARIO_KEYS, AgentSpec, load_document
from ._state import WorldState
from ._tree import PolicyNode, PolicyTree

__all__ = [
    "SCENARIO_KEYS",
    "ActionForm",
    "ActionSchema",
    "AgentSpec",
    "BackendError",
    "ConfigError",
    "DeadlinePassed",
    "EventKey",
    "EventSpace",
    "EventType",
    "ForethoughtError",
    "Grid",
    "InvalidAction",
    "InvalidEvent",
    "InvalidState",
    "ModelNotFound",
    "PolicyNode",
    "PolicyTree",
    "PromptTooLong",
    "SchemaError",
    "SnapshotError",
    "WorldState",
    "first_problem",
    "load_document",
]
