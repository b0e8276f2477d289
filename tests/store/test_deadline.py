"""The retry policy under a deadline (``store/deadline.py``): a patient call retries
until its deadline, others also stop at a count; a command outside any call is bounded
by the policy's default; the earlier deadline governs. (A stalled server against the
deadlines: ``tests/faults/test_deadlines.py``.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from aioqueue.store import deadline


async def _failing(times: int) -> tuple[Callable[[], Awaitable[str]], list[int]]:
    calls: list[int] = []

    async def do() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise RedisConnectionError("gone")
        return "ok"

    return do, calls


async def _nothing(*_: Any) -> None:
    return None


async def test_a_patient_call_retries_until_its_deadline_not_a_count() -> None:
    retry = deadline.DeadlineRetry(NoBackoff(), 2)
    do, calls = await _failing(5)
    async with deadline.within(5, patient=True):
        assert await retry.call_with_retry(do, _nothing) == "ok"  # 5 failures, then done
    assert len(calls) == 6
    do, calls = await _failing(5)
    async with deadline.within(5):  # not patient: the count governs too
        with pytest.raises(RedisConnectionError):
            await retry.call_with_retry(do, _nothing)
    assert len(calls) == 3


async def test_a_command_outside_any_call_is_bounded_by_the_default() -> None:
    retry = deadline.DeadlineRetry(NoBackoff(), -1, default=0.2)  # retries without end...
    failed: list[Exception] = []

    async def stall() -> None:
        await asyncio.Event().wait()

    async def fail(error: Exception) -> None:
        failed.append(error)

    with pytest.raises(RedisTimeoutError, match=r"within 0.2s"):  # ...but not past 0.2 s
        await retry.call_with_retry(stall, fail)
    assert len(failed) == 1  # the connection under the attempt was dropped


async def test_the_earlier_deadline_governs_and_names_its_setting() -> None:
    with pytest.raises(RedisTimeoutError, match=r"within 0.1s \(outer_setting\)"):
        async with deadline.within(0.1, "outer_setting"), deadline.within(10, "inner"):
            assert deadline.remaining() is not None
            await asyncio.Event().wait()
    assert deadline.remaining() is None  # nothing left behind


async def test_a_timeout_raised_inside_is_not_taken_for_the_deadline() -> None:
    with pytest.raises(TimeoutError):
        async with deadline.within(10):
            await asyncio.wait_for(asyncio.Event().wait(), 0.01)


async def test_a_bound_deadline_is_armed_by_the_layer_that_waits() -> None:
    """``bound`` sets the deadline without a timer; ``keeping`` (the batcher) arms it."""
    with deadline.bound(0.1, "enqueue_timeout", patient=True):
        current = deadline.current()
        assert current is not None and not current.armed
        await asyncio.sleep(0.15)  # (nothing cuts a block with no timer armed)
        with pytest.raises(RedisTimeoutError, match=r"within 0.1s \(enqueue_timeout\)"):
            async with deadline.keeping(current):
                await asyncio.Event().wait()
        assert not current.armed


async def test_a_reply_across_a_failover_goes_again_only_for_a_patient_call() -> None:
    """``Unconfirmed`` (the call may have run on a demoted master): aioqueue's own calls
    are safe to send twice; another call (a channel post) must not be."""
    retry = deadline.DeadlineRetry(NoBackoff(), 3)
    calls: list[int] = []

    async def once_across() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise deadline.Unconfirmed("the master changed meanwhile")
        return "ok"

    with pytest.raises(deadline.Unconfirmed):
        await retry.call_with_retry(once_across, _nothing)
    assert len(calls) == 1
    async with deadline.within(5, patient=True):
        assert await retry.call_with_retry(once_across, _nothing) == "ok"
