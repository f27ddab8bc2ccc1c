"""The model layer: the backend protocol and its backends, the clocks, the latency law.

Public: what a user needs to pick a backend or write one (:class:`ModelBackend` and the types
of its methods, the latency predictor it returns, the clocks). The decoder, grammars, prompts,
the model gate and model loading are the other layers' business: they import the names they
use from :mod:`forethought.models.internals`, never from a private module.

:class:`TransformersBackend` needs the ``local`` extra: it is imported on first use of its
name, so importing this package loads neither torch nor transformers and a torch-free install
runs the server backends.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from ._backend import (
    CancelSignal,
    DecodeOptions,
    Generation,
    GenerationStatus,
    ModelBackend,
    Scores,
)
from ._clock import Clock, LoopClock, MonotonicClock
from ._latency import LatencyModel, LatencyPredictor, LatencyProfile, Prediction
from ._model_source import DEFAULT_MODEL
from .backends import (
    ManagedServerBackend,
    ProcessBackend,
    ScriptedBackend,
    ScriptMode,
    ServerBackend,
)

if _typing.TYPE_CHECKING:
    from .backends._transformers import TransformersBackend

__all__ = [
    "DEFAULT_MODEL",
    "CancelSignal",
    "Clock",
    "DecodeOptions",
    "Generation",
    "GenerationStatus",
    "LatencyModel",
    "LatencyPredictor",
    "LatencyProfile",
    "LoopClock",
    "ManagedServerBackend",
    "ModelBackend",
    "MonotonicClock",
    "Prediction",
    "ProcessBackend",
    "Scores",
    "ScriptMode",
    "ScriptedBackend",
    "ServerBackend",
    "TransformersBackend",
]


def __getattr__(name: str) -> _typing.Any:
    # TransformersBackend needs torch: imported on first use of its name.
    if name == "TransformersBackend":
        return _importlib.import_module(".backends._transformers", __name__).TransformersBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
