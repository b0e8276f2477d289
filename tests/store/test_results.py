"""Waiting for a result without polling: the ack announces finished jobs (pub/sub), and
a waiter reads the job a fixed number of times however long it waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

import aioqueue
from aioqueue.store.settled import parse_ids
from tests.helpers import wait_until

NEVER = 3600.0  # a poll interval that never comes round within a test


class CountingReads:
    """Counts the reads (status or record) a queue makes for its waiters."""

    def __init__(self, queue: aioqueue.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        for name in ("status", "info"):
            monkeypatch.setattr(queue, name, self._counted(getattr(queue, name)))

    def _counted(self, read: Any) -> Any:
        async def counted(job_id: str) -> Any:
            self.calls += 1
            return await read(job_id)

        return counted


async def test_a_waiter_reads_the_job_twice_however_long_it_runs(
    app: aioqueue.App, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = asyncio.Event()

    @app.task
    async def slow() -> str:
        await release.wait()
        return "done"

    job = await slow.enqueue()
    reads = CountingReads(app.queue(), monkeypatch)
    worker = app.worker()
    running = asyncio.create_task(worker.run())
    try:
        waiter = asyncio.create_task(job.result(timeout=30, poll_interval=NEVER))
        await wait_until(lambda: _active(redis, app, job.id), 10)  # not through the queue
        await asyncio.sleep(0.5)  # the job runs a while: a poller would read it ~10 times
        assert not waiter.done()
        release.set()
        assert await waiter == "done"
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 10)
    assert reads.calls == 2  # its status on entry, its record when announced


async def test_many_waiters_share_one_subscription(app: aioqueue.App, redis: Redis) -> None:
    @app.task
    async def double(n: int) -> int:
        return 2 * n

    jobs = [await double.enqueue(n) for n in range(50)]
    before = await _pubsub_clients(redis)
    waiters = [asyncio.create_task(job.result(timeout=30, poll_interval=NEVER)) for job in jobs]
    worker = app.worker()
    running = asyncio.create_task(worker.run())
    try:
        assert await asyncio.gather(*waiters) == [2 * n for n in range(50)]
        assert await _pubsub_clients(redis) - before <= 2  # the app's one (and the worker's)
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 10)


async def test_cancelling_a_queued_job_wakes_its_waiter(app: aioqueue.App) -> None:
    @app.task
    async def never_run() -> None: ...

    job = await never_run.enqueue()
    waiter = asyncio.create_task(job.result(timeout=30, poll_interval=NEVER))
    await asyncio.sleep(0.2)  # let it subscribe and read the status once
    assert await job.cancel()
    with pytest.raises(aioqueue.JobCancelled):
        await waiter


async def test_a_lost_subscription_is_made_again_and_the_result_still_arrives(
    app: aioqueue.App, redis: Redis
) -> None:
    release = asyncio.Event()

    @app.task
    async def slow() -> int:
        await release.wait()
        return 7

    job = await slow.enqueue()
    waiter = asyncio.create_task(job.result(timeout=30, poll_interval=NEVER))
    await wait_until(lambda: _subscribed(redis, app.queue().keys.settled_channel), 10)
    await redis.client_kill_filter(_type="pubsub")  # the connection drops: messages are lost
    worker = app.worker()
    running = asyncio.create_task(worker.run())
    try:
        await wait_until(lambda: _subscribed(redis, app.queue().keys.settled_channel), 10)
        release.set()
        assert await waiter == 7
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 10)


async def test_a_timeout_still_raises_result_timeout(app: aioqueue.App) -> None:
    @app.task
    async def never_run() -> None: ...

    job = await never_run.enqueue()
    with pytest.raises(aioqueue.ResultTimeout):
        await job.result(timeout=0.3, poll_interval=NEVER)


async def test_waiting_works_with_redis_away_and_gives_up_at_the_timeout(
    redis_url: str, prefix: str
) -> None:
    from aioqueue.ops.embedded import EmbeddedServer

    with EmbeddedServer() as server:
        app = aioqueue.App(redis_url=server.url, prefix=prefix, connect_timeout=0.2)
        job = await app.queue().enqueue("anything")
        await asyncio.to_thread(server.kill)
        with pytest.raises((aioqueue.ResultTimeout, aioqueue.ServerUnavailable, OSError)):
            await asyncio.wait_for(job.result(timeout=1, poll_interval=0.2), 20)
        await app.close()


def test_settled_messages_carry_any_bytes() -> None:
    assert parse_ids(b"3:abc1:x0:") == [b"abc", b"x", b""]
    assert parse_ids(b"4:a:b\n") == [b"a:b\n"]
    assert parse_ids(b"") == []
    with pytest.raises(ValueError):
        parse_ids(b"garbage")


async def _active(redis: Redis, app: aioqueue.App, job_id: str) -> bool:
    return await redis.hget(app.queue().keys.job(job_id), "s") == b"active"


async def _pubsub_clients(redis: Redis) -> int:
    return sum(1 for client in await redis.client_list() if client.get("flags") == "P")


async def _subscribed(redis: Redis, channel: str) -> bool:
    counts = dict(await redis.pubsub_numsub(channel))
    return int(counts.get(channel.encode(), 0)) > 0
