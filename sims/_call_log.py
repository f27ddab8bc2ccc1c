"""The per-call log: every model call of a replay as it ran, on whichever clock ran it.

A gap between the virtual and the real clock is a sum of single calls that took longer (or
shorter) on one side. :class:`LoggedClock` wraps the replay's clock (the real loop's, or the
charged one) and notes, for each call handed to the model's worker: who made it (the live tier
for an event, or the planner), what the latency model predicted for a live call when it was
started (the p95 the executor checks against the budget), how long the model had been idle
before it, its forward passes, and what it took end to end on that clock. Both clocks log the
same fields, so a live call that fitted on one and not on the other can be read side by side.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from forethought.models import Clock, LatencyPredictor
from forethought.models.internals import Pass, PassKind

from ._charged import ChargedClock

__all__ = ["CallEntry", "LoggedClock"]

_T = TypeVar("_T")
_EVENT_TASK = re.compile(r"^sim\.event\[(\d+)\]$")


@dataclass(frozen=True, slots=True)
class CallEntry:
    """One model call as it ran (seconds on the replay's clock, from the replay's start)."""

    kind: str
    """``live`` (an event's own call: the live or score tier), ``plan`` (the planner's),
    ``measure`` (a latency measurement: the executor measuring the model again in the
    background) or ``other`` (the agent's own, as it starts: a warm-up)."""
    event: int | None
    """The event's index for a live call."""
    begun_s: float
    """When the call was handed to the worker."""
    waited_s: float
    """From being handed over to the worker starting it (an earlier call still running)."""
    idle_before_s: float | None
    """How long the worker had been idle when the call started (None: the first call)."""
    predicted_p95_s: float | None
    """The live tier's predicted p95 for a call of this shape when it was handed over."""
    took_s: float
    """From the worker starting the call to its end."""
    forward_s: float
    """The part of :attr:`took_s` in forward passes (measured, or charged)."""
    prefills: int
    steps: int
    rows: int
    """The most rows one of its passes fed."""
    idle_charged_s: float
    """What the virtual clock charged for the idle time before it (0 on the real clock)."""

    def as_json(self) -> dict[str, float | int | str | None]:
        """Milliseconds, rounded to 0.1 ms."""

        def ms(x: float | None) -> float | None:
            return None if x is None else round(x * 1e3, 1)

        return {
            "kind": self.kind,
            "event": self.event,
            "begun_ms": ms(self.begun_s),
            "waited_ms": ms(self.waited_s),
            "idle_before_ms": ms(self.idle_before_s),
            "predicted_p95_ms": ms(self.predicted_p95_s),
            "took_ms": ms(self.took_s),
            "forward_ms": ms(self.forward_s),
            "prefills": self.prefills,
            "steps": self.steps,
            "rows": self.rows,
            "idle_charged_ms": ms(self.idle_charged_s),
        }


@dataclass(slots=True)
class _Open:
    """A call being logged (filled in as it runs)."""

    kind: str
    event: int | None
    begun: float
    predicted: float | None
    started: float = 0.0
    idle_before: float | None = None
    idle_charged_before: float = 0.0
    forward: float = 0.0
    shapes: list[Pass] = field(default_factory=list)


class LoggedClock:
    """A :class:`~forethought.models.Clock` that logs every call it times, around another.

    Args:
        inner: the clock the backend would use (the real loop's, or a :class:`ChargedClock`).
        origin: the replay's start on that clock (entries are logged from it).

    """

    def __init__(self, inner: Clock, origin: float) -> None:
        self._inner = inner
        self.origin = origin
        """The replay's start on the inner clock (entries are logged from it)."""
        self._pending: deque[_Open] = deque()  # handed over, not started (FIFO, one worker)
        self._current: _Open | None = None
        self._last_end: float | None = None
        self._predict: Callable[[], float] | None = None
        self.entries: list[CallEntry] = []
        """The calls that ended, in the order they ran."""

    def watch(self, latency: LatencyPredictor, event_tokens: int) -> None:
        """Log the live tier's prediction from ``latency``, as the executor makes it."""
        self._predict = lambda: latency.call(event_tokens, latency.typical_steps()).p95

    def now(self) -> float:
        """The inner clock's time."""
        return self._inner.now()

    def timed(self, work: Callable[[], _T], shape: Pass) -> tuple[_T, float]:
        """Time (or charge) the pass on the inner clock, and note it."""
        out, seconds = self._inner.timed(work, shape)
        call = self._current
        if call is not None:
            call.forward += seconds
            call.shapes.append(shape)
        return out, seconds

    def begin_call(self) -> None:
        """Note who hands the call over (on the loop), then tell the inner clock."""
        task = asyncio.current_task()
        found = _EVENT_TASK.match(task.get_name()) if task is not None else None
        event = int(found.group(1)) if found else None
        predicted = self._predict() if event is not None and self._predict else None
        name = task.get_name() if task is not None else ""
        kind = (
            "live"
            if event is not None
            else "plan"
            if name.endswith(".planner")
            else "measure"
            if name == "executor.measure"
            else "other"
        )
        self._pending.append(_Open(kind, event, self._inner.now(), predicted))
        self._inner.begin_call()

    def start_call(self) -> None:
        """The worker starts the call: note how long it had been idle."""
        call = self._pending.popleft() if self._pending else _Open("other", None, self.now(), None)
        call.started = self._inner.now()
        if self._last_end is not None:
            call.idle_before = call.started - self._last_end
        call.idle_charged_before = self._idle_charged()
        self._current = call
        self._inner.start_call()

    def end_call(self) -> None:
        """The call is over: log it, then tell the inner clock."""
        call, self._current = self._current, None
        end = self._inner.now()
        if call is not None:
            self._last_end = end
            self.entries.append(
                CallEntry(
                    kind=call.kind,
                    event=call.event,
                    begun_s=call.begun - self.origin,
                    waited_s=call.started - call.begun,
                    idle_before_s=call.idle_before,
                    predicted_p95_s=call.predicted,
                    took_s=end - call.started,
                    forward_s=call.forward,
                    prefills=sum(s.kind is PassKind.PREFILL for s in call.shapes),
                    steps=sum(s.kind is PassKind.STEP for s in call.shapes),
                    rows=max((s.rows for s in call.shapes), default=0),
                    idle_charged_s=self._idle_charged() - call.idle_charged_before,
                )
            )
        self._inner.end_call()

    def _idle_charged(self) -> float:
        inner = self._inner
        return inner.idle_s if isinstance(inner, ChargedClock) else 0.0
