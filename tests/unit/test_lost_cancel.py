"""A cancellation a library swallowed (3.11's asyncio.wait_for) is raised at a loop's turn."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from forethought.models.internals import raise_lost_cancel
from forethought.runtime._agent import _cancel_and_wait


async def _swallowing_call(entered: asyncio.Event) -> str:
    """What 3.11's wait_for does when the answer lands in the step the cancel does."""
    entered.set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    return "answer"


async def _loop(entered: asyncio.Event, *, check: bool) -> int:
    """A long-lived loop around a library call, as the bus's and the fleet's are."""
    turns = 0
    while turns < 50:
        if check:
            raise_lost_cancel()
        turns += 1
        if turns == 1:
            await _swallowing_call(entered)
        else:
            await asyncio.sleep(0)
    return turns


@pytest.mark.parametrize("check", [True, False])
async def test_a_loop_stops_at_its_next_turn_after_a_call_swallowed_its_cancel(
    check: bool,
) -> None:
    entered = asyncio.Event()
    task = asyncio.create_task(_loop(entered, check=check))
    await entered.wait()
    task.cancel()
    await asyncio.wait([task])
    if check:
        assert task.cancelled()
    else:  # the defect the check mends: the loop ran to its end as if never cancelled
        assert task.result() == 50


async def test_a_task_nobody_cancelled_goes_on() -> None:
    async def turns() -> int:
        done = 0
        for _ in range(50):
            raise_lost_cancel()
            await asyncio.sleep(0)
            done += 1
        return done

    assert await asyncio.create_task(turns()) == 50
    raise_lost_cancel()  # the test's own task, not cancelled either


async def test_a_cancellation_taken_back_is_not_raised() -> None:
    async def body() -> str:
        me = asyncio.current_task()
        assert me is not None
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            me.uncancel()  # a deliberate swallow says so
        raise_lost_cancel()
        return "went on"

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    task.cancel()
    assert await task == "went on"


async def test_a_timeout_swallowed_by_a_library_still_ends_as_a_timeout() -> None:
    entered = asyncio.Event()

    async def timed() -> None:
        async with asyncio.timeout(0.01):
            await _swallowing_call(entered)
            raise_lost_cancel()
            await asyncio.Event().wait()  # never reached: the check raised above

    with pytest.raises(TimeoutError):
        await timed()
    assert entered.is_set()


async def test_an_owner_waiting_for_its_task_to_stop_still_takes_its_own_timeout() -> None:
    # The agent's exit cancels its runner and waits for it. A timeout around the exit is a
    # cancellation of the exit itself: it must end the wait, not pass for the runner's own.
    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(5)  # cleaning up for a long while
            raise

    runner = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await _cancel_and_wait(runner)
    assert not runner.done()  # the exit did not wait out the runner's clean-up
    runner.cancel()
    await asyncio.wait([runner])
