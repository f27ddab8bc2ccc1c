"""The one exception tree of Forethought.

::

    ForethoughtError
     ├── ConfigError (ValueError)      bad configuration, spec, scenario or argument, found at
     │    │                            load or construction (``field``, ``value``, ``problem``)
     │    ├── SchemaError              an action schema that cannot be used or compiled
     │    └── ModelNotFound            an unknown model name or path, or a missing model package
     ├── InputError (ValueError)       bad input arriving at run time (same fields)
     │    ├── InvalidEvent             an event payload that is malformed
     │    └── InvalidState             a state that is not a JSON object, or too large
     ├── NotStarted (RuntimeError)     an object used before ``async with`` started it
     ├── PromptTooLong (ValueError)    a prompt that does not fit the model's context
     ├── DeadlinePassed                a call made when its deadline had already passed
     ├── InvalidAction                 model output that does not validate against the schema
     ├── SnapshotError                 a policy-tree snapshot that is corrupt or made for another
     │                                 schema or model (``reason``)
     ├── BackendError                  the model failed while running (``retryable``)
     │    └── ServerError              an inference server's call failed (``endpoint``,
     │         │                       ``status``)
     │         ├── ServerUnavailable   refused, reset, or closed mid-stream: nothing came back
     │         ├── ServerRejected      a 4xx: the server refused this request (a grammar it
     │         │                       cannot parse, a prompt too long); not retryable as is
     │         └── ServerReplyError    a 5xx, or a body that is not the protocol's JSON
     └── NoDecision (TimeoutError)     no decision came back in time (``forethought send``)

Configuration errors are raised where the bad value enters, before anything runs; input errors
while running, for one event or state, which is then refused and nothing else is affected.
Both name the field and the value. Other run-time errors carry the data a caller needs to react
(``late_by``, ``raw``, ``retryable``) rather than only a message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
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
    "ServerError",
    "ServerRejected",
    "ServerReplyError",
    "ServerUnavailable",
    "SnapshotError",
    "error_path",
    "first_problem",
]


class ForethoughtError(Exception):
    """Base of every error Forethought raises on purpose."""


class _FieldProblem(ForethoughtError, ValueError):
    """A bad value: where it is (``field``), what it was (``value``) and what is wrong."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        super().__init__(f"{field}: {problem} (got {value!r})")
        self.field = field
        self.value = value
        self.problem = problem


class ConfigError(_FieldProblem):
    """Raised when a configuration, spec, scenario or argument is invalid, before running."""


class InputError(_FieldProblem):
    """Raised when input arriving at run time (an event, a state) is refused."""


class SchemaError(ConfigError):
    """Raised when an action schema cannot be used: unsupported construct or failed compile."""


class ModelNotFound(ConfigError):
    """Raised when a model name or path resolves to nothing loadable.

    ``install`` holds the exact command that provides the model, when one exists.
    """

    def __init__(
        self, field: str, value: object, problem: str, *, install: str | None = None
    ) -> None:
        if install is not None:
            problem = f"{problem}; install it with: {install}"
        super().__init__(field, value, problem)
        self.install = install


class InvalidState(InputError):
    """Raised when a state (or a patch to it) is not a JSON object or exceeds the size bound."""


class InvalidEvent(InputError):
    """Raised when an event payload cannot be decided: not JSON, wrong fields, too large."""


class NotStarted(ForethoughtError, RuntimeError):
    """Raised when an object is used before ``async with`` (or ``load``) started it."""

    def __init__(self, what: str, how: str = "use `async with`") -> None:
        super().__init__(f"{what} is not started: {how}")
        self.what = what


class NoDecision(ForethoughtError, TimeoutError):
    """Raised when no decision came back for an event within the time waited."""

    def __init__(self, event_id: str, waited_s: float, hint: str = "") -> None:
        more = f" ({hint})" if hint else ""
        super().__init__(f"no decision for {event_id!r} within {waited_s} s{more}")
        self.event_id = event_id
        self.waited_s = waited_s


class PromptTooLong(ForethoughtError, ValueError):
    """Raised when a prompt (plus room for the answer) exceeds the model's context."""

    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(f"prompt of {tokens} tokens exceeds the model's context of {limit}")
        self.tokens = tokens
        self.limit = limit


class DeadlinePassed(ForethoughtError):
    """Raised when a model call is made after its absolute deadline."""

    def __init__(self, deadline: float, now: float) -> None:
        self.late_by = now - deadline
        super().__init__(f"deadline {deadline:.6f} already passed {self.late_by * 1e3:.3f} ms ago")
        self.deadline = deadline
        self.now = now


class InvalidAction(ForethoughtError):
    """Raised when text or data does not validate as an action; ``raw`` keeps the input."""

    def __init__(self, raw: str, reason: str) -> None:
        super().__init__(f"invalid action {raw[:200]!r}: {reason}")
        self.raw = raw
        self.reason = reason


class SnapshotError(ForethoughtError):
    """Raised when a tree snapshot cannot be used; ``reason`` is ``corrupt`` or ``mismatch``."""

    def __init__(self, path: str, reason: str, detail: str) -> None:
        super().__init__(f"snapshot {path}: {detail}")
        self.path = path
        self.reason = reason
        self.detail = detail


class BackendError(ForethoughtError):
    """Raised when the model backend fails while running a call."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ServerError(BackendError):
    """Raised when a call to an inference server fails; ``status`` is the HTTP status, if any."""

    def __init__(
        self, endpoint: str, problem: str, *, status: int | None = None, retryable: bool = True
    ) -> None:
        code = f" (HTTP {status})" if status is not None else ""
        super().__init__(f"{endpoint}: {problem}{code}", retryable=retryable)
        self.endpoint = endpoint
        self.status = status
        self.problem = problem


class ServerUnavailable(ServerError):
    """Raised when the server cannot be reached, or the connection drops before the answer."""


class ServerRejected(ServerError):
    """Raised when the server refuses the request itself (a 4xx): retrying it unchanged fails."""

    def __init__(self, endpoint: str, problem: str, *, status: int | None = None) -> None:
        super().__init__(endpoint, problem, status=status, retryable=False)


class ServerReplyError(ServerError):
    """Raised when the server fails (a 5xx) or answers with something that is not its protocol."""


def first_problem(exc: ValidationError, prefix: str = "") -> tuple[str, object, str]:
    """The field path, offending input and message of a pydantic error's first problem.

    Paths read as in the source document: ``events[0].params.x`` (list indices in brackets;
    pydantic's union-member tags such as ``list[str]`` are left out).
    """
    err = exc.errors()[0]
    return error_path(err["loc"], prefix), err.get("input"), err["msg"]


def error_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """A pydantic error location as the source document reads: ``events[0].params.x``."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" not in part:
            path += f".{part}" if path else part
    return path
