"""Pure data: action schemas, specs and the error tree. No torch.

Public: what a user writes, reads or catches: the spec, its action schema and the check of a
spec document; the event space and its keys, the world state, the policy tree and its nodes
(what ``Agent.tree`` and ``Agent.state`` are); the errors. The rest (state abstraction
internals, validation helpers) is the other layers' business, imported from
:mod:`forethought.policies.internals`, never from a private module.
"""

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
)
from ._events import EventKey, EventSpace
from ._guard_proof import DefaultBreach, default_breaches
from ._guards import GuardRule, GuardSet, drop_guarded
from ._spec import AgentSpec
from ._spec_check import Problem, check_spec
from ._state import WorldState
from ._tree import PolicyNode, PolicyTree

__all__ = [
    "ActionForm",
    "ActionSchema",
    "AgentSpec",
    "BackendError",
    "ConfigError",
    "DeadlinePassed",
    "DefaultBreach",
    "EventKey",
    "EventSpace",
    "ForethoughtError",
    "GuardRule",
    "GuardSet",
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
    "WorldState",
    "check_spec",
    "default_breaches",
    "drop_guarded",
]
