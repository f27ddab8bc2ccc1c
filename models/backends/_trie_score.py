"""Scoring candidates in one server request: their token trie as a grammar.

Scoring asks for each candidate's log-likelihood (the sum of its tokens' log-probabilities
after the prompt) and uses the best. One request per candidate pays one prefill each (or one
slot each); instead, all candidates become one grammar -- the trie of their token sequences
(:func:`trie_gbnf`) -- decoded greedily with the top log-probabilities of every step returned
(llama-server's ``n_probs``). That costs one prefill plus the trie's depth in steps, and reads:

* the greedy path: one candidate, whose every token's log-probability came back: exact;
* every other candidate: exact up to where it leaves the path; there, its token's
  log-probability is in the step's top list (else at most the list's lowest), and what follows
  can only lower it (log-probabilities are <= 0). So it gets an *upper bound*
  (:func:`read_trie`).

A candidate whose bound is below the best exact score cannot win. One whose bound reaches it is
read on by a request of its own, which starts where the trie left it (its tokens whose
log-probabilities the trie returned go with the prompt) and is followed by a
:class:`LoserBound`: the request is stopped as soon as its running sum falls below the best
exact score, since what follows can only lower it further. A 135M model often puts a loser's
first token close to the winner's and its later tokens far below, so a bound from the trie
alone reaches the best for most candidates, while their requests are stopped a few tokens in.
So the winner is the same as scoring each candidate exactly; the losers' scores are upper
bounds.

"Exact" holds for one state of the server's prompt cache. llama.cpp computes a prompt's KV
values in different batches when it prefills the prompt afresh and when it reuses them from an
earlier request, and its quantized kernels round differently by batch: on SmolLM2-135M Q4_1 the
same candidate scored -9.307 nat on a cold server and -9.452 on every request after (identical
to three decimals from then on, trie or one request per candidate); on another prompt the
drift was 0.305 nat. On a server with several slots, requests decoding at the same time share
a batch, and a score moves with what else is in it (0.13 nat seen). A bound is therefore read
with a margin (:meth:`TrieReading.unresolved`) larger than that drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["BestScore", "LoserBound", "TrieReading", "read_trie", "trie_depth", "trie_gbnf"]


@dataclass(slots=True)
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    end: bool = False


def _trie(tails: Sequence[Sequence[int]]) -> _Node:
    root = _Node()
    for tail in tails:
        if not tail:
            raise ValueError("a candidate needs at least one token of its own")
        node = root
        for token in tail:
            node = node.children.setdefault(int(token), _Node())
        node.end = True
    return root


def _expr(node: _Node) -> str:
    alternatives = []
    for token, child in node.children.items():
        rest = _expr(child)
        alternatives.append(f"<[{token}]>" + (f" {rest}" if rest else ""))
    if not alternatives:
        return ""
    body = alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"
    # A candidate that ends where another goes on: stopping here is allowed too.
    return f"({body})?" if node.end else body


def trie_gbnf(tails: Sequence[Sequence[int]]) -> str:
    """A GBNF grammar accepting exactly the token sequences ``tails``, as a trie."""
    if not tails:
        raise ValueError("a trie grammar needs at least one candidate")
    return f"root ::= {_expr(_trie(tails))}\n"


def trie_depth(tails: Sequence[Sequence[int]]) -> int:
    """The longest candidate: the most steps one trie request decodes."""
    return max(len(t) for t in tails)


@dataclass(frozen=True, slots=True)
class TrieReading:
    """Each candidate's score from one trie request, and whether it is exact."""

    scores: tuple[float, ...]
    exact: tuple[bool, ...]
    known: tuple[int, ...]
    """Per candidate: how many of its leading tokens have an exact log-probability."""
    known_scores: tuple[float, ...]
    """Per candidate: the sum of those exact log-probabilities."""

    def unresolved(self, margin: float = 0.0) -> list[int]:
        """Candidates whose upper bound comes within ``margin`` of the best exact score.

        They could still win. ``margin`` (nats) covers what the server's own scores drift by
        between requests, so a loser within that drift is scored exactly rather than ruled out.
        """
        if margin < 0:
            raise ValueError("margin must be >= 0")
        known = [s for s, e in zip(self.scores, self.exact, strict=True) if e]
        best = max(known) if known else -float("inf")
        return [
            i
            for i, (s, e) in enumerate(zip(self.scores, self.exact, strict=True))
            if not e and s >= best - margin
        ]


def read_trie(
    tails: Sequence[Sequence[int]],
    path: Sequence[int],
    logprobs: Sequence[float],
    tops: Sequence[Mapping[int, float]],
) -> TrieReading:
    """Scores of ``tails`` from the greedy ``path``, its ``logprobs`` and each step's ``tops``."""
    if len(logprobs) != len(path):
        raise ValueError(f"{len(logprobs)} log-probabilities for {len(path)} tokens")
    scores: list[float] = []
    exact: list[bool] = []
    known: list[int] = []
    known_scores: list[float] = []
    for tail in tails:
        total, count, bound = 0.0, 0, 0.0
        for i, token in enumerate(tail):
            if i < len(path) and path[i] == token:
                total += logprobs[i]
                count += 1
                continue
            top = tops[i] if i < len(tops) and i < len(path) else {}
            if int(token) in top:
                # Its step's list has it: this token's log-probability is exact too.
                total += top[int(token)]
                count += 1
            elif top:
                # Not in the list: at most the lowest listed (the list is the top of the step).
                bound = min(top.values())
            break
        scores.append(total + bound)
        exact.append(count == len(tail))
        known.append(count)
        known_scores.append(total)
    return TrieReading(tuple(scores), tuple(exact), tuple(known), tuple(known_scores))


@dataclass(slots=True)
class BestScore:
    """The best exact score found so far, shared by the requests reading losers on."""

    value: float

    def raise_to(self, score: float) -> None:
        """A candidate scored exactly: the best is now at least ``score``."""
        self.value = max(self.value, score)


class LoserBound:
    """Follows one loser's forced tokens as they stream in; says when it cannot win.

    ``known`` is the exact sum of the tokens the trie already read; each streamed
    log-probability adds to it. The stream has told enough when all ``length`` tokens came
    (the score is exact, and may raise ``best``) or when the running sum fell more than
    ``margin`` below ``best`` (log-probabilities are <= 0: the sum only falls from there, so
    the loser is ruled out and its score is an upper bound).
    """

    __slots__ = ("_best", "_length", "_margin", "_seen", "score")

    def __init__(self, *, known: float, length: int, best: BestScore, margin: float) -> None:
        if length < 1:
            raise ValueError("a loser read on needs at least one token to read")
        self.score = known
        self._length = length
        self._best = best
        self._margin = margin
        self._seen = 0

    @property
    def exact(self) -> bool:
        """True once every token's log-probability was read."""
        return self._seen >= self._length

    def enough(self, text: str, logprobs: Sequence[float]) -> bool:
        """Read one chunk's log-probabilities; True once the loser is scored or ruled out."""
        del text  # a score reads numbers, not text
        for lp in logprobs[: self._length - self._seen]:
            self.score += lp
            self._seen += 1
        if self.exact:
            self._best.raise_to(self.score)
            return True
        return self.score < self._best.value - self._margin
