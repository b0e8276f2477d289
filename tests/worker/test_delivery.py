"""At-least-once delivery: a job survives the loss of a wake-up token and a killed worker."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.store.scripts import leasing
from tests.apps import delivery_app
from tests.helpers import counts, drain, run_until_idle, wait_until


async def test_a_lost_wakeup_token_loses_no_job(app: aioqueue.App, redis: Redis) -> None:
    """BLPOP only ever pops a token: if its reply is lost, the job is still in Redis."""

    @app.task
    async def echo(value: int) -> int:
        return value

    job = await echo.enqueue(7)
    queue = app.queue()
    assert await redis.lpop(queue.keys.notify) is not None  # a "lost" BLPOP reply
    async with app.worker(idle_wait=0.2):
        assert await job.result(timeout=5) == 7


@pytest.mark.real_redis("a worker process, SIGKILLed")
async def test_killed_worker_job_is_reclaimed_and_completes(
    redis_url: str, prefix: str, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOQUEUE_REDIS_URL", redis_url)  # the task's own Redis connection
    env = {**os.environ, "AIOQUEUE_REDIS_URL": redis_url, "TEST_PREFIX": prefix}
    app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    producer = app.queue()
    job = await producer.enqueue("hang_first_time", prefix)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aioqueue", "worker", "tests.apps.delivery_app:app", "--lease", "1",
        env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        started = f"delivery-test:started:{prefix}"
        await wait_until(lambda: _has_items(redis, started), timeout=15)
        assert await job.status() is aioqueue.JobStatus.ACTIVE
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()

    # The job exists only as an active lease now; another worker reclaims it when it expires.
    worker_app = aioqueue.App(redis_url=redis_url, prefix=prefix)
    worker_app.task(retries=3, name="hang_first_time")(delivery_app.hang_first_time.fn)
    async with worker_app.worker(lease=1, reclaim_interval=0.1):
        assert await job.result(timeout=15) == f"done {prefix} on run 2"
    info = await job.info()
    assert info.attempts == 2
    assert (await producer.counts()).active == 0
    await app.close()
    await worker_app.close()


async def test_a_job_that_keeps_killing_its_worker_ends_dead(app: aioqueue.App) -> None:
    """Reclaim counts attempts: after the maximum, the job is buried, not looped forever."""

    @app.task(retries=1)
    async def never_acked() -> None:
        return None

    job = await never_acked.enqueue()
    queue = app.queue()
    redis = await app.client()
    for _ in range(2):  # two takes whose workers "die": their leases are expired at once
        taken = await leasing.take(redis, queue.keys, lease="dead:1", lease_ms=0, limit=1)
        assert len(taken.jobs) == 1
        await wait_until(lambda: _reclaim_once(app), timeout=5)
    info = await job.info()
    assert info.status is aioqueue.JobStatus.DEAD
    assert info.error is not None and info.error.type == "LeaseExpired"
    assert info.attempts == 2
    worker = await run_until_idle(app)
    assert worker.outcomes["complete"] == 0


async def _reclaim_once(app: aioqueue.App) -> bool:
    result = await leasing.reclaim(
        await app.client(), app.queue().keys, limit=10, default_max_attempts=3
    )
    return result.requeued + result.buried > 0


async def _has_items(redis: Redis, key: str) -> bool:
    return int(await redis.llen(key)) > 0


async def test_reconcile_puts_back_jobs_whose_entries_vanished(
    app: aioqueue.App, redis: Redis
) -> None:
    """An evicting server can delete a queue's lists and leave its records: those jobs
    would stay queued forever. reconcile() finds them by their records and puts them back."""

    @app.task
    async def echo(n: int) -> int:
        return n

    queue = app.queue()
    ready = [await echo.enqueue(n) for n in range(3)]
    later = await echo.enqueue(3).options(delay=3600)
    running = await echo.enqueue(4)
    keys = queue.keys
    await redis.delete(*keys.ready_lists())  # what an eviction may do (ready jobs first)
    await redis.rpush(keys.ready(5), running.id)
    taken = await leasing.take(await app.client(), keys, lease="gone:1", lease_ms=60_000, limit=1)
    assert [job.job_id for job in taken.jobs] == [running.id]
    await redis.delete(keys.schedule, keys.active)
    assert await queue.counts() == counts()  # nothing to be seen: the jobs would be stranded

    assert await queue.reconcile() == 5
    assert await queue.reconcile() == 0  # nothing left to repair
    await wait_until(lambda: _reclaim_once(app))  # the running one's lease had no entry
    outcomes = await drain(app)
    assert outcomes == {"complete": 5}
    assert [await job.result(timeout=1) for job in (*ready, later, running)] == [0, 1, 2, 3, 4]
