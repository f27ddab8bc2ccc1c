"""Pure data: action schemas, the event space, state, the policy tree, the error tree. No torch."""

from ._abstraction import StateAbstraction
from ._action import ActionForm, ActionSchema
from ._errors import (
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
    ServerError,
    ServerRejected,
    ServerReplyError,
    ServerUnavailable,
    SnapshotError,
    first_problem,
)
from ._events import EventKey, EventSpace, EventType, Grid
from ._spec import AgentSpec, load_document
from ._spec_check import Problem, StateValues, check_spec, did_you_mean, validation_problems
from ._state import WorldState
from ._tree import PolicyNode, PolicyTree

__all__ = [
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
    "InputError",
    "InvalidAction",
    "InvalidEvent",
    "InvalidState",
    "ModelNotFound",
    "NoDecision",
    "NotStarted",
    "PolicyNode",
    "PolicyTree",
    "Problem",
    "PromptTooLong",
    "SchemaError",
    "ServerError",
    "ServerRejected",
    "ServerReplyError",
    "ServerUnavailable",
    "SnapshotError",
    "StateAbstraction",
    "StateValues",
    "WorldState",
    "check_spec",
    "did_you_mean",
    "first_problem",
    "load_document",
    "validation_problems",
]
