"""The core path end to end: enqueue, take, run, ack, result."""

from __future__ import annotations

import aioqueue
from tests.helpers import run_until_idle


async def test_enqueue_run_and_result(app: aioqueue.App) -> None:
    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    job = await add.enqueue(2, 3)
    assert await job.status() is aioqueue.JobStatus.QUEUED
    worker = await run_until_idle(app)
    assert worker.outcomes["complete"] == 1
    assert await job.result(timeout=1) == 5
    assert await job.status() is aioqueue.JobStatus.COMPLETE
