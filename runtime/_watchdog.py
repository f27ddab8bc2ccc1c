"""StallWatchdog: the safe default for pending events when the event loop itself is stuck.

Every deadline guarantee in Forethought assumes the event loop runs: a tree answer takes
microseconds, a model call is cut at its deadline, the default answers last. A blocking call
on the loop (a synchronous library call, a long garbage collection, a user callback that
sleeps) stops all of it at once, and events pass their deadlines unanswered. The watchdog
stands outside the loop, on a thread of its own:

* a heartbeat task on the loop stamps the time every ``beat_s``;
* the thread looks every ``tick_s``; when the last stamp is older than ``stall_s`` the loop is
  *stalled*, and for each event the executor is deciding whose deadline is within ``guard_s``
  it calls ``emit`` (on its own thread) with a default-action :class:`Decision`;
* when the loop runs again, the executor asks :meth:`settle` for each event it decides: an
  event the watchdog already answered gets that decision back, so every event id still has
  exactly one decision, and the bus publishes the one that was acted on.

``emit`` is what reaches the actuator without the loop: a controller's own function (it must
not need the stalled loop). Time is read from the loop's clock function (for asyncio's loop,
the monotonic clock), which is safe to call from another thread.

Stalls are counted with when they were detected, how long they lasted, and how many defaults
went out: :meth:`stats`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forethought.policies import ConfigError

from ._decision import Decision, Tier
from ._event import Event

__all__ = ["StallWatchdog", "WatchdogStats"]

log = logging.getLogger("forethought.watchdog")


@dataclass(slots=True)
class WatchdogStats:
    """What the watchdog saw."""

    looks: int = 0
    """How many times the thread compared the last heartbeat with the clock."""
    stalls: int = 0
    defaults_emitted: int = 0
    emit_failures: int = 0
    detected_after_ms: list[float] = field(default_factory=list)
    """Per stall: from the last heartbeat to the moment the thread saw the stall."""
    stall_ms: list[float] = field(default_factory=list)
    """Per stall that ended: from the last heartbeat before it to the first after it."""

    def as_dict(self) -> dict[str, Any]:
        """The counters, for ``agent.stats()``."""
        return {
            "looks": self.looks,
            "stalls": self.stalls,
            "defaults_emitted": self.defaults_emitted,
            "emit_failures": self.emit_failures,
            "detected_after_ms": [round(x, 3) for x in self.detected_after_ms],
            "stall_ms": [round(x, 3) for x in self.stall_ms],
        }


class StallWatchdog:
    """Answers pending events with the default when the event loop stalls.

    Args:
        default_action: the spec's safe action (readable JSON).
        emit: called on the watchdog's thread with each default decision it makes (None: the
            watchdog only detects and counts stalls; the executor's decisions stand).
        stall_s: how old the last heartbeat may be before the loop counts as stalled.
        guard_s: how long before an event's deadline the default goes out during a stall.
        beat_s: the heartbeat period on the loop.
        tick_s: how often the thread looks.
        margin_s: the executor's margin (a decision is met when it comes this much early).

    """

    def __init__(
        self,
        *,
        default_action: dict[str, Any],
        emit: Callable[[Decision], None] | None,
        type_defaults: Mapping[str, Mapping[str, Any]] | None = None,
        stall_s: float = 0.1,
        guard_s: float = 0.02,
        beat_s: float = 0.01,
        tick_s: float = 0.002,
        margin_s: float = 0.0,
    ) -> None:
        if not 0 < beat_s < stall_s:
            raise ConfigError("watchdog.stall_ms", stall_s * 1e3, "must exceed the heartbeat")
        if guard_s < 0:
            raise ConfigError("watchdog.guard_ms", guard_s * 1e3, "must be 0 or more")
        self._default = dict(default_action)
        # An event type's own safe action, where the spec gives one (the executor's rule).
        self._type_defaults = {t: dict(a) for t, a in (type_defaults or {}).items()}
        self._emit = emit
        self._stall_s, self._guard_s = stall_s, guard_s
        self._beat_s, self._tick_s = beat_s, tick_s
        self._margin_s = margin_s
        self._lock = threading.Lock()
        self._pending: dict[str, Event] = {}
        self._answered: dict[str, Decision] = {}
        self._clock: Callable[[], float] = time.monotonic
        self._beat = 0.0
        self._stalled_since: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = WatchdogStats()

    # -- lifecycle ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Start the thread and beat on this loop until cancelled; then stop the thread."""
        loop = asyncio.get_running_loop()
        self._clock = loop.time  # the loop's own clock, readable from any thread
        self._beat = self._clock()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._watch, name="forethought.watchdog", daemon=True
        )
        self._thread.start()
        try:
            while True:
                await asyncio.sleep(self._beat_s)
                self._heartbeat()
        finally:
            self._stop.set()
            thread, self._thread = self._thread, None
            if thread is not None:
                # Joining takes at most one tick: off the loop, so a cancel never blocks it.
                await asyncio.to_thread(thread.join)

    def _heartbeat(self) -> None:
        now = self._clock()
        with self._lock:
            if self._stalled_since is not None:
                self.stats.stall_ms.append((now - self._stalled_since) * 1e3)
                self._stalled_since = None
            self._beat = now

    # -- the executor's side --------------------------------------------------------------------

    def watch(self, event: Event) -> None:
        """Note an event being decided (its deadline resolved)."""
        with self._lock:
            self._pending[event.id] = event

    def settle(self, event_id: str) -> Decision | None:
        """The event is decided: the watchdog's decision if it answered first, else None."""
        with self._lock:
            self._pending.pop(event_id, None)
            return self._answered.pop(event_id, None)

    # -- the thread ---------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._stop.wait(self._tick_s):
            now = self._clock()
            with self._lock:
                self.stats.looks += 1
                if now - self._beat <= self._stall_s:
                    continue
                if self._stalled_since is None:
                    self._stalled_since = self._beat
                    self.stats.stalls += 1
                    self.stats.detected_after_ms.append((now - self._beat) * 1e3)
                    log.warning("the event loop is stalled (no heartbeat for %.0f ms)",
                                (now - self._beat) * 1e3)  # fmt: skip
                due = [
                    e
                    for e in self._pending.values()
                    if e.deadline is not None and e.deadline - now <= self._guard_s
                ]
                if self._emit is None:
                    continue
                decisions = [self._default_for(e, now) for e in due]
                for e, d in zip(due, decisions, strict=True):
                    del self._pending[e.id]
                    self._answered[e.id] = d
            for d in decisions:  # outside the lock: emit may take its time
                try:
                    self._emit(d)
                    self.stats.defaults_emitted += 1
                except Exception:
                    self.stats.emit_failures += 1
                    log.exception("the watchdog's emit failed for %s", d.event_id)

    def _default_for(self, event: Event, now: float) -> Decision:
        assert event.deadline is not None
        end = event.deadline - self._margin_s
        return Decision(
            event_id=event.id,
            tier=Tier.DEFAULT,
            action=dict(self._type_defaults.get(event.type, self._default)),
            latency_s=now - event.arrived_at,
            budget_s=end - event.arrived_at,
            met=now <= end + 1e-9,
            skipped=(("loop", "stalled: the watchdog answered"),),
            decided_at=now,
            by_watchdog=True,
        )
