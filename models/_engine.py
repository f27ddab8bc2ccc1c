"""Which engine runs a local model: the managed llama-server or the torch decoder.

``auto`` picks the managed llama.cpp server for a GGUF (the embedded default is one) on a
machine without CUDA, when our build of it exists: on a 2-core CPU it decodes the embedded model
several times faster than the torch decoder (``benchmarks/engine.py`` measures both side by
side). The torch decoder
stays the engine for CUDA and for Hugging Face model directories, and whenever the build is
missing -- building it is a set-up step, never a surprise at run time, so the choice then says
once which command builds it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

from forethought.policies import ConfigError

from ._model_source import resolve_model
from .backends._llama_binary import BUILD_COMMAND, llama_server_path

__all__ = ["ENGINE_KINDS", "EngineChoice", "EngineKind", "choose_engine"]

EngineKind = Literal["auto", "llama-server", "torch"]
ENGINE_KINDS: tuple[str, ...] = ("auto", "llama-server", "torch")


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The engine chosen for a local model, and why."""

    kind: Literal["llama-server", "torch"]
    reason: str
    notice: str | None = None
    """Something the user should hear once (the build is missing, and how to make it)."""


def _cuda_available() -> bool:
    # Without the `local` extra there is no torch, so no CUDA for it; the caller then says
    # what to install when the choice lands on torch (runtime's backend choice).
    if importlib.util.find_spec("torch") is None:
        return False
    import torch  # noqa: PLC0415 - only when a choice needs it (seconds to import)

    return bool(torch.cuda.is_available())


def choose_engine(model: str, kind: str = "auto", device: str = "auto") -> EngineChoice:
    """The engine for the local ``model`` under the setting ``kind`` (``engine.kind``).

    Raises ConfigError when ``kind`` asks for llama-server and it cannot serve: no build, or a
    model that is not a GGUF.
    """
    if kind not in ENGINE_KINDS:
        raise ConfigError("engine.kind", kind, f"choose one of {ENGINE_KINDS}")
    if kind == "torch":
        return EngineChoice("torch", "engine.kind = 'torch'")
    gguf = resolve_model(model).kind == "gguf"
    built = llama_server_path() is not None
    if kind == "llama-server":
        if not gguf:
            raise ConfigError(
                "engine.kind", kind, f"llama-server serves a .gguf file and {model!r} is not one"
            )
        if not built:
            raise ConfigError(
                "engine.kind", kind, f"llama-server is not built: run {BUILD_COMMAND}"
            )
        return EngineChoice("llama-server", "engine.kind = 'llama-server'")
    if not gguf:
        return EngineChoice("torch", "a model directory or Hugging Face id runs on torch")
    if device.startswith("cuda") or (device == "auto" and _cuda_available()):
        return EngineChoice("torch", "CUDA is available: the torch decoder runs on it")
    if not built:
        return EngineChoice(
            "torch",
            "llama-server is not built",
            notice=(
                "running the local model on the torch decoder, several times slower on a CPU "
                f"than the llama.cpp engine; build that once with: {BUILD_COMMAND}"
            ),
        )
    return EngineChoice("llama-server", "a GGUF on a CPU: the managed llama.cpp server")
