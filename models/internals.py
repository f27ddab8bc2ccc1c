"""The model layer's internals, for the other layers of this package: not a stable API.

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
    from ._cancellation import raise_lost_cancel, wait_cancelled
    from ._clock import Pass, PassKind
    from ._cost import Cost
    from ._engine import EngineChoice, choose_engine
    from ._gate import ModelGate
    from ._health import PlannerHealth
    from ._model_source import cache_root, resolve_model
    from ._prompt import Prompt, prompt_length_bucket, state_text
    from .backends._llama_binary import LLAMA_CPP_VERSION, build_dir, llama_server_path
    from .backends._server_url import is_server_url
    from .grammar._compilers import make_grammar_compiler

__all__ = [
    "LLAMA_CPP_VERSION",
    "Cost",
    "EngineChoice",
    "ModelGate",
    "Pass",
    "PassKind",
    "PlannerHealth",
    "Prompt",
    "build_dir",
    "cache_root",
    "choose_engine",
    "is_server_url",
    "llama_server_path",
    "make_grammar_compiler",
    "prompt_length_bucket",
    "raise_lost_cancel",
    "resolve_model",
    "state_text",
    "wait_cancelled",
]

# Name -> the private module that defines it (relative to this package).
_WHERE = {
    "Cost": "._cost",
    "EngineChoice": "._engine",
    "LLAMA_CPP_VERSION": ".backends._llama_binary",
    "ModelGate": "._gate",
    "Pass": "._clock",
    "PassKind": "._clock",
    "PlannerHealth": "._health",
    "Prompt": "._prompt",
    "build_dir": ".backends._llama_binary",
    "cache_root": "._model_source",
    "choose_engine": "._engine",
    "is_server_url": ".backends._server_url",
    "llama_server_path": ".backends._llama_binary",
    "make_grammar_compiler": ".grammar._compilers",
    "prompt_length_bucket": "._prompt",
    "raise_lost_cancel": "._cancellation",
    "resolve_model": "._model_source",
    "state_text": "._prompt",
    "wait_cancelled": "._cancellation",
}


def __getattr__(name: str) -> _typing.Any:
    # Imported on first use: a name's module (and what it needs) loads only when asked for.
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_importlib.import_module(_WHERE[name], __package__), name)
