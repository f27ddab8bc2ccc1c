"""The values one decode call works with: stop reasons, per-row results, the run state."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._grammar import GrammarMatcher

__all__ = ["DecodeResult", "RowResult", "Run", "ScoreResult", "StopReason"]


class StopReason(enum.Enum):
    """Why a row stopped decoding."""

    COMPLETE = "complete"
    """The grammar (or EOS, unconstrained) finished the output."""
    DEADLINE = "deadline"
    """The next pass was predicted to end after the deadline."""
    CANCELLED = "cancelled"
    """The cancel signal was set."""
    LENGTH = "length"
    """``max_new_tokens`` were written without finishing."""
    NOT_STARTED = "not_started"
    """The call was predicted not to fit its deadline, so no pass ran."""


@dataclass(slots=True)
class RowResult:
    """The tokens one row produced and why it stopped."""

    tokens: list[int] = field(default_factory=list)
    reason: StopReason | None = None
    """None while the row is still decoding."""
    forced: int = 0
    """Tokens fed by jump-forward rather than sampled."""


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """One decode call: its rows and when things happened on the caller's clock."""

    rows: tuple[RowResult, ...]
    prompt_tokens: int
    """Tokens of prompt per row (prefix + own tokens)."""
    prefill_tokens: int
    """Tokens actually prefilled (the prefix counts only when it was not cached)."""
    passes: int
    """Decode passes after the prefill."""
    started_at: float
    first_token_at: float | None
    finished_at: float


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """Candidate log-likelihoods (None unless ``reason`` is COMPLETE) and when they came."""

    scores: tuple[float, ...] | None
    reason: StopReason
    started_at: float
    finished_at: float


class Run:
    """The mutable state of one decode call."""

    def __init__(
        self,
        *,
        results: tuple[RowResult, ...],
        matchers: list[GrammarMatcher | None],
        max_new_tokens: int,
        eos: frozenset[int],
    ) -> None:
        self.eos = eos
        self.results = results
        self.matchers = matchers
        self.max_new_tokens = max_new_tokens
        self.prefilled = False
        self.prefill_tokens = 0
        self.passes = 0
        self.first_token_at: float | None = None

    def advance(self, r: int, token: int, jump_forward: bool) -> list[int]:
        """Take row ``r``'s chosen token; return what to feed next (empty: the row stopped)."""
        res, m = self.results[r], self.matchers[r]
        if m is None and token in self.eos:
            res.reason = StopReason.COMPLETE
            return []
        if m is not None and not m.accept(token):
            # Every token masked (a grammar dead end): nothing valid can follow.
            res.reason = StopReason.LENGTH
            return []
        res.tokens.append(token)
        forced = m.jump_forward() if (m is not None and jump_forward) else []
        res.tokens.extend(forced)
        res.forced += len(forced)
        if m is not None and m.done:
            res.reason = StopReason.COMPLETE
            return []
        if len(res.tokens) >= self.max_new_tokens:
            res.reason = StopReason.LENGTH
            return []
        return [token, *forced]

    def stop_open(self, reason: StopReason) -> None:
        """Give every row still decoding the stop ``reason``."""
        for res in self.results:
            if res.reason is None:
                res.reason = reason
                if reason is StopReason.NOT_STARTED:  # nothing ran: no forced opening either
                    res.tokens.clear()
                    res.forced = 0
