"""Forward passes on one causal LM, with the deadline in charge.

What makes a live action cheap is here:

* **prefix reuse** -- the KV cache of a prompt prefix (system prompt + state) is computed once,
  kept in a small LRU, and every continuation (a batch of branches, candidates to score, a live
  fallback) starts from it, so a call pays only for its own tokens;
* **jump-forward** -- tokens the grammar forces (braces, keys, quotes, the rest of an enum value)
  are fed in the same forward pass instead of one decode step each;
* **deadline stops** -- a prefill cannot be interrupted, so a call that is predicted not to fit is
  not started, and a started one stops *before* the pass that would overshoot (predicted from
  the passes measured so far) or at once when its cancel signal is set.

Batched rows share the prefix; their own tokens are left-padded *after* it (``[prefix][pad][row
tokens]``), with explicit position ids, so every row's last real token is the last column.
Later passes feed each row all its pending tokens (one sampled token plus the forced ones),
padding the shorter rows at the end; padding is masked out of attention.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache

from ._backend import GenerationStatus
from ._clock import Clock, Pass, PassKind
from ._decode_run import DecodeResult, RowResult, Run, ScoreResult, split_candidates
from ._latency import LatencyModel

if TYPE_CHECKING:
    from .grammar._protocol import GrammarCompiler, GrammarMatcher

__all__ = ["Decoder"]


def _inference() -> Any:
    return torch.inference_mode()


class Cancelled(Exception):
    pass


class DeadlineStop(Exception):
    pass


class _Prefix:
    """KV tensors of a computed prefix; never mutated (every call copies them into its cache)."""

    __slots__ = ("kv", "length")

    def __init__(self, kv: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> None:
        self.kv = kv
        self.length = length


class Decoder:
    """Runs prefix-cached, grammar-constrained, deadline-aware passes on one model.

    Not thread-safe: one worker thread owns a decoder (the backend guarantees it).
    """

    def __init__(
        self,
        *,
        model: Any,
        pad_id: int,
        eos_ids: Sequence[int],
        latency: LatencyModel,
        clock: Clock,
        prefix_cache_size: int = 8,
    ) -> None:
        self._model = model
        self._pad = pad_id
        self._eos = frozenset(eos_ids)
        self._latency = latency
        self._clock = clock
        self._prefixes: OrderedDict[tuple[int, ...], _Prefix] = OrderedDict()
        self._prefix_cap = prefix_cache_size
        self.prefix_hits = 0
        self.prefix_misses = 0

    @property
    def clock(self) -> Clock:
        """The clock passes are timed (or charged) on and deadlines are read on."""
        return self._clock

    def use_clock(self, clock: Clock) -> None:
        """Read time from ``clock`` from now on (the backend's, once it starts on a loop)."""
        self._clock = clock

    @property
    def device(self) -> torch.device:
        """Where the model's weights live."""
        dev: torch.device = self._model.device
        return dev

    # -- prefix cache -------------------------------------------------------------------------

    def _prefix(
        self, ids: Sequence[int], deadline: float, cancel: threading.Event | None
    ) -> _Prefix:
        key = tuple(ids)
        hit = self._prefixes.get(key)
        if hit is not None:
            self._prefixes.move_to_end(key)
            self.prefix_hits += 1
            return hit
        self.prefix_misses += 1
        self._check(deadline, cancel, self._latency.prefill(len(key)).p95)
        inp = torch.tensor([key], device=self.device)
        out, seconds = self._clock.timed(
            lambda: self._model(input_ids=inp, use_cache=True, logits_to_keep=1),
            Pass(PassKind.PREFILL, len(key)),
        )
        cache = out.cache
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        self._latency.observe_prefill(len(key), seconds)
        entry = _Prefix(kv, len(key))
        self._prefixes[key] = entry
        while len(self._prefixes) > self._prefix_cap:
            self._prefixes.popitem(last=False)
        return entry

    def _cache_for(self, prefix: _Prefix | None, rows: int) -> Any:
        if prefix is None:
            return DynamicCache(config=self._model.config)
        data = [(k.expand(rows, *k.shape[1:]), v.expand(rows, *v.shape[1:])) for k, v in prefix.kv]
        return DynamicCache(ddp_cache_data=data, config=self._model.config)

    def clear_prefixes(self) -> None:
        """Forget every cached prefix."""
        self._prefixes.clear()

    # -- deadline and cancel ------------------------------------------------------------------

    def _check(self, deadline: float, cancel: threading.Event | None, predicted: float) -> None:
        if cancel is not None and cancel.is_set():
            raise Cancelled
        if self._clock.now() + predicted > deadline:
            raise DeadlineStop

    # -- decoding -----------------------------------------------------------------------------

    def decode(
        self,
        prefix_ids: Sequence[int],
        rows: Sequence[Sequence[int]],
        *,
        deadline: float,
        cancel: threading.Event | None = None,
        compiler: GrammarCompiler | None = None,
        compiled: object | None = None,
        max_new_tokens: int = 64,
        reuse_prefix: bool = True,
        jump_forward: bool = True,
        stop_at_eos: bool = True,
    ) -> DecodeResult:
        """Greedy-decode one continuation per row after a shared prefix.

        (Long on purpose, with :meth:`_run`: one tight loop per token, where a call per step
        would cost attribute lookups on the critical path.)

        With ``compiler`` and ``compiled`` the output is constrained to the grammar; without, it
        stops at EOS (or, with ``stop_at_eos=False``, runs to ``max_new_tokens``: the
        benchmark's fixed-length outputs). Stops are per row; the call returns when every row
        has stopped.
        """
        started = self._clock.now()
        results = tuple(RowResult() for _ in rows)
        matchers: list[GrammarMatcher | None] = [
            compiler.matcher(compiled) if compiler is not None else None for _ in rows
        ]
        # The grammar's opening (e.g. `{"a":"`) is forced: feed it with the prompt for free.
        own: list[list[int]] = []
        for row, res, m in zip(rows, results, matchers, strict=True):
            forced = m.jump_forward() if (m is not None and jump_forward) else []
            res.tokens.extend(forced)
            res.forced += len(forced)
            own.append([*row, *forced])
        run = Run(
            results=results,
            matchers=matchers,
            max_new_tokens=max_new_tokens,
            eos=self._eos if stop_at_eos else frozenset(),
        )
        try:
            with _inference():
                self._run(
                    prefix_ids, own, run, deadline, cancel, compiler, reuse_prefix, jump_forward
                )
        except Cancelled:
            run.stop_open(GenerationStatus.CANCELLED)
        except DeadlineStop:
            run.stop_open(
                GenerationStatus.DEADLINE if run.prefilled else GenerationStatus.NOT_STARTED
            )
        # A constrained action that the prefill's logits and the grammar's forced tokens
        # complete needed no decode pass: 0 is an observation, not "nothing seen" (which keeps
        # typical_steps at its default 8, so every live call is predicted 8 passes too long and
        # nothing that runs ever corrects it). Unconstrained, 0 passes is an EOS at once.
        done = any(r.reason is GenerationStatus.DONE for r in results)
        if done and (run.passes or compiler is not None):
            self._latency.observe_action(run.passes)
        return DecodeResult(
            rows=results,
            prompt_tokens=len(prefix_ids) + max(len(r) for r in rows),
            prefill_tokens=run.prefill_tokens,
            passes=run.passes,
            started_at=started,
            first_token_at=run.first_token_at,
            finished_at=self._clock.now(),
        )

    def _run(
        self,
        prefix_ids: Sequence[int],
        own: list[list[int]],
        run: Run,
        deadline: float,
        cancel: threading.Event | None,
        compiler: GrammarCompiler | None,
        reuse_prefix: bool,
        jump_forward: bool,
    ) -> None:
        n = len(own)
        lead: list[int] = [] if reuse_prefix else list(prefix_ids)
        width = max(len(t) for t in own) + len(lead)
        # Not started unless the prefill surely fits and the whole call is expected to.
        steps = min(self._latency.typical_steps(), run.max_new_tokens)
        expected = self._latency.call(n * width, steps, rows=n)
        self._check(deadline, cancel, max(self._latency.prefill(n * width).p95, expected.p50))
        prefix = None
        if reuse_prefix and prefix_ids:
            misses = self.prefix_misses
            prefix = self._prefix(prefix_ids, deadline, cancel)
            if self.prefix_misses != misses:
                run.prefill_tokens += prefix.length
            self._check(deadline, cancel, self._latency.prefill(n * width).p95)
        cache = self._cache_for(prefix, n)
        base = prefix.length if prefix is not None else 0
        ids = torch.full((n, width), self._pad, dtype=torch.long)
        attn = torch.zeros((n, base + width), dtype=torch.long)
        pos = torch.ones((n, width), dtype=torch.long)
        next_pos: list[int] = []
        for i, toks in enumerate([*lead, *t] for t in own):
            start = width - len(toks)
            ids[i, start:] = torch.tensor(toks)
            attn[i, :base] = 1
            attn[i, base + start :] = 1
            pos[i, start:] = torch.arange(base, base + len(toks))
            next_pos.append(base + len(toks))
        logits, cache = self._forward(ids, attn, pos, cache, keep=1, prefill=True)
        run.prefilled = True
        run.prefill_tokens += n * width
        logits = logits[:, -1, :]
        active = list(range(n))  # row ids still decoding, in batch order
        bitmask = compiler.allocate_mask(n) if compiler is not None else None
        while True:
            if bitmask is not None and compiler is not None:
                for b, r in enumerate(active):
                    m = run.matchers[r]
                    assert m is not None
                    m.fill_mask(bitmask, b)
                compiler.apply_mask(logits, bitmask[: len(active)])
            choice = logits.argmax(dim=-1).tolist()
            feed = {
                r: t
                for r, tok in zip(active, choice, strict=True)
                if (t := run.advance(r, int(tok), jump_forward))
            }
            if run.first_token_at is None:
                run.first_token_at = self._clock.now()
            keep = [b for b, r in enumerate(active) if r in feed]
            if not keep:
                return
            if len(keep) < len(active):
                cache.batch_select_indices(torch.tensor(keep, device=self.device))
                attn = attn[keep]
                next_pos = [next_pos[b] for b in keep]
                active = [active[b] for b in keep]
            k = max(len(feed[r]) for r in active)
            self._check(deadline, cancel, self._latency.step(len(active) * k).p95)
            step_ids = torch.full((len(active), k), self._pad, dtype=torch.long)
            step_pos = torch.ones((len(active), k), dtype=torch.long)
            step_attn = torch.zeros((len(active), k), dtype=torch.long)
            last = []
            for b, r in enumerate(active):
                toks = feed[r]
                step_ids[b, : len(toks)] = torch.tensor(toks)
                step_pos[b, : len(toks)] = torch.arange(next_pos[b], next_pos[b] + len(toks))
                step_attn[b, : len(toks)] = 1
                last.append(len(toks) - 1)
                next_pos[b] += len(toks)
            attn = torch.cat([attn, step_attn], dim=1)
            out, cache = self._forward(step_ids, attn, step_pos, cache, keep=k, prefill=False)
            run.passes += 1
            logits = out[torch.arange(len(active)), torch.tensor(last), :]

    def score(
        self,
        prefix_ids: Sequence[int],
        own_ids: Sequence[int],
        candidates: Sequence[Sequence[int]],
        *,
        deadline: float,
        cancel: threading.Event | None = None,
    ) -> ScoreResult:
        """Log-likelihood of each candidate continuation, all candidates in one batched pass.

        The tokens every candidate shares (for compact JSON, ``{"a":"`` and the like) are fed
        once with the call's own tokens; then one pass over all candidates' distinct tails.
        """
        started = self._clock.now()
        shared, tails = split_candidates(candidates)
        head = [*own_ids, *shared]
        progress = [GenerationStatus.NOT_STARTED]
        scores: list[float] | None = None
        try:
            with _inference():
                scores = self._score_passes(prefix_ids, head, tails, deadline, cancel, progress)
            progress[0] = GenerationStatus.DONE
        except Cancelled:
            progress[0] = GenerationStatus.CANCELLED
        except DeadlineStop:
            pass
        return ScoreResult(
            scores=tuple(scores) if scores is not None else None,
            reason=progress[0],
            started_at=started,
            finished_at=self._clock.now(),
        )

    def _score_passes(
        self,
        prefix_ids: Sequence[int],
        head: list[int],
        tails: list[list[int]],
        deadline: float,
        cancel: threading.Event | None,
        progress: list[GenerationStatus],
    ) -> list[float]:
        """One forward pass over ``head`` and every tail, as a tree (one mask, built inline).

        The tails are laid side by side after the head in a single sequence; a 4-D attention
        mask lets each tail see the prefix, the head and itself only, and position ids restart
        after the head for each tail. One pass scores all candidates.
        """
        tail_tokens = sum(len(t) for t in tails)
        self._check(deadline, cancel, self._latency.prefill(len(head) + tail_tokens).p95)
        prefix = self._prefix(prefix_ids, deadline, cancel) if prefix_ids else None
        base = prefix.length if prefix is not None else 0
        h = len(head)
        q = h + tail_tokens
        allow = torch.zeros((q, base + q), dtype=torch.bool)
        allow[:, :base] = True
        allow[:h, base : base + h] = torch.ones((h, h), dtype=torch.bool).tril()
        positions = list(range(base, base + h))
        seq = list(head)
        starts = []
        for t in tails:
            off = len(seq)
            starts.append(off)
            n = len(t)
            allow[off : off + n, base : base + h] = True
            allow[off : off + n, base + off : base + off + n] = torch.ones(
                (n, n), dtype=torch.bool
            ).tril()
            positions.extend(range(base + h, base + h + n))
            seq.extend(t)
        progress[0] = GenerationStatus.DEADLINE  # from here on, a stop is a cut, not a refusal
        # Token t[0] is predicted by the head's last position, t[j] by the tail's (j-1)th: only
        # those rows of the vocabulary projection are computed.
        wanted = sorted(
            {h - 1}
            | {off + j - 1 for t, off in zip(tails, starts, strict=True) for j in range(1, len(t))}
        )
        row = {pos: i for i, pos in enumerate(wanted)}
        logits, _ = self._forward(
            torch.tensor([seq]),
            allow[None, None],
            torch.tensor([positions]),
            self._cache_for(prefix, 1),
            keep=torch.tensor(wanted),
            prefill=True,
        )
        lp = torch.log_softmax(logits[0], dim=-1)
        scores = []
        for t, off in zip(tails, starts, strict=True):
            total = float(lp[row[h - 1], t[0]])
            total += sum(float(lp[row[off + j - 1], t[j]]) for j in range(1, len(t)))
            scores.append(total)
        return scores

    def _forward(
        self,
        ids: torch.Tensor,
        attn: torch.Tensor,
        pos: torch.Tensor,
        cache: Any,
        *,
        keep: int | torch.Tensor,
        prefill: bool,
    ) -> tuple[torch.Tensor, Any]:
        """One forward pass, timed (or charged) by the clock; its time feeds the latency model."""
        n = int(ids.numel())
        shape = Pass(PassKind.PREFILL if prefill else PassKind.STEP, n, int(ids.shape[0]))

        def run() -> tuple[torch.Tensor, Any]:
            out = self._model(
                input_ids=ids.to(self.device),
                attention_mask=attn.to(self.device),
                position_ids=pos.to(self.device),
                cache=cache,
                use_cache=True,
                logits_to_keep=keep,
            )
            dev = self.device.type
            return (out.logits.float().cpu() if dev != "cpu" else out.logits.float()), out.cache

        (logits, new_cache), elapsed = self._clock.timed(run, shape)
        if prefill:
            self._latency.observe_prefill(n, elapsed)
        else:
            self._latency.observe_step(n, elapsed)
        return logits, new_cache
