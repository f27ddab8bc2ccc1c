"""LiveRecord: what the live tiers have achieved in this run, learnt online, with decay.

The planner's cost rule yields idle time to the executor's model tiers (score, live) only for
the events they would answer in time: a branch planned for an event the live tier would have
answered anyway displaces live work; one planned for an event it would lose is pure gain. How
often the live tier answers is not something a latency law predicts well: one call's
predicted p95 says nothing of queueing behind the planner, a cold cache, or calls longer
than the law's (a slow model whose every call fits on paper can lose every event). So it is
learnt from outcomes, as they come:

* **per event type and prompt length**: a type's events in a long state prompt may miss
  where short ones fit. The prompt length is bucketed by powers of two
  (:func:`prompt_length_bucket`), and a bucket's estimate leans on its type's until the
  bucket has outcomes of its own;
* **with decay**: each outcome's weight halves every ``half_life_s`` of the run's clock, so a
  live tier that starts answering (a warmed cache) or stops (a busy neighbour) is followed;
* **a prior that errs towards planning**: before any outcome, the live tier is taken to
  answer nothing (success 0, worth ``prior_weight`` outcomes). An unfinished live call loses
  its event, an unneeded branch only costs idle time, so the planner plans until the live
  tier has shown, in this run, that it answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from forethought.models.internals import prompt_length_bucket

__all__ = ["LiveRecord"]


@dataclass(slots=True)
class _Decayed:
    """Decayed counts of tries and answers, as of ``at`` (the caller's clock)."""

    tries: float = 0.0
    answers: float = 0.0
    at: float = 0.0

    def decay_to(self, now: float, half_life_s: float) -> None:
        if now > self.at:
            keep = 0.5 ** ((now - self.at) / half_life_s)
            self.tries *= keep
            self.answers *= keep
        self.at = max(self.at, now)

    def weighed(self, now: float, half_life_s: float) -> tuple[float, float]:
        """(tries, answers) decayed to ``now``, without changing the record."""
        keep = 0.5 ** (max(0.0, now - self.at) / half_life_s)
        return self.tries * keep, self.answers * keep


class LiveRecord:
    """The live tiers' success on the tree's misses, per event type and prompt length.

    Args:
        half_life_s: an outcome's weight halves every this many seconds of the run's clock.
        prior: the success assumed before any outcome (0: plan as if the live tier answered
            nothing).
        prior_weight: how many outcomes the prior is worth.
        bucket_weight: how many outcomes of a prompt-length bucket outweigh its type's
            estimate (the type's stands in for a bucket with few outcomes of its own).

    """

    def __init__(
        self,
        *,
        half_life_s: float = 60.0,
        prior: float = 0.0,
        prior_weight: float = 1.0,
        bucket_weight: float = 2.0,
    ) -> None:
        if half_life_s <= 0:
            raise ValueError(f"half_life_s must be > 0 (got {half_life_s})")
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior must be within [0, 1] (got {prior})")
        if prior_weight <= 0 or bucket_weight <= 0:
            raise ValueError("prior_weight and bucket_weight must be > 0")
        self._half_life_s = half_life_s
        self._prior = prior
        self._prior_weight = prior_weight
        self._bucket_weight = bucket_weight
        self._types: dict[str, _Decayed] = {}
        self._buckets: dict[tuple[str, int], _Decayed] = {}

    def observe(self, event_type: str, prompt_chars: int, answered: bool, now: float) -> None:
        """The tree missed an event of ``event_type``; the live tiers answered it in time or not."""
        bucket = (event_type, prompt_length_bucket(prompt_chars))
        for rec in (
            self._types.setdefault(event_type, _Decayed(at=now)),
            self._buckets.setdefault(bucket, _Decayed(at=now)),
        ):
            rec.decay_to(now, self._half_life_s)
            rec.tries += 1.0
            rec.answers += float(answered)

    def type_success(self, event_type: str, now: float) -> float:
        """The share of ``event_type``'s misses the live tiers answer in time, all lengths."""
        tries, answers = self._weighed(self._types.get(event_type), now)
        w = self._prior_weight
        return (answers + self._prior * w) / (tries + w)

    def success(self, event_type: str, prompt_chars: int, now: float) -> float:
        """The share answered in time for prompts of about ``prompt_chars`` characters."""
        base = self.type_success(event_type, now)
        rec = self._buckets.get((event_type, prompt_length_bucket(prompt_chars)))
        tries, answers = self._weighed(rec, now)
        w = self._bucket_weight
        return (answers + base * w) / (tries + w)

    def tries(self, event_type: str, now: float) -> float:
        """The decayed number of ``event_type``'s outcomes seen (0: only the prior speaks)."""
        return self._weighed(self._types.get(event_type), now)[0]

    def _weighed(self, rec: _Decayed | None, now: float) -> tuple[float, float]:
        return (0.0, 0.0) if rec is None else rec.weighed(now, self._half_life_s)
