"""An app with a periodic job, for the multi-process periodic test."""

from __future__ import annotations

import os

from redis.asyncio import Redis

import aioqueue

app = aioqueue.App(prefix=os.environ.get("TEST_PREFIX", "aioqueue-periodic-test"))


@app.periodic(every=0.25)
@app.task
async def beat() -> None:
    """Record each run in Redis, by its job id (a tick's: ``periodic:beat:<ms>``)."""
    redis = Redis.from_url(os.environ["AIOQUEUE_REDIS_URL"])
    try:
        await redis.rpush(f"{app.settings.prefix}:beats", aioqueue.current_job().id)
    finally:
        await redis.aclose()
