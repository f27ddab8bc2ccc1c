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

A candidate whose bound is below the best exact score cannot win; one whose bound reaches it is
scored exactly by a request of its own (rare: the greedy path is usually the best). So the
winner is the same as scoring each candidate exactly; the losers' scores are upper bounds.

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

__all__ = ["TrieReading", "read_trie", "trie_depth", "trie_gbnf"]


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
    for tail in tails:
        total, done = 0.0, True
        for i, token in enumerate(tail):
            if i < len(path) and path[i] == token:
                total += logprobs[i]
                continue
            done = False
            top = tops[i] if i < len(tops) else {}
            if i < len(path) and top:
                # Not in the list: at most the lowest listed (the list is the top of the step).
                total += top.get(int(token), min(top.values()))
            break
        scores.append(total)
        exact.append(done)
    return TrieReading(tuple(scores), tuple(exact))
