"""WarmRecord: a warm-up's measurements kept on disk, so a later load on this machine skips it.

Loading the embedded model seeds the latency model with a warm-up: a few calls of several
sizes, which on a 2-core CPU take seconds (more than reading the weights). Their passes say
how fast this machine runs this model with these threads, and that does not change from one
process to the next. A load with a warm cache replays the last warm-up's passes into the
latency model instead, after one check that the machine is as fast as it was then: a short
call, the one the thread choice times, must finish within ``_SLOWER`` times its recorded time.
When it does not (the machine is busier, or was different), the load measures again: the thread
choice and the warm-up, as with no record.

A record is written only after a warm-up on every thread: one that ran on fewer threads was
measured on a busy machine, and a later quiet load must not inherit its figures.

The record is keyed by everything that makes the figures another machine's: the model's files,
the device and dtype, torch's version and thread count, the CPU's name and core count. It is a
cache: an unreadable or mismatched one is ignored (and rewritten after the next warm-up).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from forethought.policies import DeadlinePassed

from ._latency import LatencyHistory
from ._model_load import LoadedModel
from ._model_source import cache_root

__all__ = ["WarmRecord", "machine_key", "still_as_fast"]

_log = logging.getLogger("forethought.model")

_SLOWER = 1.5
"""The check call may take this many times its recorded time (the thread choice's margin)."""

_VERSION = 1


class _RecordFile(BaseModel):
    """The record's file: what it was measured on, and what was measured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    key: str
    machine: str
    check_call_s: float
    prefills: list[tuple[int, float]]
    steps: list[tuple[int, float]]
    actions: list[int]


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine_key(loaded: LoadedModel) -> str:
    """What the figures depend on, in words: model files, device, torch, threads, CPU."""
    weights = Path(loaded.source.location)
    stamp = ""
    with contextlib.suppress(OSError):
        info = weights.stat()
        stamp = f"{info.st_size}:{info.st_mtime_ns}"
    return " | ".join(
        (
            f"model {loaded.source.location} ({stamp})",
            f"{loaded.device} {loaded.dtype}",
            f"torch {torch.__version__} on {torch.get_num_threads()} threads",
            f"{_cpu_name()} x{os.cpu_count()}",
        )
    )


@dataclass(frozen=True, slots=True)
class WarmRecord:
    """The last warm-up's passes on this machine, and the check call's time then.

    Args:
        folder: where records live (one file per key); default ``<cache>/warm``.

    """

    folder: Path

    @classmethod
    def under(cls, cache_dir: Path | None) -> WarmRecord:
        """Records under ``cache_dir`` (default: the converted weights' cache root)."""
        return cls((cache_dir or cache_root()) / "warm")

    def _path(self, key: str) -> Path:
        return self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"

    def read(self, key: str) -> tuple[LatencyHistory, float] | None:
        """The history and check-call seconds recorded for ``key``; None when there is none."""
        path = self._path(key)
        try:
            record = _RecordFile.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            _log.info("ignoring the warm-up record %s (%s): measuring again", path, exc)
            return None
        if record.version != _VERSION or record.key != key:
            return None
        history = LatencyHistory(tuple(record.prefills), tuple(record.steps), tuple(record.actions))
        return history, record.check_call_s

    def write(self, key: str, history: LatencyHistory, check_call_s: float) -> None:
        """Keep ``history`` for ``key`` (atomically; a failure to write only logs)."""
        record = _RecordFile(
            version=_VERSION,
            key=key,
            machine=platform.node(),
            check_call_s=check_call_s,
            prefills=list(history.prefills),
            steps=list(history.steps),
            actions=list(history.actions),
        )
        path = self._path(key)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(record.model_dump_json().encode())
            tmp.replace(path)
        except OSError as exc:
            _log.info("could not keep the warm-up record at %s: %s", path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()


def still_as_fast(call: Callable[[float], object], recorded_s: float) -> bool:
    """Whether ``call(deadline)`` still finishes within ``_SLOWER`` x ``recorded_s``.

    One untimed call first (a process's first call pays one-off costs no record holds), then
    one cut at the margin: ``call`` raises :class:`DeadlinePassed` at its deadline.
    """
    call(float("inf"))
    start = time.monotonic()
    try:
        call(start + recorded_s * _SLOWER)
    except DeadlinePassed:
        return False
    return time.monotonic() - start <= recorded_s * _SLOWER
