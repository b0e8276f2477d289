"""An app with a periodic job, for the multi-process periodic test."""

from __future__ import annotations

import os

from redis.asyncio import Redis

import aioqueue

app = aioqueue.App(prefix=os.environ.get("TEST_PREFIX", "aioqueue-periodic-test"))


@app.periodic(every=0.25)
@app.task
async def beat() -> None:
    """Count runs in Redis: the test compares them with the ticks enqueued."""
    redis = Redis.from_url(os.environ["AIOQUEUE_REDIS_URL"])
    try:
        await redis.incr(f"{app.settings.prefix}:beats")
    finally:
        await redis.aclose()
