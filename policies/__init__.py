"""Pure data: action schemas, the event space, state, the policy tree, the error tree. No torch."""

from ._action import ActionForm, ActionSchema
from ._errors import (
    BackendError,
    ConfigError,
    DeadlinePassed,
    ForethoughtError,
    InvalidAction,
    InvalidState,
    ModelNotFound,
    PromptTooLong,
    SchemaError,
    SnapshotError,
)
from ._events import EventKey, EventSpace, EventType, Grid
from ._state import WorldState
from ._tree import PolicyNode, PolicyTree

__all__ = [
    "ActionForm",
    "ActionSchema",
    "BackendError",
    "ConfigError",
    "DeadlinePassed",
    "EventKey",
    "EventSpace",
    "EventType",
    "ForethoughtError",
    "Grid",
    "InvalidAction",
    "InvalidState",
    "ModelNotFound",
    "PolicyNode",
    "PolicyTree",
    "PromptTooLong",
    "SchemaError",
    "SnapshotError",
    "WorldState",
]
