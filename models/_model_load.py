"""Loading a local model onto torch, converting a GGUF to safetensors the first time.

transformers dequantizes a GGUF on every load (~20 s here), so the first load converts it once
to safetensors under the cache folder and later loads read that (seconds). This module needs the
``local`` extra (torch, gguf): the model layer's package imports it only when a local model is
asked for.
"""

from __future__ import annotations

import errno
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from forethought.policies import ConfigError, ModelNotFound

from ._model_source import RECORD, ModelSource, gguf_cache_dir

__all__ = ["LoadedModel", "load_model"]


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


def _pick(device: str, dtype: str) -> tuple[str, Any]:
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
        (tmp / RECORD).write_text(
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
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not (target / RECORD).exists():
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
    t0 = time.perf_counter()
    dev, torch_dtype = _pick(device, dtype)
    converted = False
    conversion: float | None = None
    location = source.location
    if source.kind == "gguf":
        target = gguf_cache_dir(Path(location), cache_dir)
        if not (target / "config.json").is_file():
            _convert_gguf(Path(location), target)
            converted = True
        location = str(target)
        try:
            conversion = float(json.loads((target / RECORD).read_text())["seconds"])
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
