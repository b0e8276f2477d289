"""Entries another program pushed into a queue's lists: a worker buries each in the dead set
with its bytes kept exactly, empty ones included, and carries on (DESIGN.md §6)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

import aioqueue
from tests.helpers import run_until_idle


@pytest.mark.parametrize("entry", [b"", b" ", b"\x00"], ids=["empty", "space", "nul"])
async def test_a_blank_entry_comes_back_byte_for_byte(
    app: aioqueue.App, redis: Redis, entry: bytes
) -> None:
    @app.task(queue="q")
    async def ok(n: int) -> int:
        return n

    queue = app.queue("q")
    await redis.rpush(queue.keys.ready(5), entry)  # no job record, no notify token
    job = await ok.enqueue(1)

    worker = await run_until_idle(app, concurrency=1)
    assert worker.outcomes == {"complete": 1}
    assert await job.result(timeout=1) == 1
    (dead,) = await queue.dead_jobs()
    assert dead.raw == entry  # not None: the bytes come back exactly
    assert dead.error is not None
    assert dead.error.type == "PoisonEntry"
    assert dead.status is aioqueue.JobStatus.DEAD
