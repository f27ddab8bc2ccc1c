"""Grammars: token-mask engines, output bounds and GBNF for servers.

Nothing here is public: the backends use these modules directly. The engines
(:mod:`._engines`) need the ``local`` extra (torch, llguidance, xgrammar).
"""

__all__: list[str] = []
