"""Grammar compilers: token masks that keep every completed output valid JSON of one schema.

Two implement :class:`GrammarCompiler`, one per grammar: ``llguidance`` (the default) and
``xgrammar``. ``forethought bench`` measures both on the loaded model (compile time, mask time
per token) and the README records why the default is what it is. A compiled grammar is cached
per schema, so compiling happens when a schema is prepared, never on an event's path.

This module needs the ``local`` extra (torch, llguidance, xgrammar); the protocols and the
grammars' names are in :mod:`._protocol`, which the torch-free layers use.

Every grammar is bounded (:mod:`._bounds`): no number, string or array can run on. Both
compilers get the bounds as JSON-Schema keywords, so they keep enforcing ranges and patterns;
llguidance also enforces ``multipleOf`` (bounded decimals), xgrammar ignores it but writes a
number with a range in at most 6 decimals, which :attr:`OutputBounds.compiler_decimals` counts.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

import llguidance
import llguidance.hf
import orjson
import torch
import xgrammar
from transformers import PreTrainedTokenizerBase

from forethought.policies import ConfigError, SchemaError

from ._bounds import OutputBounds, bounded_schema
from ._protocol import GRAMMARS, GrammarCompiler, GrammarMatcher

__all__ = ["LLGuidanceCompiler", "XGrammarCompiler", "apply_bitmask", "make_grammar_compiler"]


class _CompileCache:
    """Schema -> compiled grammar, thread-safe; counts compilations for the benchmarks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[bytes, object] = {}
        self.compiles = 0

    def get(self, schema: Mapping[str, Any], spaced: bool, build: Any) -> object:
        key = orjson.dumps([schema, spaced], option=orjson.OPT_SORT_KEYS)
        with self._lock:
            if key not in self._items:
                try:
                    self._items[key] = build(orjson.dumps(schema).decode(), spaced)
                except Exception as exc:
                    raise SchemaError(
                        "action", dict(schema), f"grammar does not compile: {exc}"
                    ) from exc
                self.compiles += 1
            return self._items[key]


class _LLGMatcher:
    __slots__ = ("_m",)

    def __init__(self, matcher: Any) -> None:
        self._m = matcher

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        # llguidance writes the row straight into the tensor's memory; the row of a CPU,
        # contiguous int32 tensor is exactly what it expects.
        target = bitmask[row]
        assert target.is_contiguous()
        assert not target.is_cuda
        self._m.unsafe_compute_mask_ptr(target.data_ptr(), target.numel() * 4)

    def accept(self, token: int) -> bool:
        return bool(self._m.consume_token(token))

    def jump_forward(self) -> list[int]:
        if self._m.is_accepting():
            return []
        tokens = list(self._m.compute_ff_tokens())
        if tokens and not self._m.consume_tokens(tokens):
            return []
        return tokens

    @property
    def done(self) -> bool:
        return bool(self._m.is_accepting() or self._m.is_stopped())


class LLGuidanceCompiler:
    """llguidance: an Earley parser over token tries; strict JSON, token-level jump-forward."""

    name = "llguidance"

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        vocab_size: int,
        bounds: OutputBounds | None = None,
    ) -> None:
        self._llg = llguidance
        self.bounds = bounds or OutputBounds()
        self._tok = llguidance.hf.from_tokenizer(cast(Any, tokenizer), n_vocab=vocab_size)
        self._vocab = vocab_size
        self._cache = _CompileCache()
        self._warm = False

    @property
    def compiles(self) -> int:
        """How many grammars this compiler has compiled."""
        return self._cache.compiles

    def _build(self, schema_json: str, spaced: bool) -> object:
        bounded = orjson.dumps(bounded_schema(orjson.loads(schema_json), self.bounds)).decode()
        grammar = self._llg.LLMatcher.grammar_from_json_schema(
            bounded,
            defaults={
                "whitespace_flexible": False,
                "item_separator": ", " if spaced else ",",
                "key_separator": ": " if spaced else ":",
            },
        )
        is_error, messages = self._llg.LLMatcher.validate_grammar_with_warnings(grammar, self._tok)
        if is_error:
            raise ValueError("; ".join(messages) or "invalid grammar")
        return grammar

    def compile(self, schema: Mapping[str, Any], *, spaced: bool = False) -> object:
        """Compile (cached) a JSON Schema to an llguidance grammar."""
        compiled = self._cache.get(schema, spaced, self._build)
        if not self._warm:
            # llguidance builds its token trie lazily on the first mask (seconds on a 49k
            # vocabulary): pay for it here, at preparation, not on the first event.
            self.matcher(compiled).fill_mask(self.allocate_mask(1), 0)
            self._warm = True
        return compiled

    def matcher(self, compiled: object) -> GrammarMatcher:
        """A new matcher for ``compiled``."""
        matcher = self._llg.LLMatcher(self._tok, cast(str, compiled))
        if matcher.is_error():
            raise SchemaError("action", compiled, str(matcher.get_error()))
        return _LLGMatcher(matcher)

    def allocate_mask(self, rows: int) -> torch.Tensor:
        """A bitmask for ``rows`` sequences (int32 words, CPU)."""
        # Not llguidance.torch: importing it runs torch.compile decorators (slow, warns).
        return torch.full((rows, (self._vocab + 31) // 32), -1, dtype=torch.int32)

    def apply_mask(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        """Mask forbidden tokens in place."""
        # Not llguidance.torch's helper: it goes through torch.compile, which recompiles for
        # every new batch size (seconds each on a CPU), and importing it warns.
        apply_bitmask(logits, bitmask)


class _XGRMatcher:
    __slots__ = ("_encode", "_m")

    def __init__(self, matcher: Any, encode: Any) -> None:
        self._m = matcher
        self._encode = encode

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        self._m.fill_next_token_bitmask(bitmask, row)

    def accept(self, token: int) -> bool:
        return bool(self._m.accept_token(token))

    def jump_forward(self) -> list[int]:
        text = self._m.find_jump_forward_string()
        if not text:
            return []
        accepted: list[int] = []
        # xgrammar forces a string, not tokens: tokenize it and keep the accepted prefix; the
        # rest is forced again on the next step.
        for token in self._encode(text):
            if not self._m.accept_token(token):
                break
            accepted.append(token)
        return accepted

    @property
    def done(self) -> bool:
        return bool(self._m.is_completed() or self._m.is_terminated())


class XGrammarCompiler:
    """xgrammar: a pushdown automaton with precomputed token masks; fastest masks."""

    name = "xgrammar"

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        vocab_size: int,
        bounds: OutputBounds | None = None,
    ) -> None:
        self._xgr = xgrammar
        self.bounds = dataclasses.replace(bounds or OutputBounds(), compiler_decimals=6)
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgrammar.GrammarCompiler(info)
        self._vocab = vocab_size
        self._cache = _CompileCache()

        def encode(text: str) -> Sequence[int]:
            ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
            return ids

        self._encode = encode

    @property
    def compiles(self) -> int:
        """How many grammars this compiler has compiled."""
        return self._cache.compiles

    def _build(self, schema_json: str, spaced: bool) -> object:
        # No multipleOf: xgrammar ignores it (with a warning); its range encoding bounds the
        # decimals instead (at most 6).
        bounded = bounded_schema(orjson.loads(schema_json), self.bounds, precision=False)
        return self._compiler.compile_json_schema(
            orjson.dumps(bounded).decode(),
            any_whitespace=False,
            separators=(", ", ": ") if spaced else (",", ":"),
            strict_mode=True,
        )

    def compile(self, schema: Mapping[str, Any], *, spaced: bool = False) -> object:
        """Compile (cached) a JSON Schema to an xgrammar grammar."""
        return self._cache.get(schema, spaced, self._build)

    def matcher(self, compiled: object) -> GrammarMatcher:
        """A new matcher for ``compiled``."""
        return _XGRMatcher(self._xgr.GrammarMatcher(cast(Any, compiled)), self._encode)

    def allocate_mask(self, rows: int) -> torch.Tensor:
        """A bitmask for ``rows`` sequences."""
        mask: torch.Tensor = self._xgr.allocate_token_bitmask(rows, self._vocab)
        return mask

    def apply_mask(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        """Mask forbidden tokens in place."""
        self._xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set ``logits[i, t]`` to -inf where bit ``t`` of row ``i`` of the int32 bitmask is 0."""
    rows, vocab = logits.shape
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
    bits = (bitmask[:rows].to(logits.device).unsqueeze(-1) >> shifts) & 1
    allowed = bits.view(rows, -1)[:, :vocab].bool()
    logits.masked_fill_(~allowed, float("-inf"))


def make_grammar_compiler(
    name: str,
    tokenizer: PreTrainedTokenizerBase,
    vocab_size: int,
    bounds: OutputBounds | None = None,
) -> GrammarCompiler:
    """The grammar compiler called ``name`` (``llguidance`` or ``xgrammar``) for this tokenizer."""
    if name == "llguidance":
        return LLGuidanceCompiler(tokenizer, vocab_size, bounds)
    if name == "xgrammar":
        return XGrammarCompiler(tokenizer, vocab_size, bounds)
    raise ConfigError("grammar", name, f"choose one of {GRAMMARS}")
