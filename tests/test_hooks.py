"""Middleware around every job, per-task hooks, startup/shutdown hooks and current_job()."""

from __future__ import annotations

from typing import Any

import pytest

import aioqueue
from aioqueue.middleware import CallNext
from tests.helpers import run_until_idle


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
