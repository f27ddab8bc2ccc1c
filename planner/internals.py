"""The planner layer's internals, for the other layers of this package: not a stable API.

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
    from ._branch import Branch
    from ._calibration import calibration, markov_bound
    from ._forecaster import Forecaster
    from ._planner import Planner

__all__ = [
    "Branch",
    "Forecaster",
    "Planner",
    "calibration",
    "markov_bound",
]

# Name -> the private module that defines it (relative to this package).
_WHERE = {
    "Branch": "._branch",
    "Forecaster": "._forecaster",
    "Planner": "._planner",
    "calibration": "._calibration",
    "markov_bound": "._calibration",
}


def __getattr__(name: str) -> _typing.Any:
    # Imported on first use: a name's module (and what it needs) loads only when asked for.
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(_WHERE[name], __package__), name)
