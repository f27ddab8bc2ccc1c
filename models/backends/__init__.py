"""Model backends, one module each: transformers, process, server, managed server, scripted.

:class:`TransformersBackend` needs the ``local`` extra (torch): it is imported on first use of
its name, so a torch-free install imports this package and runs the server backends.
``forethought.models`` re-exports these names; the llama.cpp build and process helpers are
private (imported from their modules).
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from ._managed import ManagedServerBackend
from ._process import ProcessBackend
from ._scripted import ScriptedBackend, ScriptMode
from ._server import ServerBackend

if _typing.TYPE_CHECKING:
    from ._transformers import TransformersBackend

__all__ = [
    "ManagedServerBackend",
    "ProcessBackend",
    "ScriptMode",
    "ScriptedBackend",
    "ServerBackend",
    "TransformersBackend",
]


def __getattr__(name: str) -> _typing.Any:
    if name == "TransformersBackend":
        return _importlib.import_module("._transformers", __name__).TransformersBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
