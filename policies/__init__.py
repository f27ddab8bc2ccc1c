"""Pure data: action schemas, the event space, the policy tree, the error tree. No torch."""

from ._action import ActionForm, ActionSchema
from ._errors import (
    BackendError,
    ConfigError,
    DeadlinePassed,
    ForethoughtError,
    InvalidAction,
    ModelNotFound,
    PromptTooLong,
    SchemaError,
)

__all__ = [
    "ActionForm",
    "ActionSchema",
    "BackendError",
    "ConfigError",
    "DeadlinePassed",
    "ForethoughtError",
    "InvalidAction",
    "ModelNotFound",
    "PromptTooLong",
    "SchemaError",
]
