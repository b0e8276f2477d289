"""An app for the clock-skew test: its worker runs under faketime, its job records clocks."""

from __future__ import annotations

import os
import time

from redis.asyncio import Redis

import aioqueue

app = aioqueue.App(prefix=os.environ.get("TEST_PREFIX", "aioqueue-clock-test"))


@app.task
async def stamp(tag: str) -> dict[str, float]:
    """Return the Redis clock and this process's clock at the start of the run."""
    redis = Redis.from_url(os.environ["AIOQUEUE_REDIS_URL"])
    try:
        seconds, micros = await redis.time()
    finally:
        await redis.aclose()
    return {"redis_ms": seconds * 1000 + micros / 1000, "local_ms": time.time() * 1000}
