"""TransformersBackend: the shipped :class:`ModelBackend` on a local transformers model.

One worker thread owns the model (forward passes of one model do not overlap usefully, and
torch already spreads one pass over the cores), so calls run one at a time, in order. Awaiting
a call never blocks the event loop; cancelling the awaiting task sets the call's cancel signal,
which the worker honours before its next forward pass.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

from pydantic import BaseModel

from forethought.policies import (
    ActionForm,
    ActionSchema,
    ConfigError,
    DeadlinePassed,
    InvalidAction,
    PromptTooLong,
)

from ._backend import CancelSignal, Generation, GenerationStatus, Scores
from ._clock import Clock, MonotonicClock
from ._decode_run import DecodeResult, RowResult, StopReason
from ._decoding import Decoder
from ._grammar import ENGINES, GrammarEngine, make_engine
from ._latency import LatencyModel
from ._model_source import DEFAULT_MODEL, LoadedModel, load_model, resolve_model
from ._prompt import Prompt, PromptEncoder

__all__ = ["TransformersBackend"]

_T = TypeVar("_T")
_STATUS = {
    StopReason.DEADLINE: GenerationStatus.DEADLINE,
    StopReason.CANCELLED: GenerationStatus.CANCELLED,
    StopReason.NOT_STARTED: GenerationStatus.NOT_STARTED,
    StopReason.LENGTH: GenerationStatus.LENGTH,
}


class TransformersBackend:
    """A local Hugging Face model (alias, directory, GGUF or hub id) as a ModelBackend.

    Construction only validates; :meth:`load` (or ``async with``) loads the model, builds the
    grammar engine and warms the latency model up.

    Args:
        model: ``smollm2-135m`` (the embedded default), a directory, a ``.gguf`` file, or a
            Hugging Face id already in the local cache.
        device: ``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto`` (bf16 on CUDA that supports it, else fp32), or a dtype name.
        grammar: the grammar engine, ``llguidance`` (default) or ``xgrammar``.
        clock: the caller's clock, which deadlines are on (default: monotonic, as asyncio's).
        prefix_cache_size: how many prompt prefixes keep their KV cache.
        latency: a latency model to use (default: a fresh one, seeded by the warm-up).

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
    ) -> None:
        if grammar not in ENGINES:
            raise ConfigError("grammar", grammar, f"choose one of {ENGINES}")
        if prefix_cache_size < 1:
            raise ConfigError("prefix_cache_size", prefix_cache_size, "must be at least 1")
        self._source = resolve_model(model)
        self._device = device
        self._dtype = dtype
        self._grammar_name = grammar
        self._clock = clock or MonotonicClock()
        self._prefix_cache_size = prefix_cache_size
        self._latency = latency or LatencyModel()
        self._loaded: LoadedModel | None = None
        self._decoder: Decoder | None = None
        self._engine: GrammarEngine | None = None
        self._prompts: PromptEncoder | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.calls = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def load(self, *, warm_up: bool = True) -> LoadedModel:
        """Load the model (blocking; converts and caches a GGUF the first time)."""
        if self._loaded is None:
            loaded = load_model(self._source, device=self._device, dtype=self._dtype)
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
            flat_eos = [e for t in eos for e in (t if isinstance(t, list) else [t])]
            self._decoder = Decoder(
                model=loaded.model,
                pad_id=int(pad if pad is not None else 0),
                eos_ids=flat_eos,
                latency=self._latency,
                clock=self._clock,
                prefix_cache_size=self._prefix_cache_size,
            )
            self._engine = make_engine(self._grammar_name, tok, loaded.model.config.vocab_size)
            self._prompts = PromptEncoder(tok)
            self._loaded = loaded
            if warm_up:
                self._warm_up()
        return self._loaded

    def _warm_up(self) -> None:
        """Seed the latency model with prefills and decode passes of a few sizes."""
        assert self._decoder is not None
        rng = random.Random(0)
        vocab = min(self.loaded.tokenizer.vocab_size, 1000)
        far = self._clock.now() + 3600.0
        for length, rows in ((16, 1), (64, 1), (8, 4), (128, 1), (24, 16), (8, 8)):
            batch = [[rng.randrange(5, vocab) for _ in range(length)] for _ in range(rows)]
            self._decoder.decode([], batch, deadline=far, max_new_tokens=4, reuse_prefix=False)

    async def __aenter__(self) -> Self:
        await asyncio.get_running_loop().run_in_executor(self._worker(), self.load)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker thread (the model stays loaded for sync use)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _worker(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="forethought-model"
            )
        return self._pool

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
    def clock(self) -> Clock:
        """The clock deadlines are read on."""
        return self._clock

    @property
    def loaded(self) -> LoadedModel:
        """The loaded model; raises if :meth:`load` has not run."""
        if self._loaded is None:
            raise RuntimeError("TransformersBackend is not loaded: call load() or use async with")
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
    def engine(self) -> GrammarEngine:
        """The grammar engine in use."""
        self.loaded  # noqa: B018
        assert self._engine is not None
        return self._engine

    def stats(self) -> dict[str, Any]:
        """Counters: calls, prefix-cache hits and misses, grammar compilations."""
        d = self.decoder
        return {
            "calls": self.calls,
            "prefix_hits": d.prefix_hits,
            "prefix_misses": d.prefix_misses,
            "grammar_compiles": getattr(self.engine, "compiles", None),
        }

    # -- calls --------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[], _T], cancel: CancelSignal) -> _T:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._worker(), fn)
        try:
            return await future
        except asyncio.CancelledError:
            # The thread cannot be interrupted mid-pass; it stops before the next one.
            cancel.cancel()
            raise

    def _admit(self, deadline: float, prompt_tokens: int, max_new_tokens: int) -> None:
        now = self._clock.now()
        if now >= deadline:
            raise DeadlinePassed(deadline, now)
        limit = int(getattr(self.loaded.model.config, "max_position_embeddings", 2048))
        if prompt_tokens + max_new_tokens > limit:
            raise PromptTooLong(prompt_tokens + max_new_tokens, limit)

    async def prepare(self, schema: ActionSchema) -> None:
        """Compile the compact grammar of ``schema`` now, off any event's path."""
        await asyncio.get_running_loop().run_in_executor(
            self._worker(), lambda: self.prepare_sync(schema)
        )

    def prepare_sync(self, schema: ActionSchema, form: ActionForm = ActionForm.COMPACT) -> None:
        """Blocking :meth:`prepare`."""
        self._compile(schema, form)

    def _compile(self, schema: ActionSchema, form: ActionForm) -> object:
        return self.engine.compile(schema.json_schema(form), spaced=form is ActionForm.VERBOSE)

    def _to_generation(
        self,
        schema: ActionSchema,
        form: ActionForm,
        result: DecodeResult,
        row: RowResult,
        *,
        share: int = 1,
    ) -> Generation:
        text = self.loaded.tokenizer.decode(row.tokens, skip_special_tokens=True)
        action = None
        if row.reason is StopReason.COMPLETE:
            try:
                action = schema.parse(text, form)
                status = GenerationStatus.DONE
            except InvalidAction:
                status = GenerationStatus.INVALID
        else:
            assert row.reason is not None
            status = _STATUS[row.reason]
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
        prompt: Prompt,
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
        form: ActionForm | None = None,
        constrained: bool = True,
        reuse_prefix: bool = True,
        jump_forward: bool = True,
    ) -> Generation:
        """Blocking :meth:`generate`, with the switches the benchmark compares."""
        form = form or ActionForm.COMPACT
        prefix, own = self.prompts.encode(prompt, schema, form)
        self._admit(deadline, len(prefix) + len(own), max_new_tokens)
        self.calls += 1
        compiled = self._compile(schema, form) if constrained else None
        result = self.decoder.decode(
            prefix,
            [own],
            deadline=deadline,
            cancel=(cancel or CancelSignal()).event,
            engine=self.engine if constrained else None,
            compiled=compiled,
            max_new_tokens=max_new_tokens,
            reuse_prefix=reuse_prefix,
            jump_forward=jump_forward,
        )
        return self._to_generation(schema, form, result, result.rows[0])

    async def generate(
        self,
        prompt: Prompt,
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
        form: ActionForm | None = None,
    ) -> Generation:
        """Generate one constrained action for ``prompt`` before ``deadline``."""
        cancel = cancel or CancelSignal()
        return await self._run(
            lambda: self.generate_sync(
                prompt,
                schema,
                deadline=deadline,
                cancel=cancel,
                max_new_tokens=max_new_tokens,
                form=form,
            ),
            cancel,
        )

    def generate_batch_sync(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """Blocking :meth:`generate_batch`."""
        if not events:
            return []
        form = ActionForm.COMPACT
        encoded = [self.prompts.encode(Prompt(context, e), schema, form) for e in events]
        prefix = encoded[0][0]
        own = [o for _, o in encoded]
        self._admit(deadline, len(prefix) + max(len(o) for o in own), max_new_tokens)
        self.calls += 1
        result = self.decoder.decode(
            prefix,
            own,
            deadline=deadline,
            cancel=(cancel or CancelSignal()).event,
            engine=self.engine,
            compiled=self._compile(schema, form),
            max_new_tokens=max_new_tokens,
        )
        return [
            self._to_generation(schema, form, result, row, share=len(own)) for row in result.rows
        ]

    async def generate_batch(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """Generate one action per event on one shared, cached context, in one batch."""
        cancel = cancel or CancelSignal()
        return await self._run(
            lambda: self.generate_batch_sync(
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
        prompt: Prompt,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """Blocking :meth:`score`."""
        if not candidates:
            raise ConfigError("candidates", list(candidates), "at least one candidate is needed")
        prefix, own = self.prompts.encode(prompt, schema, ActionForm.COMPACT)
        texts = [schema.compact(schema.validate(c)) for c in candidates]
        ids = [self.prompts.encode_action(t) for t in texts]
        self._admit(deadline, len(prefix) + len(own) + max(len(i) for i in ids), 0)
        self.calls += 1
        result = self.decoder.score(
            prefix, own, ids, deadline=deadline, cancel=(cancel or CancelSignal()).event
        )
        status = (
            GenerationStatus.DONE
            if result.reason is StopReason.COMPLETE
            else _STATUS[result.reason]
        )
        return Scores(
            status=status,
            scores=result.scores,
            started_at=result.started_at,
            finished_at=result.finished_at,
        )

    async def score(
        self,
        prompt: Prompt,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """Score candidate actions for ``prompt`` in one batched pass."""
        cancel = cancel or CancelSignal()
        return await self._run(
            lambda: self.score_sync(prompt, candidates, schema, deadline=deadline, cancel=cancel),
            cancel,
        )
