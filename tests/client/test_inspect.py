"""Seeing into a queue: jobs listed by state, per-minute outcome history, and the
progress a running job reports."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue import current_job
from tests.helpers import drain, now, wait_until

# -- queue.jobs(state) -------------------------------------------------------------------


async def test_ready_jobs_are_listed_in_the_order_they_will_run(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def work(n: int) -> None: ...

    queue = app.queue("q")
    for n in range(3):
        await work.enqueue(n).options(id=f"low-{n}", priority=1)
    await work.enqueue(9).options(id="high", priority=8)
    cancelled = await work.enqueue(5).options(id="gone", priority=1)
    await cancelled.cancel()

    listed = await queue.jobs("ready")
    assert [info.id for info in listed] == ["high", "low-0", "low-1", "low-2"]
    assert listed[0].args == [9] and listed[0].task == "work" and listed[0].priority == 8
    assert {info.status for info in listed} == {aioqueue.JobStatus.QUEUED}
    page = await queue.jobs("ready", limit=2, offset=1)
    assert [info.id for info in page] == ["low-0", "low-1"]
    assert await queue.jobs("ready", offset=10) == []


async def test_scheduled_active_and_dead_jobs_are_listed(app: aioqueue.App) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @app.task(queue="q", retries=0)
    async def hold() -> None:
        started.set()
        await release.wait()

    @app.task(queue="q", retries=0)
    async def boom() -> None:
        raise ValueError("no")

    queue = app.queue("q")
    await boom.enqueue().options(id="doomed")
    await drain(app, queues=["q"])
    later = await hold.enqueue().options(id="later", delay=3600)
    now = await hold.enqueue().options(id="now")
    worker = app.worker(queues=["q"])
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        assert [info.id for info in await queue.jobs("active")] == [now.id]
        assert [info.id for info in await queue.jobs("scheduled")] == [later.id]
        [dead] = await queue.jobs("dead")
        assert dead.id == "doomed" and dead.error is not None and dead.error.type == "ValueError"
    finally:
        release.set()
        worker.request_stop()
        await asyncio.wait_for(running, 10)
    with pytest.raises(ValueError, match="state must be one of"):
        await queue.jobs("finished")  # type: ignore[arg-type]
    with pytest.raises(aioqueue.ConfigError):
        await queue.jobs("ready", limit=-1)


# -- history -------------------------------------------------------------------------------


async def test_history_counts_each_outcome_in_the_current_minute(app: aioqueue.App) -> None:
    @app.task(queue="q", retries=1, backoff=aioqueue.Fixed(0))
    async def flaky(fail_times: int) -> None:
        if current_job().attempt <= fail_times:
            raise RuntimeError("not yet")

    @app.task(queue="q", retries=0, dead_letter=False)
    async def fails() -> None:
        raise RuntimeError("never")

    for _ in range(3):
        await flaky.enqueue(0)  # complete at once
    await flaky.enqueue(1)  # retried, then complete
    await flaky.enqueue(2)  # retried, then dead
    await fails.enqueue()  # failed, not dead-lettered
    await drain(app, queues=["q"])

    history = await app.queue("q").history(minutes=5)
    assert len(history) == 5
    assert all(minute.complete == 0 for minute in history[:3])  # the app is newer than that
    totals = {
        name: sum(getattr(minute, name) for minute in history)
        for name in ("complete", "retried", "failed", "dead", "cancelled")
    }
    assert totals == {"complete": 4, "retried": 2, "failed": 1, "dead": 1, "cancelled": 0}
    assert history[-1].minute_ms > history[0].minute_ms
    assert sum(minute.failures for minute in history) == 4


async def test_no_history_is_kept_when_it_is_off(redis_url: str, prefix: str, redis: Redis) -> None:
    app = aioqueue.App(redis_url=redis_url, prefix=prefix, history=0)

    @app.task
    async def noop() -> None: ...

    await noop.enqueue()
    await drain(app)
    assert [key async for key in redis.scan_iter(match=f"{prefix}:*history*")] == []
    assert sum(minute.complete for minute in await app.queue().history()) == 0
    await app.close()


async def test_history_keys_expire_after_the_window(app: aioqueue.App, redis: Redis) -> None:
    @app.task
    async def noop() -> None: ...

    await noop.enqueue()
    await drain(app)
    [key] = [key async for key in redis.scan_iter(match=f"{app.settings.prefix}:*history*")]
    ttl = await redis.pttl(key)
    assert 24 * 3600_000 < ttl <= 25 * 3600_000  # the window, and the hour it covers


# -- progress ------------------------------------------------------------------------------


async def test_progress_is_readable_while_the_job_runs_and_after(app: aioqueue.App) -> None:
    reported, release = asyncio.Event(), asyncio.Event()

    @app.task
    async def long(steps: int) -> str:
        for step in range(steps):
            assert await current_job().set_progress({"done": step + 1, "of": steps})
        reported.set()
        await release.wait()
        return "ok"

    job = await long.enqueue(3)
    assert await job.progress() is None
    worker = app.worker()
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(reported.wait(), 10)
        assert await job.progress() == {"done": 3, "of": 3}
        assert (await job.info()).progress == {"done": 3, "of": 3}
        release.set()
        assert await job.result(timeout=10) == "ok"
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 10)
    assert (await job.info()).progress == {"done": 3, "of": 3}  # kept with the result


async def test_progress_that_json_cannot_hold_fails_the_attempt(app: aioqueue.App) -> None:
    @app.task(retries=0)
    async def odd() -> None:
        await current_job().set_progress({1, 2})

    job = await odd.enqueue()
    await drain(app)
    info = await job.info()
    assert info.status is aioqueue.JobStatus.DEAD
    assert info.error is not None and info.error.type == "SerializationError"


async def test_progress_after_the_lease_is_lost_is_refused(app: aioqueue.App, redis: Redis) -> None:
    started, go_on = asyncio.Event(), asyncio.Event()
    answers: list[bool] = []

    @app.task
    async def slow() -> None:
        started.set()
        await go_on.wait()
        answers.append(await current_job().set_progress(1))

    job = await slow.enqueue()
    worker = app.worker()
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), 10)
        await redis.hset(app.queue().keys.job(job.id), "w", "someone-else")  # lease taken over
        go_on.set()
        await wait_until(lambda: now(bool(answers)), 10)
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 10)
    assert answers == [False]
    assert await redis.hget(app.queue().keys.job(job.id), "pg") is None


# -- what `aioqueue check` asks: the workers and the server ------------------------------


def test_worker_warnings_name_mixed_task_sets_and_windows() -> None:
    same: list[dict[str, Any]] = [
        {"id": "a", "tasks": ["t"], "idempotency_ms": 1000},
        {"id": "b", "tasks": ["t"]},
    ]
    assert aioqueue.Queue.worker_warnings(same) == []
    assert aioqueue.Queue.worker_warnings([]) == []
    mixed: list[dict[str, Any]] = [
        {"id": "a", "tasks": ["t"], "idempotency_ms": 1000},
        {"id": "b", "tasks": ["u"], "idempotency_ms": 2000},
    ]
    tasks, windows = aioqueue.Queue.worker_warnings(mixed)
    assert "a run [t]" in tasks and "b run [u]" in tasks
    assert "different idempotency windows (1s, 2s)" in windows


async def test_the_eviction_policy_of_the_suites_server_is_safe(app: aioqueue.App) -> None:
    eviction = await app.queue().eviction()
    assert eviction.policy == "noeviction" and not eviction.unsafe
    assert eviction.problem() is None
