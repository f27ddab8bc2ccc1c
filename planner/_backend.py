"""The model backend protocol: what the planner and the executor ask of a model.

Three calls, each with an absolute ``deadline`` on the caller's clock and a cancel signal:

* :meth:`ModelBackend.generate` -- one action for one prompt;
* :meth:`ModelBackend.generate_batch` -- actions for many events sharing one context (the
  planner's branches), in one batch on one cached prefix;
* :meth:`ModelBackend.score` -- the likelihood of candidate actions for one prompt, all
  candidates in one batched pass.

A call never returns half an action: a :class:`Generation` either holds a validated action
(``status`` is ``DONE``) or says why not (cut at the deadline, cancelled, not started, invalid).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel

if TYPE_CHECKING:
    from forethought.policies import ActionForm, ActionSchema

    from ._latency import LatencyModel
    from ._prompt import Prompt

__all__ = ["CancelSignal", "Generation", "GenerationStatus", "ModelBackend", "Scores"]


class GenerationStatus(enum.Enum):
    """How a model call ended."""

    DONE = "done"
    """A complete, validated action."""
    DEADLINE = "deadline"
    """Stopped before the pass that would have overshot the deadline."""
    CANCELLED = "cancelled"
    """Stopped because the cancel signal was set."""
    NOT_STARTED = "not_started"
    """Predicted not to fit the deadline, so nothing ran."""
    LENGTH = "length"
    """Ran out of ``max_new_tokens`` before the action was complete."""
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
    """What the model wrote (compact JSON when DONE)."""
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
    """Candidate log-likelihoods for one prompt; ``best`` indexes the winner."""

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
    """What the planner and the executor need from a model."""

    @property
    def model_id(self) -> str:
        """The model's name as reports show it."""
        ...

    @property
    def latency(self) -> LatencyModel:
        """The latency model, kept current by every call."""
        ...

    async def prepare(self, schema: ActionSchema) -> None:
        """Compile and cache what ``schema`` needs, so no call compiles on an event's path."""
        ...

    async def generate(
        self,
        prompt: Prompt,
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
        form: ActionForm | None = None,
    ) -> Generation:
        """Generate one action for ``prompt``, stopping before ``deadline``."""
        ...

    async def generate_batch(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """Generate one action per event, all sharing ``context``, in one batch."""
        ...

    async def score(
        self,
        prompt: Prompt,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """Score candidate actions for ``prompt`` in one batched pass."""
        ...
