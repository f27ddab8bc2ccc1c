"""torch's thread count: one thread is kept only when it is clearly faster (a busy machine)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from forethought.models import TransformersBackend
from forethought.models._threads import choose_threads
from forethought.policies import ConfigError, DeadlinePassed


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _call(one_s: float, many_s: float) -> tuple[list[int], Callable[[float], None]]:
    seen: list[int] = []

    def call(deadline: float) -> None:
        threads = torch.get_num_threads()
        seen.append(threads)
        end = time.monotonic() + (one_s if threads == 1 else many_s)
        while time.monotonic() < end:  # a model call checks its deadline between passes
            if time.monotonic() > deadline:
                raise DeadlinePassed(deadline, time.monotonic())
            time.sleep(0.005)

    return seen, call


def test_one_thread_is_kept_when_threads_wait_on_each_other(two_threads: None) -> None:
    seen, call = _call(one_s=0.05, many_s=2.0)
    choice = choose_threads(call)
    assert choice.threads == 1
    assert torch.get_num_threads() == 1
    assert seen == [1, 1, 2]  # one thread first: the slow setting is tried last, and cut
    assert choice.all_threads_s < 2.0  # cut (at 1.5x one thread's time), not run to its end


def test_all_threads_are_kept_on_a_quiet_machine(two_threads: None) -> None:
    _, call = _call(one_s=0.05, many_s=0.04)
    choice = choose_threads(call)
    assert choice.threads == 2
    assert torch.get_num_threads() == 2
    assert not math.isnan(choice.one_thread_s)


def test_a_given_thread_count_is_kept_without_timing(
    two_threads: None, tiny_model_dir: Path, tmp_path: Path
) -> None:
    backend = TransformersBackend(
        model=str(tiny_model_dir), device="cpu", dtype="float32", cache_dir=tmp_path, threads=1
    )
    backend.load()
    assert torch.get_num_threads() == 1
    assert backend.threads is not None
    assert backend.threads.threads == 1
    assert math.isnan(backend.threads.one_thread_s)  # given, not timed


def test_a_thread_count_below_one_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="threads"):
        TransformersBackend(threads=0)
