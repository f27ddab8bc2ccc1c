"""TierBackoff: the executor stops starting model calls that keep losing their events.

A score or live call is started when the latency model's p95 says it fits the event's budget.
The law predicts forward passes; a real call also pays what the law does not see (queueing
behind the planner's pass, the call's own set-up, a cold cache), so on a slow model every
call can fit on paper and overrun in fact. Such a call answers nothing: the event falls to
the default all the same, and the model time it took (up to the whole budget, plus the
planner's batch it preempted) is lost to the planner, whose branches would have answered
later events. ``hybrid`` then loses to ``tree`` alone.

So the executor keeps, per tier, event type and prompt length (bucketed by powers of two, as
the planner's live record is), the run of consecutive calls that did not answer in time.
After ``after`` of them, the tier is skipped for that kind of event, and tried again after
1, 2, 4 ... up to ``max_skips`` skipped events (exponential backoff): a tier that starts
answering again (a warmed cache, a quieter neighbour) is found out within at most
``max_skips`` + 1 events, and a tier that answers resets its run at once. A tier that answers
often never loses ``after`` calls in a row. A call the model refused before any pass (not
started) cost nothing and counts for neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from forethought.models.internals import prompt_length_bucket

__all__ = ["TierBackoff"]

_MAX_RUNS = 4096
"""Runs kept at most: event types arrive off the wire, so the oldest run gives way."""


@dataclass(slots=True)
class _Run:
    failures: int = 0
    skipped: int = 0


class TierBackoff:
    """Consecutive unanswered calls per (tier, event type, prompt length), and when to retry.

    Args:
        after: consecutive unanswered calls before the tier is skipped.
        max_skips: the most events skipped between two retries.

    """

    def __init__(self, *, after: int = 2, max_skips: int = 16) -> None:
        if after < 1 or max_skips < 1:
            raise ValueError("after and max_skips must be at least 1")
        self._after = after
        self._max_skips = max_skips
        self._runs: dict[tuple[str, str, int], _Run] = {}

    def skip(self, tier: str, event_type: str, prompt_chars: int) -> str | None:
        """Why to skip ``tier`` for this event (None: start the call).

        Counts the skip: the call is retried once enough events have been skipped.
        """
        run = self._runs.get((tier, event_type, prompt_length_bucket(prompt_chars)))
        if run is None or run.failures < self._after:
            return None
        # The exponent is capped: a long run of failures must not grow an unbounded integer.
        wait = min(2 ** min(run.failures - self._after, 30), self._max_skips)
        if run.skipped >= wait:
            run.skipped = 0
            return None  # this event retries the tier
        run.skipped += 1
        return (
            f"its last {run.failures} calls for {event_type} events like this one did not "
            f"answer in time (tried again in {wait - run.skipped + 1} events)"
        )

    def outcome(self, tier: str, event_type: str, prompt_chars: int, answered: bool) -> None:
        """A call of ``tier`` was started for such an event and answered in time, or not."""
        ident = (tier, event_type, prompt_length_bucket(prompt_chars))
        if answered:
            self._runs.pop(ident, None)
            return
        run = self._runs.get(ident)
        if run is None:
            if len(self._runs) >= _MAX_RUNS:
                del self._runs[next(iter(self._runs))]
            run = self._runs[ident] = _Run()
        run.failures += 1
