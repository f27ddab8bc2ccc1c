"""TransformersBackend: the shipped :class:`ModelBackend` on a local transformers model.

One :class:`ModelWorker` thread owns the model, so calls run one at a time, in order.
Awaiting a call never blocks the event loop; cancelling the awaiting task sets the call's
cancel signal, which the worker honours before its next forward pass. Every pass reads (or is
charged on) the backend's :class:`Clock`: the clock of the loop it was started on, unless one
is given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

from pydantic import BaseModel

from forethought.policies import (
    ActionForm,
    ActionSchema,
    ConfigError,
    DeadlinePassed,
    InvalidAction,
    NotStarted,
    PromptTooLong,
)

from .._backend import CancelSignal, DecodeOptions, Generation, GenerationStatus, Scores
from .._clock import Clock, LoopClock, MonotonicClock
from .._decode_run import DecodeResult, RowResult
from .._decoding import Decoder
from .._latency import LatencyModel
from .._model_load import LoadedModel, load_model
from .._model_source import DEFAULT_MODEL, resolve_model
from .._prompt import Prompt, PromptEncoder
from .._threads import ThreadChoice, choose_threads, pin_threads
from .._warm_record import WarmRecord, machine_key, still_as_fast
from .._worker import ModelWorker
from ..grammar._bounds import bounded_schema, max_output_chars
from ..grammar._compilers import make_grammar_compiler
from ..grammar._protocol import GRAMMARS, GrammarCompiler

__all__ = ["TransformersBackend"]

_T = TypeVar("_T")
_log = logging.getLogger("forethought.model")


class TransformersBackend:
    """A local Hugging Face model (alias, directory, GGUF or hub id) as a ModelBackend.

    Construction only validates; ``async with`` (or :meth:`load`, for scripts) loads the model,
    builds the grammar compiler and warms the latency model up.

    Args:
        model: ``smollm2-135m`` (the embedded default), a directory, a ``.gguf`` file, or a
            Hugging Face id already in the local cache.
        device: ``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto`` (bf16 on CUDA that supports it, else fp32), or a dtype name.
        grammar: the grammar, ``llguidance`` (default) or ``xgrammar``.
        clock: the clock deadlines are on (default: the loop's that starts the backend, or
            monotonic time for a backend loaded without a loop).
        prefix_cache_size: how many prompt prefixes keep their KV cache.
        latency: a latency model to use (default: a fresh one, seeded by the warm-up).
        options: how to decode (default: compact, constrained, prefix reuse, jump-forward).
        cache_dir: where converted weights are cached (default: ``$FORETHOUGHT_CACHE`` or
            ``~/.cache/forethought``).
        threads: torch's threads on the CPU (default: chosen at load, see
            :mod:`forethought.models._threads`). A virtual-clock replay gives 1: a pass's
            floating-point results, and so the tokens it picks, depend on the thread count,
            and the replay's decisions must not depend on the machine it runs on.

    """

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        device: str = "auto",
        dtype: str = "auto",
        grammar: str = "llguidance",
        clock: Clock | None = None,
        prefix_cache_size: int = 8,
        latency: LatencyModel | None = None,
        options: DecodeOptions | None = None,
        cache_dir: Path | None = None,
        threads: int | None = None,
    ) -> None:
        if grammar not in GRAMMARS:
            raise ConfigError("grammar", grammar, f"choose one of {GRAMMARS}")
        if prefix_cache_size < 1:
            raise ConfigError("prefix_cache_size", prefix_cache_size, "must be at least 1")
        if threads is not None and threads < 1:
            raise ConfigError("threads", threads, "give at least 1, or None to choose at load")
        self._given_threads = threads
        self._source = resolve_model(model)
        self._device_name = device
        self._dtype = dtype
        self._grammar_name = grammar
        self._clock = clock
        self._given_clock = clock
        self._prefix_cache_size = prefix_cache_size
        self._latency = latency or LatencyModel()
        self._options = options or DecodeOptions()
        self._cache_dir = cache_dir
        self._loaded: LoadedModel | None = None
        self.threads: ThreadChoice | None = None
        """The torch thread count chosen at load (CPU only), and the timings that chose it."""
        self._decoder: Decoder | None = None
        self._grammar_compiler: GrammarCompiler | None = None
        self._prompts: PromptEncoder | None = None
        self._worker = ModelWorker()
        self.calls = 0
        self._output_caps: dict[tuple[str, ActionForm], int] = {}

    def sharing(
        self,
        *,
        clock: Clock | None = None,
        latency: LatencyModel | None = None,
        options: DecodeOptions | None = None,
    ) -> TransformersBackend:
        """A new backend on this one's loaded weights, grammar compiler and tokenizer.

        Its state is its own: an empty prefix cache, its own latency model, clock and options.
        The simulator gives each strategy one, so no strategy inherits another's warm cache.
        """
        loaded = self.loaded
        twin = TransformersBackend(
            model=self._source.location,
            device=self._device_name,
            dtype=self._dtype,
            grammar=self._grammar_name,
            clock=clock,
            prefix_cache_size=self._prefix_cache_size,
            latency=latency,
            options=options or self._options,
        )
        twin._source = self._source
        twin._grammar_compiler, twin._prompts = self._grammar_compiler, self._prompts
        twin._adopt(loaded)
        return twin

    # -- lifecycle ----------------------------------------------------------------------------

    def load(self, *, warm_up: bool = True) -> LoadedModel:
        """Load the model (blocking; converts and caches a GGUF the first time)."""
        if self._loaded is None:
            loaded = load_model(
                self._source, device=self._device_name, dtype=self._dtype, cache_dir=self._cache_dir
            )
            self._grammar_compiler = make_grammar_compiler(
                self._grammar_name, loaded.tokenizer, _vocab(loaded)
            )
            self._prompts = PromptEncoder(loaded.tokenizer)
            if loaded.device == "cpu" and self._given_threads is not None:
                # Before the warm record is read: its key names the thread count.
                self.threads = pin_threads(self._given_threads)
            if warm_up and self._latency.observed == 0 and self._replay_warm_up(loaded):
                return self.loaded
            if loaded.device == "cpu" and self._given_threads is None:
                self.threads = choose_threads(lambda deadline: _small_call(loaded, deadline))
            self._adopt(loaded)
            if warm_up:
                fresh = self._latency.observed == 0
                self.warm_up()
                if fresh and (self.threads is None or self.threads.kept_all):
                    self._keep_warm_up(loaded)
        return self.loaded

    def _replay_warm_up(self, loaded: LoadedModel) -> bool:
        """Seed the latency model from this machine's last warm-up, if it is still as fast.

        See :mod:`forethought.models._warm_record`: one check call instead of the thread
        choice's and the warm-up's. False (nothing changed) when there is no record for this
        machine, model and thread count, or the check call was too slow for it.
        """
        record = WarmRecord.under(self._cache_dir)
        kept = record.read(machine_key(loaded))
        if kept is None:
            return False
        history, check_s = kept
        if not still_as_fast(lambda deadline: _small_call(loaded, deadline), check_s):
            _log.info("slower than the last warm-up here: measuring the model again")
            return False
        self._adopt(loaded)
        self._latency.replay(history)
        return True

    def _keep_warm_up(self, loaded: LoadedModel) -> None:
        """Keep the warm-up just run, with a check call's time, for the next load here."""
        start = time.monotonic()
        _small_call(loaded, math.inf)
        check_s = time.monotonic() - start
        WarmRecord.under(self._cache_dir).write(
            machine_key(loaded), self._latency.history(), check_s
        )

    def _adopt(self, loaded: LoadedModel) -> None:
        tok = loaded.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos = [
            t
            for t in (
                tok.eos_token_id,
                getattr(loaded.model.generation_config, "eos_token_id", None),
            )
            if t is not None
        ]
        self._decoder = Decoder(
            model=loaded.model,
            pad_id=int(pad if pad is not None else 0),
            eos_ids=[e for t in eos for e in (t if isinstance(t, list) else [t])],
            latency=self._latency,
            clock=self._clock or MonotonicClock(),
            prefix_cache_size=self._prefix_cache_size,
        )
        self._loaded = loaded

    def warm_up(self) -> None:
        """Seed the latency model with prefills and decode passes of a few sizes."""
        decoder = self.decoder
        rng = random.Random(0)
        vocab = min(self.loaded.tokenizer.vocab_size, 1000)
        for length, rows in ((16, 1), (64, 1), (8, 4), (128, 1), (24, 16), (8, 8)):
            batch = [[rng.randrange(5, vocab) for _ in range(length)] for _ in range(rows)]
            decoder.decode([], batch, deadline=math.inf, max_new_tokens=4, reuse_prefix=False)

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        # Each start binds to the loop that starts it (unless a clock was given): a backend
        # kept across loops must never read a finished loop's time.
        self._clock = self._given_clock or LoopClock(loop)
        if self._loaded is None:
            await loop.run_in_executor(self._worker.pool(), self.load)
        self.decoder.use_clock(self._clock)
        self._worker.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._worker.stop()
        # The loop's clock is bound only while started: afterwards, sync use (scripts, benches)
        # reads the given clock or monotonic time, never the time of a loop that has finished.
        self._clock = self._given_clock
        self.decoder.use_clock(self._given_clock or MonotonicClock())

    def close(self) -> None:
        """Stop the worker thread (the model stays loaded for sync use)."""
        self._worker.close()

    # -- properties ---------------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        """The model's name as given (alias, path or id)."""
        return self._source.name

    @property
    def latency(self) -> LatencyModel:
        """The latency model this backend feeds."""
        return self._latency

    @property
    def options(self) -> DecodeOptions:
        """How this backend decodes."""
        return self._options

    @property
    def loaded(self) -> LoadedModel:
        """The loaded model; raises NotStarted if it has not been loaded."""
        if self._loaded is None:
            raise NotStarted("TransformersBackend", "use `async with` (or call load())")
        return self._loaded

    @property
    def decoder(self) -> Decoder:
        """The decoder (for benchmarks and tests that need the low-level passes)."""
        self.loaded  # noqa: B018 - raises when not loaded
        assert self._decoder is not None
        return self._decoder

    @property
    def prompts(self) -> PromptEncoder:
        """The prompt encoder of this model's tokenizer."""
        self.loaded  # noqa: B018
        assert self._prompts is not None
        return self._prompts

    @property
    def grammar_compiler(self) -> GrammarCompiler:
        """The grammar compiler in use (of the ``grammar`` setting: llguidance or xgrammar)."""
        self.loaded  # noqa: B018
        assert self._grammar_compiler is not None
        return self._grammar_compiler

    def stats(self) -> dict[str, Any]:
        """Counters: calls, prefix-cache hits and misses, grammar compilations."""
        d = self.decoder
        return {
            "calls": self.calls,
            "prefix_hits": d.prefix_hits,
            "prefix_misses": d.prefix_misses,
            "grammar_compiles": getattr(self.grammar_compiler, "compiles", None),
        }

    # -- calls --------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[], _T], cancel: CancelSignal) -> _T:
        if self._clock is None:
            raise NotStarted("TransformersBackend")
        return await self._worker.call(fn, cancel, self._clock)

    def _admit(self, deadline: float, prompt_tokens: int, max_new_tokens: int) -> None:
        now = self.decoder.clock.now()
        if now >= deadline:
            raise DeadlinePassed(deadline, now)
        limit = int(getattr(self.loaded.model.config, "max_position_embeddings", 2048))
        if prompt_tokens + max_new_tokens > limit:
            raise PromptTooLong(prompt_tokens + max_new_tokens, limit)

    async def prepare(self, schema: ActionSchema) -> None:
        """Get ready for ``schema`` off any event's path: compile its grammar, then calibrate.

        Calibration generates one action, so the latency model knows how many decode passes an
        action of this schema takes before the first event asks whether one fits (without it
        the fit checks assume 8, and a caller that never starts a call never learns better).
        """
        cancel = CancelSignal()
        await self._run(lambda: self.calibrate_sync(schema), cancel)

    def prepare_sync(self, schema: ActionSchema) -> None:
        """Compile the grammar of ``schema`` in this backend's form (blocking)."""
        self._compile(schema)

    def calibrate_sync(self, schema: ActionSchema) -> None:
        """Compile, then generate one action for a neutral prompt (blocking)."""
        self._compile(schema)
        self.generate_sync("", ["calibration"], schema, deadline=math.inf)

    def max_output_tokens(self, schema: ActionSchema) -> int:
        """The most tokens an action of ``schema`` can take under its bounded grammar."""
        form = self._options.form
        key = (schema.fingerprint, form)
        cap = self._output_caps.get(key)
        if cap is None:
            bounds = self.grammar_compiler.bounds
            chars = max_output_chars(bounded_schema(schema.json_schema(form), bounds), bounds)
            cap = self._output_caps[key] = chars if chars is not None else 1 << 20
        return cap

    def _compile(self, schema: ActionSchema) -> object:
        form = self._options.form
        return self.grammar_compiler.compile(
            schema.json_schema(form), spaced=form is ActionForm.VERBOSE
        )

    def _to_generation(
        self, schema: ActionSchema, result: DecodeResult, row: RowResult, *, share: int = 1
    ) -> Generation:
        text = self.loaded.tokenizer.decode(row.tokens, skip_special_tokens=True)
        action = None
        assert row.reason is not None
        status = row.reason
        if status is GenerationStatus.DONE:
            try:
                action = schema.parse(text, self._options.form)
            except InvalidAction:
                status = GenerationStatus.INVALID
        return Generation(
            status=status,
            action=action,
            text=text,
            prompt_tokens=result.prompt_tokens,
            prefill_tokens=result.prefill_tokens // share,
            output_tokens=len(row.tokens),
            forced_tokens=row.forced,
            started_at=result.started_at,
            first_token_at=result.first_token_at,
            finished_at=result.finished_at,
        )

    def generate_sync(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """Blocking :meth:`generate`."""
        if not events:
            return []
        opts = self._options
        encoded = [self.prompts.encode(Prompt(context, e), schema, opts.form) for e in events]
        prefix = encoded[0][0]
        own = [o for _, o in encoded]
        if opts.constrained:
            # Never more tokens than the bounded grammar can spell (each is >= 1 character).
            max_new_tokens = min(max_new_tokens, self.max_output_tokens(schema))
        self._admit(deadline, len(prefix) + max(len(o) for o in own), max_new_tokens)
        self.calls += 1
        result = self.decoder.decode(
            prefix,
            own,
            deadline=deadline,
            cancel=(cancel or CancelSignal()).event,
            compiler=self.grammar_compiler if opts.constrained else None,
            compiled=self._compile(schema) if opts.constrained else None,
            max_new_tokens=max_new_tokens,
            reuse_prefix=opts.reuse_prefix,
            jump_forward=opts.jump_forward,
        )
        return [self._to_generation(schema, result, row, share=len(own)) for row in result.rows]

    def generate_each_sync(
        self,
        prompts: Sequence[Prompt],
        schema: ActionSchema,
        *,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """One action per prompt, each on a context of its own, decoded together in one batch.

        No prefix is shared or cached: every row prefills its whole prompt, as a call of its
        own without prefix reuse would (the simulator's naive caller decodes its distinct
        prompts this way, once, then charges each replay what one call per prompt costs).
        Each generation's ``prompt_tokens`` and ``prefill_tokens`` are its own row's.
        """
        if not prompts:
            return []
        opts = self._options
        rows = [[*p, *o] for p, o in (self.prompts.encode(q, schema, opts.form) for q in prompts)]
        if opts.constrained:
            max_new_tokens = min(max_new_tokens, self.max_output_tokens(schema))
        self._admit(math.inf, max(len(r) for r in rows), max_new_tokens)
        self.calls += 1
        result = self.decoder.decode(
            [],
            rows,
            deadline=math.inf,
            compiler=self.grammar_compiler if opts.constrained else None,
            compiled=self._compile(schema) if opts.constrained else None,
            max_new_tokens=max_new_tokens,
            reuse_prefix=False,
            jump_forward=opts.jump_forward,
        )
        return [
            dataclasses.replace(
                self._to_generation(schema, result, row),
                prompt_tokens=len(ids),
                prefill_tokens=len(ids),
            )
            for ids, row in zip(rows, result.rows, strict=True)
        ]

    async def generate(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """One action per event on one shared, cached context, in one batch."""
        cancel = cancel or CancelSignal()
        return await self._run(
            lambda: self.generate_sync(
                context,
                events,
                schema,
                deadline=deadline,
                cancel=cancel,
                max_new_tokens=max_new_tokens,
            ),
            cancel,
        )

    def score_sync(
        self,
        context: str,
        event: str,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """Blocking :meth:`score`."""
        if not candidates:
            raise ConfigError("candidates", list(candidates), "at least one candidate is needed")
        prefix, own = self.prompts.encode(Prompt(context, event), schema, ActionForm.COMPACT)
        texts = [schema.compact(schema.validate(c)) for c in candidates]
        ids = [self.prompts.encode_action(t) for t in texts]
        self._admit(deadline, len(prefix) + len(own) + max(len(i) for i in ids), 0)
        self.calls += 1
        result = self.decoder.score(
            prefix, own, ids, deadline=deadline, cancel=(cancel or CancelSignal()).event
        )
        return Scores(
            status=result.reason,
            scores=result.scores,
            started_at=result.started_at,
            finished_at=result.finished_at,
        )

    async def score(
        self,
        context: str,
        event: str,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """Score candidate actions for ``event`` in one batched pass."""
        cancel = cancel or CancelSignal()
        return await self._run(
            lambda: self.score_sync(
                context, event, candidates, schema, deadline=deadline, cancel=cancel
            ),
            cancel,
        )


def _vocab(loaded: LoadedModel) -> int:
    return int(loaded.model.config.vocab_size)


def _small_call(loaded: LoadedModel, deadline: float) -> None:
    """One short call (16 prompt tokens, 4 new): what the thread count is chosen on.

    A throwaway decoder with its own latency model, so a slow setting never skews the backend's.
    """
    decoder = Decoder(
        model=loaded.model,
        pad_id=0,
        eos_ids=[],
        latency=LatencyModel(),
        clock=MonotonicClock(),
        prefix_cache_size=1,
    )
    rng = random.Random(1)
    vocab = min(loaded.tokenizer.vocab_size, 1000)
    prompt = [[rng.randrange(5, vocab) for _ in range(16)]]
    decoder.decode([], prompt, deadline=deadline, max_new_tokens=4, reuse_prefix=False)
