"""Pausing a queue: every worker stops taking its jobs (running ones finish), enqueues go
on and wait, and resuming wakes the workers at once; a burst worker leaves a paused queue."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

import aioqueue
from tests.helpers import now, run_until_idle, wait_until


async def test_a_paused_queue_is_left_alone_by_every_worker_until_resumed(
    app: aioqueue.App, redis: Redis, redis_url: str, prefix: str
) -> None:
    ran: list[int] = []
    release = asyncio.Event()

    @app.task(queue="q")
    async def work(n: int) -> None:
        if n == 0:
            await release.wait()
        ran.append(n)

    other = aioqueue.App(redis_url=redis_url, prefix=prefix)  # a second worker process
    other.task(queue="q", name="work")(work.fn)
    queue = app.queue("q")
    try:
        async with app.worker(concurrency=5), other.worker(concurrency=5):
            await work.enqueue(0)

            async def running() -> bool:
                return (await queue.counts()).active == 1

            await wait_until(running)
            assert await queue.pause() is True
            assert await queue.pause() is False  # already paused
            assert await queue.paused()
            jobs = [await work.enqueue(n) for n in range(1, 6)]  # accepted, and they wait
            release.set()  # the running job finishes
            await wait_until(lambda: now(ran == [0]))

            async def looked() -> bool:  # every enqueue's wake-up token was taken by a
                return await redis.llen(queue.keys.notify) == 0  # worker, which then took

            await wait_until(looked)  # nothing (a worker ignoring the pause takes them)
            counts = await queue.counts()
            assert counts.paused and counts.ready == 5 and ran == [0]
            assert await queue.resume() is True
            assert await queue.resume() is False
            for job in jobs:
                await job.result(timeout=5)
        assert sorted(ran) == [0, 1, 2, 3, 4, 5]
        assert not (await queue.counts()).paused
    finally:
        await other.close()


async def test_a_burst_worker_leaves_a_paused_queue(app: aioqueue.App) -> None:
    @app.task(queue="q")
    async def work() -> None:
        return None

    await work.enqueue()
    await app.queue("q").pause()
    worker = await run_until_idle(app, queues=["q"])  # returns: nothing can be taken
    assert worker.outcomes["complete"] == 0
    assert (await app.queue("q").counts()).ready == 1
    await app.queue("q").resume()
    assert (await run_until_idle(app, queues=["q"])).outcomes["complete"] == 1
