"""The values one decode call works with: per-row results and the run state.

A row's stop reason is the model layer's one status enum, :class:`GenerationStatus`: ``DONE``
here means the grammar (or EOS) completed the output; the backend then validates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._backend import GenerationStatus

if TYPE_CHECKING:
    from .grammar._protocol import GrammarMatcher

__all__ = ["DecodeResult", "RowResult", "Run", "ScoreResult", "common_prefix", "split_candidates"]


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every sequence of ``seqs`` shares."""
    n = min(len(s) for s in seqs)
    for i in range(n):
        if any(s[i] != seqs[0][i] for s in seqs):
            return i
    return n


def split_candidates(candidates: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """The tokens every candidate shares (the head) and each one's own tail.

    A candidate's score is the log-likelihood of its tail after the head: the head is the same
    for all, so leaving it out changes no ranking (every backend scores this same quantity).
    When one candidate is a prefix of another, each keeps one token of its tail.
    """
    lcp = common_prefix(candidates)
    tails = [list(c[lcp:]) for c in candidates]
    if any(not t for t in tails):
        lcp = max(lcp - 1, 0)
        tails = [list(c[lcp:]) for c in candidates]
    return list(candidates[0][:lcp]), tails


@dataclass(slots=True)
class RowResult:
    """The tokens one row produced and why it stopped."""

    tokens: list[int] = field(default_factory=list)
    reason: GenerationStatus | None = None
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
    """Candidate log-likelihoods (None unless ``reason`` is DONE) and when they came."""

    scores: tuple[float, ...] | None
    reason: GenerationStatus
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
            res.reason = GenerationStatus.DONE
            return []
        if m is not None and not m.accept(token):
            # Every token masked (a grammar dead end): nothing valid can follow.
            res.reason = GenerationStatus.LENGTH
            return []
        res.tokens.append(token)
        forced = m.jump_forward() if (m is not None and jump_forward) else []
        res.tokens.extend(forced)
        res.forced += len(forced)
        if m is not None and m.done:
            res.reason = GenerationStatus.DONE
            return []
        if len(res.tokens) >= self.max_new_tokens:
            res.reason = GenerationStatus.LENGTH
            return []
        return [token, *forced]

    def stop_open(self, reason: GenerationStatus) -> None:
        """Give every row still decoding the stop ``reason``."""
        for res in self.results:
            if res.reason is None:
                res.reason = reason
                if reason is GenerationStatus.NOT_STARTED:  # nothing ran: no forced opening either
                    res.tokens.clear()
                    res.forced = 0
