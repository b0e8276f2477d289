"""Middleware around every job, per-task hooks, startup/shutdown hooks and current_job()."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import aioqueue
from aioqueue.core.middleware import CallNext
from aioqueue.store.scripts import leasing
from tests.helpers import run_until_idle, wait_until


async def test_middleware_wraps_every_job_outermost_first(app: aioqueue.App) -> None:
    seen: list[str] = []

    @app.middleware
    async def outer(job: aioqueue.JobContext, call_next: CallNext) -> Any:
        seen.append(f"outer>{job.task}")
        result = await call_next()
        seen.append("outer<")
        return result

    @app.middleware
    async def doubling(job: aioqueue.JobContext, call_next: CallNext) -> Any:
        seen.append("inner>")
        return 2 * await call_next()

    @app.task
    async def three() -> int:
        seen.append("handler")
        return 3

    job = await three.enqueue()
    await run_until_idle(app)
    assert await job.result(timeout=1) == 6
    assert seen == ["outer>three", "inner>", "handler", "outer<"]


async def test_middleware_sees_failures(app: aioqueue.App) -> None:
    errors: list[str] = []

    @app.middleware
    async def record(job: aioqueue.JobContext, call_next: CallNext) -> Any:
        try:
            return await call_next()
        except Exception as exc:
            errors.append(f"{job.id}:{exc}")
            raise

    @app.task(retries=0)
    async def boom() -> None:
        raise ValueError("nope")

    job = await boom.enqueue()
    await run_until_idle(app)
    assert errors == [f"{job.id}:nope"]
    assert await job.status() is aioqueue.JobStatus.DEAD


async def test_task_hooks_follow_each_outcome(app: aioqueue.App) -> None:
    events: list[tuple[str, int, str]] = []

    @app.task(retries=1, backoff=aioqueue.Fixed(0))
    async def flaky(fail: bool) -> str:
        if fail:
            raise RuntimeError("bad")
        return "ok"

    @flaky.on_success
    async def success(job: aioqueue.JobContext, result: Any) -> None:
        events.append(("success", job.attempt, str(result)))

    @flaky.on_failure
    def failure(job: aioqueue.JobContext, error: BaseException) -> None:  # sync is fine
        events.append(("failure", job.attempt, str(error)))

    @flaky.on_retry
    async def retry(job: aioqueue.JobContext, error: BaseException, delay: float) -> None:
        events.append(("retry", job.attempt, f"{delay:g}"))

    @flaky.on_dead
    async def dead(job: aioqueue.JobContext, error: BaseException) -> None:
        events.append(("dead", job.attempt, type(error).__name__))
        raise RuntimeError("a broken hook changes nothing")

    await flaky.enqueue(False)
    await run_until_idle(app)
    assert events == [("success", 1, "ok")]
    events.clear()

    job = await flaky.enqueue(True)
    await run_until_idle(app)
    assert events == [
        ("failure", 1, "bad"),
        ("retry", 1, "0"),
        ("failure", 2, "bad"),
        ("dead", 2, "RuntimeError"),
    ]
    assert await job.status() is aioqueue.JobStatus.DEAD


async def test_startup_state_reaches_handlers_and_shutdown_closes_it(app: aioqueue.App) -> None:
    log: list[str] = []

    @app.on_startup
    async def open_pool(state: dict[str, Any]) -> None:
        state["pool"] = "db-pool"
        log.append("startup")

    @app.on_shutdown
    async def close_pool(state: dict[str, Any]) -> None:
        log.append(f"shutdown {state.pop('pool')}")

    @app.task
    async def uses_pool() -> str:
        job = aioqueue.current_job()
        return f"{job.state['pool']} for {job.task} attempt {job.attempt}/{job.max_attempts}"

    job = await uses_pool.enqueue()
    await run_until_idle(app)
    assert await job.result(timeout=1) == "db-pool for uses_pool attempt 1/3"
    assert log == ["startup", "shutdown db-pool"]


def test_current_job_outside_a_job_is_a_clear_error() -> None:
    with pytest.raises(LookupError, match="only available inside a running job"):
        aioqueue.current_job()


# -- every terminal outcome fires its hooks, once ------------------------------------------


def fragile_task(
    app: aioqueue.App, seen: list[tuple[str, str, str, int]]
) -> aioqueue.Task[[], None]:
    """A task with one attempt whose hooks record (hook, job id, error type, attempt)."""

    @app.task(retries=0, name="fragile")
    async def fragile() -> None: ...

    @fragile.on_failure
    def failure(job: aioqueue.JobContext, error: BaseException) -> None:
        seen.append(("failure", job.id, type(error).__name__, job.attempt))

    @fragile.on_retry
    def retry(job: aioqueue.JobContext, error: BaseException, delay: float) -> None:
        seen.append(("retry", job.id, type(error).__name__, job.attempt))

    @fragile.on_dead
    def dead(job: aioqueue.JobContext, error: BaseException) -> None:
        seen.append(("dead", job.id, type(error).__name__, job.attempt))

    return fragile


async def lease_and_die(app: aioqueue.App) -> None:
    """Take a job as a worker that dies at once: its lease has lapsed when taken."""
    taken = await leasing.take(
        await app.client(), app.queue().keys, lease="dead:1", lease_ms=0, limit=1
    )
    assert len(taken.jobs) == 1


async def test_a_job_dead_of_an_expired_lease_fires_its_hooks_once(app: aioqueue.App) -> None:
    """Its worker died holding its last attempt: the worker whose reclaim buries it runs
    on_failure and on_dead, once, however many workers race to reclaim it."""
    seen: list[tuple[str, str, str, int]] = []
    job = await fragile_task(app, seen).enqueue()
    await lease_and_die(app)
    async with app.worker(reclaim_interval=0.02), app.worker(reclaim_interval=0.02):
        await wait_until(lambda: _status_is(job, aioqueue.JobStatus.DEAD))
        await wait_until(lambda: _has(seen, 2))
    assert seen == [("failure", job.id, "LeaseExpired", 1), ("dead", job.id, "LeaseExpired", 1)]


async def test_a_worker_without_the_task_says_it_cannot_run_the_hooks(
    app: aioqueue.App, redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, str, str, int]] = []
    job = await fragile_task(app, seen).enqueue()
    await lease_and_die(app)
    stranger = aioqueue.App(redis_url=redis_url, prefix=prefix)  # same queue, no such task
    try:
        async with stranger.worker(reclaim_interval=0.02):
            await wait_until(lambda: _status_is(job, aioqueue.JobStatus.DEAD))
            await wait_until(lambda: _logged(caplog, "died of an expired lease"))
    finally:
        await stranger.close()
    assert seen == []
    (line,) = [r.getMessage() for r in caplog.records if "died of an expired" in r.getMessage()]
    assert job.id in line and "hooks did not run" in line


async def test_a_handler_abandoned_past_its_timeout_fires_its_hooks(app: aioqueue.App) -> None:
    """It ignored every cancellation: the job is settled without it, hooks included."""
    seen: list[str] = []
    let_go, gone = asyncio.Event(), asyncio.Event()  # the test ends it, after the worker

    @app.task(retries=0, timeout=0.1)
    async def stubborn() -> None:
        try:
            while not let_go.is_set():
                try:
                    await let_go.wait()
                except asyncio.CancelledError:
                    continue
        finally:
            gone.set()

    @stubborn.on_dead
    def dead(job: aioqueue.JobContext, error: BaseException) -> None:
        seen.append(type(error).__name__)

    job = await stubborn.enqueue()
    try:
        async with app.worker(grace=0.1) as worker:
            await wait_until(lambda: _status_is(job, aioqueue.JobStatus.DEAD), timeout=10)
            await wait_until(lambda: _has(seen, 1))
            assert worker.outcomes == {"bury": 1}
            let_go.set()  # the abandoned handler ends after all: nothing fires again
            await asyncio.wait_for(gone.wait(), 5)
    finally:
        let_go.set()
    assert seen == ["HandlerTimeout"]
    assert worker.outcomes == {"bury": 1}


async def test_a_handler_ending_at_the_second_cancellation_fires_its_hooks(
    app: aioqueue.App,
) -> None:
    seen: list[str] = []

    @app.task(retries=0, timeout=0.1)
    async def swallows_once() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)
        await asyncio.sleep(3600)  # the watchdog's second cancellation ends it here

    @swallows_once.on_failure
    def failure(job: aioqueue.JobContext, error: BaseException) -> None:
        seen.append(type(error).__name__)

    job = await swallows_once.enqueue()
    async with app.worker() as worker:
        await wait_until(lambda: _status_is(job, aioqueue.JobStatus.DEAD), timeout=10)
        await wait_until(lambda: _has(seen, 1))
        assert worker.outcomes == {"bury": 1}
    assert seen == ["HandlerTimeout"]


async def _status_is(job: aioqueue.Job[Any], status: aioqueue.JobStatus) -> bool:
    return await job.status() is status


async def _has(items: list[Any], count: int) -> bool:
    return len(items) >= count


async def _logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)
