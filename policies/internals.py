"""The policies layer's internals, for the other layers of this package: not a stable API.

The one door through which another layer (or the test kit, or the benches) reaches a name this
layer keeps out of its public ``__init__``: a collaborator, not something a user should build
on. Its names may change without notice; the import contract "A layer's private modules are
its own" (pyproject.toml) keeps every other layer to this module and the ``__init__``.

A name is imported from its module on first use, so importing this door loads nothing more
than the names asked for.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._abstraction import StateAbstraction
    from ._errors import first_problem
    from ._events import EventType, Grid
    from ._spec import load_document
    from ._spec_check import StateDomain, did_you_mean, validation_problems
    from ._spec_fields import EVENT_EXTRA_KEYS

__all__ = [
    "EVENT_EXTRA_KEYS",
    "EventType",
    "Grid",
    "StateAbstraction",
    "StateDomain",
    "did_you_mean",
    "first_problem",
    "load_document",
    "validation_problems",
]

# Name -> the private module that defines it (relative to this package).
_WHERE = {
    "EVENT_EXTRA_KEYS": "._spec_fields",
    "EventType": "._events",
    "Grid": "._events",
    "StateAbstraction": "._abstraction",
    "StateDomain": "._spec_check",
    "did_you_mean": "._spec_check",
    "first_problem": "._errors",
    "load_document": "._spec",
    "validation_problems": "._spec_check",
}


def __getattr__(name: str) -> _typing.Any:
    # Imported on first use: a name's module (and what it needs) loads only when asked for.
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(_WHERE[name], __package__), name)
