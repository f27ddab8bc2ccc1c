"""Polling with a deadline: what tests wait with when there is no event to wait on."""

from __future__ import annotations

import asyncio
import threading

import pytest

from forethought.testing import until_holds, until_holds_blocking


async def test_until_holds_returns_once_the_condition_holds() -> None:
    flag = asyncio.Event()
    asyncio.get_running_loop().call_later(0.02, flag.set)
    took = await until_holds(flag.is_set, 5, "the flag")
    assert flag.is_set()
    assert took >= 0.0


async def test_until_holds_awaits_a_coroutine_condition() -> None:
    calls = 0

    async def third_time() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 3

    await until_holds(third_time, 5, "the third call")
    assert calls == 3


async def test_until_holds_fails_naming_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for the impossible"):
        await until_holds(lambda: False, 0.05, "the impossible")


def test_until_holds_blocking_waits_for_another_thread() -> None:
    done = threading.Event()
    threading.Timer(0.02, done.set).start()
    until_holds_blocking(done.is_set, 5, "the other thread")
    assert done.is_set()
    with pytest.raises(AssertionError, match="waiting for nothing"):
        until_holds_blocking(lambda: False, 0.05, "nothing")
