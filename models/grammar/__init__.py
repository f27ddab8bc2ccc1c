"""Grammars: token-mask engines, output bounds and GBNF for servers."""

from ._engines import GrammarEngine, GrammarMatcher, LLGuidanceEngine, XGrammarEngine, make_engine

__all__ = [
    "GrammarEngine",
    "GrammarMatcher",
    "LLGuidanceEngine",
    "XGrammarEngine",
    "make_engine",
]
