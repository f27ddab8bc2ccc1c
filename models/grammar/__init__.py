"""Grammars: token-mask compilers, output bounds and GBNF for servers.

Nothing here is public: the backends use these modules directly. The grammar
compilers (:mod:`._compilers`) need the ``local`` extra (torch, llguidance, xgrammar).
"""

__all__: list[str] = []
