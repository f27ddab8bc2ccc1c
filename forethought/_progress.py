"""Progress for every wait a person would otherwise sit through in silence.

A bar (with a count and the elapsed time) or, where the length is unknown, a spinner, drawn
with ``rich`` on standard error; quiet when standard error is not a terminal (a log, a CI job,
a pipe), so captured output stays exactly what the command prints.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["Bars"]


def _still(n: int = 1) -> None:
    """Advance nothing (no display)."""


class Bars:
    """The progress display of one command: bars and spinners, one line each.

    Args:
        enabled: draw (default: only when standard error is a terminal).

    """

    def __init__(self, *, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Progress | None = None

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
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def bar(self, description: str, total: int) -> Callable[[int], None]:
        """A bar of ``total`` steps; returns the function that advances it by ``n``."""
        progress = self._progress
        if progress is None:
            return _still
        task = progress.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            progress.advance(task, n)

        return advance

    @contextlib.contextmanager
    def wait(self, description: str) -> Iterator[None]:
        """A spinner with the elapsed time while the block runs (a wait of unknown length)."""
        progress = self._progress
        if progress is None:
            yield
            return
        task = progress.add_task(description, total=None)
        try:
            yield
        finally:
            progress.update(task, total=1, completed=1)
