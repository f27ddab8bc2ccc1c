"""The model backend protocol: what the planner and the executor ask of a model.

As small as httpx's transport: an async lifecycle, a latency predictor, and two calls, each
with an absolute ``deadline`` on the event loop's clock and an optional cancel signal:

* :meth:`ModelBackend.generate` -- one action per event, all events sharing one context (the
  state), in one batch on one cached prefix (the planner's branches; the live tier is a batch
  of one);
* :meth:`ModelBackend.score` -- the likelihood of candidate actions for one event, all
  candidates in one pass.

A call never returns half an action: a :class:`Generation` either holds a validated action
(``status`` is ``DONE``) or says why not (cut at the deadline, cancelled, not started, invalid).
How a backend decodes (compact or verbose form, prefix reuse, jump-forward) is its
configuration (:class:`DecodeOptions`), never an argument of a call.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

from pydantic import BaseModel

from forethought.policies import ActionForm

if TYPE_CHECKING:
    from forethought.policies import ActionSchema

    from ._latency import LatencyPredictor

__all__ = [
    "CancelSignal",
    "DecodeOptions",
    "Generation",
    "GenerationStatus",
    "ModelBackend",
    "Scores",
]


class GenerationStatus(enum.Enum):
    """How a model call (or one row of it) ended: the one status enum of the model layer."""

    DONE = "done"
    """A complete action (validated, when it leaves a backend)."""
    DEADLINE = "deadline"
    """Stopped before the pass that would have overshot the deadline."""
    CANCELLED = "cancelled"
    """Stopped because the cancel signal was set."""
    NOT_STARTED = "not_started"
    """Predicted not to fit the deadline, so nothing ran."""
    LENGTH = "length"
    """Ran out of ``max_new_tokens`` (or into a grammar dead end) before the action was done."""
    INVALID = "invalid"
    """Complete output that failed validation (kept in ``text`` for diagnosis)."""

    @property
    def cut(self) -> bool:
        """True for outcomes stopped by time or by the caller."""
        return self in (
            GenerationStatus.DEADLINE,
            GenerationStatus.CANCELLED,
            GenerationStatus.NOT_STARTED,
        )


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """How a backend decodes.

    The defaults are the production path; the benchmark and the simulator's naive live caller
    configure the others.

    Args:
        form: compact (short aliases, no spaces) or verbose (readable keys and a reason).
        constrained: apply the action grammar (off: free text, validated afterwards).
        reuse_prefix: keep the KV cache of the shared context between calls.
        jump_forward: feed the tokens the grammar forces in one pass.

    """

    form: ActionForm = ActionForm.COMPACT
    constrained: bool = True
    reuse_prefix: bool = True
    jump_forward: bool = True


class CancelSignal:
    """A thread-safe, one-way cancel flag a caller hands to a model call."""

    __slots__ = ("_callbacks", "_event")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], None]] = []

    def cancel(self) -> None:
        """Ask the call to stop before its next forward pass."""
        self._event.set()
        for callback in self._callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Also run ``callback`` when cancelled (a model in another process listens so)."""
        self._callbacks.append(callback)
        if self._event.is_set():
            callback()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()

    @property
    def event(self) -> threading.Event:
        """The underlying event (what the decoding thread polls)."""
        return self._event


@dataclass(frozen=True, slots=True)
class Generation:
    """The outcome of generating one action."""

    status: GenerationStatus
    action: BaseModel | None
    """The validated, readable action; None unless ``status`` is DONE."""
    text: str
    """What the model wrote (compact JSON when DONE in the compact form)."""
    prompt_tokens: int
    prefill_tokens: int
    """Tokens prefilled by this call (0 for a cached prefix)."""
    output_tokens: int
    forced_tokens: int
    """Output tokens fed by jump-forward rather than decoded one by one."""
    started_at: float
    first_token_at: float | None
    finished_at: float

    @property
    def ok(self) -> bool:
        """True when an action came back."""
        return self.status is GenerationStatus.DONE

    @property
    def seconds(self) -> float:
        """Time the call took, on the caller's clock."""
        return self.finished_at - self.started_at


@dataclass(frozen=True, slots=True)
class Scores:
    """Candidate log-likelihoods for one event; ``best`` indexes the winner."""

    status: GenerationStatus
    scores: tuple[float, ...] | None
    started_at: float
    finished_at: float

    @property
    def best(self) -> int | None:
        """Index of the most likely candidate, or None when scoring did not finish."""
        if self.scores is None:
            return None
        return max(range(len(self.scores)), key=self.scores.__getitem__)

    @property
    def seconds(self) -> float:
        """Time the call took, on the caller's clock."""
        return self.finished_at - self.started_at


@runtime_checkable
class ModelBackend(Protocol):
    """What the planner and the executor need from a model.

    ``async with backend:`` starts it (loads the model, opens a connection) on the running
    loop, whose clock its deadlines are then on; leaving the block stops it. A call made
    before the start raises :class:`~forethought.policies.NotStarted`.
    """

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    @property
    def model_id(self) -> str:
        """The model's name as reports show it."""
        ...

    @property
    def latency(self) -> LatencyPredictor:
        """Predicted call times, kept current by every call."""
        ...

    async def prepare(self, schema: ActionSchema) -> None:
        """Compile and cache what ``schema`` needs, so no call compiles on an event's path."""
        ...

    async def generate(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """One action per event, all sharing ``context``, in one batch; stops by ``deadline``."""
        ...

    async def score(
        self,
        context: str,
        event: str,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """Score candidate actions for ``event`` in one pass; stops by ``deadline``."""
        ...
