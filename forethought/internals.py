"""The CLI layer's internals, for the benches and the test kit: not a stable API.

The one door through which the benches (``forethought.bench``) or the test kit reach a name the
CLI layer (the top of ``forethought``, with its commands) keeps out of its public ``__init__``:
a collaborator, not something a user should build on. Its names may change without notice;
the import contract "A layer's private modules are its own" (pyproject.toml) keeps every other
room to this module and the ``__init__``.

A name is imported from its module on first use, so importing this door loads nothing more
than the names asked for.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._progress import Bars

__all__ = [
    "Bars",
]

# Name -> the private module that defines it (relative to this package).
_WHERE = {
    "Bars": "._progress",
}


def __getattr__(name: str) -> _typing.Any:
    # Imported on first use: a name's module (and what it needs) loads only when asked for.
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(_WHERE[name], __package__), name)
