"""Concurrent enqueues coalesce into few script calls; the bulk API sends thousands at once."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

import aioqueue


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


async def _evalsha_calls(redis: Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_gathered_enqueues_share_round_trips_and_keep_their_order(
    app: aioqueue.App, redis: Redis
) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    await noop.enqueue(-1)  # connect and load the scripts first
    before = await _evalsha_calls(redis)
    jobs = await asyncio.gather(*(noop.enqueue(n) for n in range(500)))
    calls = await _evalsha_calls(redis) - before
    assert all(job.created for job in jobs)
    assert calls <= 10, f"{calls} script calls for 500 concurrent enqueues"
    ready = await redis.lrange(app.queue().keys.ready(5), 0, -1)
    assert [_text(raw) for raw in ready[1:]] == [job.id for job in jobs], "arrival order"


async def test_a_lone_enqueue_is_one_script_call(app: aioqueue.App, redis: Redis) -> None:
    @app.task
    async def noop() -> None: ...

    await noop.enqueue()
    before = await _evalsha_calls(redis)
    await noop.enqueue()
    assert await _evalsha_calls(redis) - before == 1


async def test_bulk_enqueue_writes_thousands_in_order(app: aioqueue.App, redis: Redis) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    queue = app.queue()
    await noop.enqueue(-1)
    before = await _evalsha_calls(redis)
    jobs = await queue.enqueue_many(noop.enqueue(n) for n in range(2500))
    assert await _evalsha_calls(redis) - before == 3  # 1000 + 1000 + 500, one pipeline
    assert len(jobs) == 2500 and all(job.created for job in jobs)
    assert (await queue.counts()).ready == 2501
    ready = await redis.lrange(queue.keys.ready(5), 1, -1)
    assert [_text(raw) for raw in ready] == [job.id for job in jobs]
    dup = await queue.enqueue_many([noop.enqueue(0).options(id=jobs[0].id)])
    assert dup[0].created is False and dup[0].id == jobs[0].id


async def test_bulk_enqueue_validates_everything_before_writing(app: aioqueue.App) -> None:
    @app.task
    async def noop(n: int) -> None: ...

    @app.task(queue="other")
    async def elsewhere() -> None: ...

    queue = app.queue()
    with pytest.raises(aioqueue.InvalidArguments):
        await queue.enqueue_many([noop.enqueue(1), noop.enqueue("x", "too many")])  # type: ignore[call-arg,arg-type]
    with pytest.raises(aioqueue.ConfigError, match="got a job for 'other'"):
        await queue.enqueue_many([noop.enqueue(1), elsewhere.enqueue()])
    assert (await queue.counts()).ready == 0
