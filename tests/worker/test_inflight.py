"""A job in flight (units): one interrupt reason, the strongest winning, decides how an
interrupted run is settled; a timeout's own cancellation is taken back once. Every reason
goes through the job's one owner (``InFlight``), which alone writes the job's state."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.errors import HandlerTimeout
from aioqueue.core.keys import QueueKeys
from aioqueue.core.lifecycle import Taken
from aioqueue.core.middleware import JobContext
from aioqueue.worker.acks import AckBatcher
from aioqueue.worker.inflight import InFlight
from aioqueue.worker.runner import RunEnv
from aioqueue.worker.running import Interrupt, RunningJob, interrupted_settlement

APP = aioqueue.App(redis_url="redis://127.0.0.1:1")


@APP.task
async def stuck() -> None: ...


CONTEXT = JobContext("j", "q", stuck.name, 1, 1, {})


def make_job(
    task: aioqueue.Task[..., Any] | None = None, timeout: float | None = None
) -> RunningJob:
    acks = AckBatcher(Redis(), QueueKeys.for_queue("p", "q"), result_ttl_ms=0)
    job = RunningJob(Taken(b"j", b"{}", 1, 1, "w:1"), acks)
    job.task, job.timeout = task, timeout
    return job


def owner() -> InFlight:
    return InFlight(RunEnv(APP.registry.find_task), concurrency=1)


def call_handler(inflight: InFlight, job: RunningJob, call: Any) -> Coroutine[Any, Any, Any]:
    """What the runner asks of the owner: call the handler under the job's timeout."""
    return inflight.call_handler(job, call, stuck, job.timeout, CONTEXT)


async def run_as_job(inflight: InFlight, job: RunningJob, call: Any) -> asyncio.Task[Any]:
    """Run the handler's call in a task that is the job's own handle."""
    task = asyncio.ensure_future(call_handler(inflight, job, call))
    job.handle, job.begun = task, True
    await asyncio.sleep(0)  # let the handler start
    return task


async def forever() -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("first", "then", "kept"),
    [
        (Interrupt.TIMEOUT, Interrupt.SHUTDOWN, Interrupt.SHUTDOWN),
        (Interrupt.SHUTDOWN, Interrupt.TIMEOUT, Interrupt.SHUTDOWN),
        (Interrupt.ABORT, Interrupt.SHUTDOWN, Interrupt.ABORT),
        (Interrupt.SHUTDOWN, Interrupt.ABORT, Interrupt.ABORT),
        (Interrupt.OVERDUE, Interrupt.SHUTDOWN, Interrupt.OVERDUE),
    ],
)
async def test_the_strongest_interrupt_wins(
    first: Interrupt, then: Interrupt, kept: Interrupt
) -> None:
    inflight, job = owner(), make_job()
    task = await run_as_job(inflight, job, forever)
    inflight.interrupt(job, first)
    inflight.interrupt(job, then)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert job.interrupt is kept
    assert job.interrupted


async def test_each_interrupt_settles_its_own_way() -> None:
    expected = {
        None: "release",
        Interrupt.TIMEOUT: "release",  # its handler ended by the timeout: the runner decides
        Interrupt.SHUTDOWN: "release",
        Interrupt.OVERDUE: "bury",  # a HandlerTimeout failure, past its one attempt
        Interrupt.ABORT: "abort",
    }
    for reason, outcome in expected.items():
        job = make_job(stuck, timeout=1.0)
        job.interrupt = reason
        settlement = interrupted_settlement(job)
        assert settlement.outcome == outcome, reason
        if reason is Interrupt.OVERDUE:
            assert orjson.loads(settlement.data)["type"] == "HandlerTimeout"


async def test_a_timeout_after_an_abort_changes_nothing() -> None:
    inflight, job = owner(), make_job()
    task = await run_as_job(inflight, job, forever)
    inflight.interrupt(job, Interrupt.ABORT)
    inflight.time_out(job)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert job.interrupt is Interrupt.ABORT


async def test_a_timeout_is_a_timeout_error_and_its_cancellation_is_taken_back() -> None:
    inflight, job = owner(), make_job(timeout=0.01)
    outcome: list[BaseException] = []

    async def own_task() -> None:
        job.handle, job.begun = asyncio.current_task(), True
        try:
            await call_handler(inflight, job, forever)
        except TimeoutError as exc:
            outcome.append(exc)
        assert job.handle is not None and job.handle.cancelling() == 0
        await asyncio.sleep(0)  # not cancelled again: the request was taken back

    await asyncio.wait_for(own_task(), 5)
    assert [type(exc) for exc in outcome] == [TimeoutError]
    assert job.interrupt is None and job.deadline is None


async def test_a_handler_that_swallows_its_timeout_fails_with_handler_timeout() -> None:
    inflight, job = owner(), make_job(timeout=0.01)

    async def swallows() -> str:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5)
        return "done anyway"

    async def own_task() -> None:
        job.handle, job.begun = asyncio.current_task(), True
        with pytest.raises(HandlerTimeout):
            await call_handler(inflight, job, swallows)
        assert job.handle is not None and job.handle.cancelling() == 0

    await asyncio.wait_for(own_task(), 5)


async def test_settled_jobs_are_not_cancelled() -> None:
    inflight, job = owner(), make_job()
    task = await run_as_job(inflight, job, forever)
    job.settled = True
    inflight.interrupt(job, Interrupt.ABORT)
    assert job.interrupt is None and not task.cancelled()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
