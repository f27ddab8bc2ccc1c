"""What ``forethought run`` shows while its agent starts and its tree fills.

A start waits tens of seconds on a small CPU (the model loaded or converted, the engine
started, the grammar compiled and one call timed, the bus connected), then the planner fills
the tree for minutes. On a terminal each step is a spinner with its elapsed time and the
coverage a bar; anywhere else (a log, a service manager, a pipe) each step is a plain line as
it begins and one as it ends, with its duration, and the coverage a line whenever it moves.
Everything goes to standard error: standard output keeps only the run's final report.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["StartDisplay"]


class StartDisplay:
    """The start steps and coverage of one ``forethought run``; a :class:`StartSteps`.

    Args:
        live: draw with ``rich`` (default: only when standard error is a terminal).
        out: where lines go (default: standard error).
        clock: the clock durations are read on (default: ``time.monotonic``).

    """

    def __init__(
        self,
        *,
        live: bool | None = None,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out = out or sys.stderr
        self.live = self._out.isatty() if live is None else live
        self._clock = clock
        self._progress: Progress | None = None
        self._coverage: TaskID | None = None

    def __enter__(self) -> StartDisplay:
        if self.live:
            from rich.console import Console  # noqa: PLC0415 - only when drawing
            from rich.progress import (  # noqa: PLC0415
                BarColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(finished_text="[green]done"),
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                console=Console(file=self._out),
                # Standard output is the run's report, never the drawing's.
                redirect_stdout=False,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.finish()

    def finish(self) -> None:
        """Stop drawing (the lines said stay); later lines are plain."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def say(self, line: str) -> None:
        """Write one line (above the drawing, when drawing)."""
        if self._progress is not None:
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self._out, flush=True)

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """One start step: a spinner while it runs, or a line as it begins and one as it ends."""
        progress = self._progress
        if progress is not None:
            task = progress.add_task(description, total=None)
            try:
                yield
            finally:
                progress.update(task, total=1, completed=1)
            return
        self.say(f"forethought: {description} ...")
        started = self._clock()
        yield  # a failed step says nothing more: the error that ends the run says why
        self.say(f"forethought: {description}: done in {self._clock() - started:.1f} s")

    def coverage(self, answerable: float, branches: int, *, idle: bool) -> None:
        """How much of the next event the tree answers; ``idle``: the planner has stopped."""
        doing = "planner idle, nothing left worth writing" if idle else "planning"
        line = (
            f"forethought: {doing}: the tree answers {answerable:.1%} of the next event "
            f"({branches} branches)"
        )
        progress = self._progress
        if progress is None:
            self.say(line)
            return
        label = f"tree: answers the next event ({branches} branches)"
        if self._coverage is None:
            self._coverage = progress.add_task(label, total=100)
        progress.update(self._coverage, completed=round(answerable * 100, 1), description=label)
        if idle:
            self.say(line)
