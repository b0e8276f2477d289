"""Plain ``def`` handlers run in threads, which nothing can stop: a job whose thread runs
is never handed to anyone else, past its timeout or through a shutdown (DESIGN.md §12);
the threads themselves carry a job's context and never hold up a process's exit."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.worker.threads import HandlerThreads
from tests.helpers import now, run_until_idle, wait_until


async def lease_deadline(redis: Redis, queue: aioqueue.Queue, job: aioqueue.Job[Any]) -> float:
    """The job's lease deadline (ms, Redis clock) in the queue's active set; 0 if none."""
    return await redis.zscore(queue.keys.active, job.id) or 0.0


async def renewed_twice(
    redis: Redis, queue: aioqueue.Queue, job: aioqueue.Job[Any], runs: list[str], expected: str
) -> None:
    """Wait until the job's lease (1 s) has been renewed past two more leases (had it been
    released or left to expire, another worker would have had time to take it), checking
    all along that ``runs`` shows only the one run, ``expected``."""
    first = await lease_deadline(redis, queue, job)
    assert first > 0, "the job is not leased"

    async def renewed() -> bool:
        assert runs == [expected], f"run again while its thread ran: {runs}"
        return await lease_deadline(redis, queue, job) >= first + 2000

    await wait_until(renewed, timeout=15)


async def test_a_timed_out_thread_keeps_its_job_until_it_returns(
    app: aioqueue.App, redis_url: str, prefix: str, redis: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """The attempt fails (and is retried) once the thread has returned, not at the timeout
    while the thread runs on (it was: the retry then ran beside it)."""
    release = threading.Event()
    events: list[str] = []

    @app.task(queue="q", timeout=0.2, retries=1, backoff=aioqueue.Fixed(0))
    def slow() -> str:
        run = sum(event.startswith("start") for event in events) + 1
        events.append(f"start {run}")
        if run == 1:
            release.wait(30)
        events.append(f"end {run}")
        return f"run {run}"

    other = aioqueue.App(redis_url=redis_url, prefix=prefix)
    other.task(queue="q", name="slow")(slow.fn)  # the retry may run on either worker
    queue, job = app.queue("q"), await slow.enqueue()
    try:
        async with app.worker(lease=1), other.worker(lease=1, reclaim_interval=0.1):
            try:
                await wait_until(lambda: now(events == ["start 1"]))
                await renewed_twice(redis, queue, job, events, "start 1")  # its 0.2 s is past
                assert await job.status() is aioqueue.JobStatus.ACTIVE
            finally:
                release.set()
            assert await job.result(timeout=10) == "run 2"
    finally:
        release.set()
        await other.close()
    assert events == ["start 1", "end 1", "start 2", "end 2"]
    assert "passed its 0.2s timeout in a thread" in caplog.text
    assert (await job.info()).attempts == 2


@pytest.mark.parametrize("middleware", [False, True], ids=["plain", "handler-in-own-task"])
async def test_a_thread_running_at_shutdown_keeps_its_job_leased(
    app: aioqueue.App, redis_url: str, prefix: str, redis: Redis, middleware: bool
) -> None:
    """``async with app.worker()`` ends after the grace; the job whose thread still runs
    stays leased to this process (renewed) until the thread returns, then is acked: it was
    put back in ready at once, and another worker ran it beside the thread. Also when a
    middleware awaits the handler in a task of its own (as ``asyncio.wait_for`` does)."""
    release = threading.Event()
    runs: list[str] = []
    if middleware:

        @app.middleware
        async def in_own_task(job: aioqueue.JobContext, call_next: Any) -> Any:
            return await asyncio.ensure_future(call_next())

    @app.task(queue="q")
    def slow(n: int) -> int:
        runs.append("this")
        release.wait(30)
        return n

    def elsewhere(n: int) -> int:
        runs.append("other")
        return -1

    other = aioqueue.App(redis_url=redis_url, prefix=prefix)
    other.task(queue="q", name="slow")(elsewhere)
    queue, job = app.queue("q"), await slow.enqueue(7)
    worker = app.worker(lease=1, grace=0)
    try:
        await worker.start()
        await wait_until(lambda: now(runs == ["this"]))
        await asyncio.wait_for(worker.stop(), 10)  # returns with the thread running
        assert worker.running == 1
        async with other.worker(lease=1, reclaim_interval=0.1):
            try:
                await renewed_twice(redis, queue, job, runs, "this")
                assert await job.status() is aioqueue.JobStatus.ACTIVE
            finally:
                release.set()
            assert await job.result(timeout=10) == 7  # this worker's thread, acked after stop
            await wait_until(lambda: now(worker.running == 0))
    finally:
        release.set()
        await other.close()
    assert runs == ["this"]
    assert worker.outcomes == {"complete": 1}


async def test_a_second_signal_does_not_wait_for_threads(app: aioqueue.App) -> None:
    """A forced stop (a second Ctrl-C) skips the grace: it does not wait for a thread that
    no cancellation can stop."""
    release = threading.Event()
    started = threading.Event()

    @app.task(queue="q")
    def slow() -> None:
        started.set()
        release.wait(30)

    job = await slow.enqueue()
    worker = app.worker(grace=60, lease=2)
    try:
        await worker.start()
        await wait_until(lambda: now(started.is_set()))
        worker.request_stop(force=True)
        await asyncio.wait_for(worker.stop(), 10)  # not the 60 s grace, nor the thread
        assert await job.status() is aioqueue.JobStatus.ACTIVE  # not released beside it
    finally:
        release.set()
    await wait_until(lambda: now(worker.running == 0))


async def test_an_aborted_thread_runs_to_its_end(
    app: aioqueue.App, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing can stop it: its outcome, when it returns, is the job's."""
    caplog.set_level(logging.INFO, logger="aioqueue.worker.inflight")
    release = threading.Event()
    started = threading.Event()

    @app.task(queue="q")
    def slow() -> str:
        started.set()
        release.wait(30)
        return "finished"

    job = await slow.enqueue()
    try:
        async with app.worker() as worker:
            await wait_until(lambda: now(started.is_set()))
            assert await job.cancel() is True
            await wait_until(lambda: now("in a thread, which cannot be stopped" in caplog.text))
            release.set()
            assert await job.result(timeout=10) == "finished"
    finally:
        release.set()
    assert worker.outcomes == {"complete": 1}


async def test_handler_threads_carry_the_jobs_context_and_are_daemons(
    app: aioqueue.App,
) -> None:
    seen: list[tuple[str, bool]] = []

    @app.task(queue="q")
    def where() -> None:
        seen.append((aioqueue.current_job().task, threading.current_thread().daemon))

    await where.enqueue()
    async with app.worker():
        await wait_until(lambda: now(len(seen) == 1))
    assert seen == [("where", True)]


async def test_a_thread_outcome_comes_back_as_raised() -> None:
    threads = HandlerThreads()

    def stop() -> None:
        raise StopIteration  # a Future cannot carry it

    try:
        assert await threads.run(lambda: 42, "a") == 42
        with pytest.raises(RuntimeError, match="StopIteration"):
            await threads.run(stop, "b")
        with pytest.raises(KeyError):
            await threads.run(lambda: {"a": 1}["missing"], "c")
        assert not threads.busy("a")
    finally:
        threads.close()


async def test_a_def_handler_may_name_its_parameters_anything(app: aioqueue.App) -> None:
    """Its keyword arguments travel to its thread beside the call: a parameter named like
    the carrier's own (``call``) must not collide with it."""

    @app.task
    def echo(call: str, *, args: int = 0) -> str:
        return f"{call} {args}"

    job = await echo.enqueue(call="x", args=2)
    await run_until_idle(app)
    assert await job.result(timeout=1) == "x 2"
