"""Progress for every wait a person would otherwise sit through in silence.

A bar (with a count and the elapsed time) or, where the length is unknown, a spinner, drawn
with ``rich`` on standard error. When standard error is not a terminal (a log, a CI job, a
pipe) nothing is drawn; instead each wait still open prints one plain line every 10 s
(``loading smollm2-135m: 20 s``, ``replay: 12/60 (40 s)``), so a long run is never silent and a
short one's output stays exactly what the command prints.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["Bars"]


def _still(n: int = 1) -> None:
    """Advance nothing (no display)."""


@dataclass(slots=True)
class _Open:
    """A wait still open, for the plain lines."""

    description: str
    total: int | None
    started: float = field(default_factory=time.monotonic)
    done: int = 0


class Bars:
    """The progress display of one command: bars and spinners, one line each.

    Args:
        enabled: draw (default: only when standard error is a terminal).
        every_s: when not drawing, the seconds between plain lines of a wait still open.

    """

    def __init__(self, *, enabled: bool | None = None, every_s: float = 10.0) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Progress | None = None
        self._every_s = every_s
        self._open: dict[int, _Open] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._keys = itertools.count()

    def __enter__(self) -> Bars:
        if self.enabled:
            from rich.console import Console  # noqa: PLC0415 - only when drawing
            from rich.progress import (  # noqa: PLC0415
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._progress.start()
        else:
            # A wait blocks the main thread (a model load), so the lines come from a thread
            # of this object's own, stopped and joined by __exit__.
            self._ticker = threading.Thread(
                target=self._tick, name="forethought-progress-lines", daemon=True
            )
            self._ticker.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None

    def _tick(self) -> None:
        while not self._stop.wait(self._every_s):
            now = time.monotonic()
            with self._lock:
                # Only what has been open a whole period: a wait that ends sooner stays silent
                # (and its end is said only when it printed, see _finish_locked).
                lines = [
                    _line(w, now) for w in self._open.values() if now - w.started >= self._every_s
                ]
            for line in lines:
                print(line, file=sys.stderr, flush=True)

    def _track(self, description: str, total: int | None) -> int:
        with self._lock:
            key = next(self._keys)
            self._open[key] = _Open(description, total)
        return key

    def _advance(self, key: int, n: int) -> None:
        with self._lock:
            waiting = self._open.get(key)
            if waiting is None:
                return
            waiting.done += n
            if waiting.total is not None and waiting.done >= waiting.total:
                self._finish_locked(key)

    def _finish_locked(self, key: int) -> None:
        waiting = self._open.pop(key, None)
        if waiting is not None and time.monotonic() - waiting.started >= self._every_s:
            # It printed lines while open: say it ended, or the last line reads as a hang.
            took = time.monotonic() - waiting.started
            print(f"{waiting.description}: done in {took:.0f} s", file=sys.stderr, flush=True)

    def bar(self, description: str, total: int) -> Callable[[int], None]:
        """A bar of ``total`` steps; returns the function that advances it by ``n``."""
        progress = self._progress
        if progress is None:
            if self._ticker is None:
                return _still
            key = self._track(description, total)

            def advance_plain(n: int = 1) -> None:
                self._advance(key, n)

            return advance_plain
        task = progress.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            progress.advance(task, n)

        return advance

    @contextlib.contextmanager
    def wait(self, description: str) -> Iterator[None]:
        """A spinner with the elapsed time while the block runs (a wait of unknown length)."""
        progress = self._progress
        if progress is None:
            if self._ticker is None:
                yield
                return
            key = self._track(description, None)
            try:
                yield
            finally:
                with self._lock:
                    self._finish_locked(key)
            return
        task = progress.add_task(description, total=None)
        try:
            yield
        finally:
            progress.update(task, total=1, completed=1)


def _line(waiting: _Open, now: float) -> str:
    elapsed = f"{now - waiting.started:.0f} s"
    if waiting.total is None:
        return f"{waiting.description}: {elapsed}"
    return f"{waiting.description}: {waiting.done}/{waiting.total} ({elapsed})"
