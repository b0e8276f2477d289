"""Cancellation of running jobs (abort): by pub/sub at once, or at the next lease renewal."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.core.lifecycle import Taken
from aioqueue.worker.acks import Batcher
from aioqueue.worker.inflight import InFlight
from tests.helpers import counts, drain, now, wait_until


async def _status_is(job: aioqueue.Job[object], status: aioqueue.JobStatus) -> bool:
    return await job.status() is status


async def test_cancel_aborts_a_running_job_and_it_is_not_retried(app: aioqueue.App) -> None:
    started, never = asyncio.Event(), asyncio.Event()
    cancelled_inside = []

    @app.task(retries=5)
    async def long_job() -> None:
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled_inside.append(True)
            raise

    job = await long_job.enqueue()
    async with app.worker() as worker:
        await asyncio.wait_for(started.wait(), 5)
        assert await job.cancel() is True
        await wait_until(lambda: _status_is(job, aioqueue.JobStatus.CANCELLED), timeout=5)
        assert worker.outcomes["abort"] == 1
    assert cancelled_inside == [True]
    info = await job.info()
    assert info.attempts == 1
    assert info.error is not None and info.error.type == "JobCancelled"
    with pytest.raises(aioqueue.JobCancelled):
        await job.result(timeout=1)
    assert (await app.queue().counts()).ready == 0


async def test_a_missed_abort_message_is_caught_at_lease_renewal(
    app: aioqueue.App, redis: Redis
) -> None:
    started, never = asyncio.Event(), asyncio.Event()

    @app.task
    async def long_job() -> None:
        started.set()
        await never.wait()

    job = await long_job.enqueue()
    async with app.worker(lease=1) as worker:  # renewals every third of a second
        await asyncio.wait_for(started.wait(), 5)
        await redis.hset(app.queue().keys.job(job.id), "ab", 1)  # marked, never published
        await wait_until(lambda: _status_is(job, aioqueue.JobStatus.CANCELLED), timeout=5)
        assert worker.outcomes["abort"] == 1


async def test_cancel_of_a_finished_or_unknown_job_is_false(app: aioqueue.App) -> None:
    @app.task
    async def quick() -> int:
        return 1

    job = await quick.enqueue()
    async with app.worker():
        assert await job.result(timeout=5) == 1
    assert await job.cancel() is False
    assert await app.queue().cancel("no-such-job") is False


@pytest.mark.parametrize("how", ["pub/sub", "lease renewal"])
async def test_cancel_stays_within_its_queue(app: aioqueue.App, redis: Redis, how: str) -> None:
    """Ids name jobs within a queue: two running jobs with one id in two queues are two
    jobs, and cancelling one leaves the other running, whether the abort is heard at once
    (pub/sub) or found at the next lease renewal (a missed message)."""
    release = asyncio.Event()
    running: list[str] = []

    @app.task
    async def hold() -> str:
        running.append(aioqueue.current_job().queue)
        await release.wait()
        return "done"

    first = await app.queue("q1").enqueue(hold).options(id="same")
    second = await app.queue("q2").enqueue(hold).options(id="same")

    async def both_running() -> bool:
        return sorted(running) == ["q1", "q2"]

    async with app.worker(queues=["q1", "q2"], lease=1) as worker:
        await wait_until(both_running)
        if how == "pub/sub":
            assert await app.queue("q1").cancel("same") is True
        else:  # marked, never published
            await redis.hset(app.queue("q1").keys.job("same"), "ab", 1)
        await wait_until(lambda: _status_is(first, aioqueue.JobStatus.CANCELLED))
        assert await second.status() is aioqueue.JobStatus.ACTIVE
        release.set()
        assert await second.result(timeout=5) == "done"
        assert worker.outcomes == {"abort": 1, "complete": 1}


async def test_counts_leave_out_cancelled_jobs(app: aioqueue.App, redis: Redis) -> None:
    """A cancelled queued job keeps its ready entry until a take skips it (O(1) cancel);
    counts() must not show it as ready, before or after the skip."""

    @app.task(queue="q")
    async def noop(n: int) -> int:
        return n

    queue = app.queue("q")
    jobs = [await noop.enqueue(n) for n in range(3)]
    for job in jobs:
        assert await job.cancel() is True
    assert await queue.counts() == counts()
    kept = await noop.enqueue(3)
    assert await queue.counts() == counts(ready=1)
    outcomes = await drain(app, queues=["q"])
    assert outcomes == {"complete": 1}
    assert await kept.result(timeout=1) == 3
    assert await queue.counts() == counts()
    assert await redis.hgetall(queue.keys.skipped) == {}  # every skip taken back


async def test_a_started_worker_hears_cancels_before_it_takes_a_job(
    app: aioqueue.App, redis: Redis
) -> None:
    """A job cancelled as soon as it runs is stopped by the message, not at the lease
    renewal a lease later: the abort channel is subscribed before the first take."""

    @app.task
    async def noop() -> None:
        pass

    channel = app.queue().keys.abort_channel
    worker = app.worker(concurrency=1)
    await worker.start()
    try:
        [(_, subscribers)] = await redis.pubsub_numsub(channel)
        assert subscribers == 1
    finally:
        await worker.stop()


async def test_an_abort_heard_before_the_job_s_task_began_ends_it(
    app: aioqueue.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The abort message can come in the same loop step as the take's reply: the job's task
    was made but had not begun. Cancelled then, the task ended without a line of its code
    (the job never settled, its slot held until shutdown); now the abort is recorded, and
    the task ends the job as aborted when it begins."""
    ran = []

    @app.task
    async def long() -> None:
        ran.append(True)
        await asyncio.Event().wait()

    admit = InFlight.admit

    def admit_then_abort(self: InFlight, taken: Taken, acks: Batcher, **kw: bool) -> None:
        admit(self, taken, acks, **kw)
        self.abort(acks.name, taken.id)  # (before the loop runs the new task)

    monkeypatch.setattr(InFlight, "admit", admit_then_abort)
    job = await long.enqueue()
    async with app.worker(concurrency=1) as worker:
        with pytest.raises(aioqueue.JobCancelled):
            await job.result(timeout=10)
        await wait_until(lambda: now(worker.running == 0))
    assert ran == []
