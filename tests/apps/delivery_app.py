"""An app for delivery tests run in a separate worker process (killed mid-job)."""

from __future__ import annotations

import asyncio
import os

from redis.asyncio import Redis

import aioqueue

app = aioqueue.App(prefix=os.environ.get("TEST_PREFIX", "aioqueue-delivery-test"))


@app.task(retries=3)
async def hang_first_time(tag: str) -> str:
    """Record each run; the first run hangs (its worker gets killed), later ones finish.

    ``tag`` should be unique per test: the run counter is keyed by it alone.
    """
    redis = Redis.from_url(os.environ["AIOQUEUE_REDIS_URL"])
    try:
        runs = await redis.incr(f"delivery-test:runs:{tag}")
        await redis.rpush(f"delivery-test:started:{tag}", runs)
    finally:
        await redis.aclose()
    if runs == 1:
        await asyncio.sleep(3600)
    return f"done {tag} on run {runs}"
