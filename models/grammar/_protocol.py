"""What a grammar is to the decoder: the two protocols and the grammars' names.

Torch-free (the tensors are named for the type checker only), so a backend can validate a
grammar setting and type its fields without loading a grammar compiler (:mod:`._compilers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ._bounds import OutputBounds

if TYPE_CHECKING:
    import torch

__all__ = ["GRAMMARS", "GrammarCompiler", "GrammarMatcher"]

GRAMMARS = ("llguidance", "xgrammar")


class GrammarMatcher(Protocol):
    """The grammar state of one sequence being decoded."""

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed-token bitmask for this sequence into ``bitmask[row]``."""
        ...

    def accept(self, token: int) -> bool:
        """Advance by one sampled token; False (state unchanged) if the grammar forbids it."""
        ...

    def jump_forward(self) -> list[int]:
        """Tokens the grammar forces next, already accepted; empty when a choice is open."""
        ...

    @property
    def done(self) -> bool:
        """True once the output is complete and nothing may follow."""
        ...


class GrammarCompiler(Protocol):
    """Compiles JSON Schemas for one tokenizer and makes matchers for them."""

    name: str
    bounds: OutputBounds
    """The output bounds this compiler's grammars enforce."""

    def compile(self, schema: Mapping[str, Any], *, spaced: bool = False) -> object:
        """Compile (or fetch from the cache) the bounded grammar of ``schema``.

        ``spaced`` uses the ``", "`` and ``": "`` separators models write unprompted instead of
        the compact ``","`` and ``":"``.
        """
        ...

    def matcher(self, compiled: object) -> GrammarMatcher:
        """A fresh matcher at the start of ``compiled``."""
        ...

    def allocate_mask(self, rows: int) -> torch.Tensor:
        """A bitmask tensor for ``rows`` sequences."""
        ...

    def apply_mask(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        """Set the logits of forbidden tokens to -inf, in place (rows align with the mask)."""
        ...
