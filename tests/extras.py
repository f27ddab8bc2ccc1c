"""Skip a test that needs an optional extra when it is not installed, saying which.

The unit tier collects and runs with only the core install (``pip install -e .`` and the
test tools); a test that needs torch, transformers, a bus library or a dev tool skips with
the extra that provides it.
"""

from __future__ import annotations

import pytest

__all__ = ["LOCAL_NAMES", "needs"]

LOCAL_NAMES = frozenset(
    {"forethought", "forethought.bench", "forethought.models", "forethought.models.backends"}
)
"""Packages whose ``__all__`` resolves (lazily) a name of the local extra's: torch."""


def needs(module: str, extra: str) -> None:
    """Skip the calling test unless ``module`` imports; the reason names ``extra``."""
    reason = f"needs the {extra} extra: pip install 'forethought[{extra}]'"
    pytest.importorskip(module, reason=reason)
