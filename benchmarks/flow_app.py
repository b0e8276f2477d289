"""The tasks of ``benchmarks.flow_control``: a no-op that returns its number (so its record,
with the Redis-clock time it started, outlives the job) and one that sleeps 50 ms; the
no-op also serves the ``rate-<N>`` queues (limited to N/s, default burst)."""

from __future__ import annotations

import asyncio
import os

import aioqueue

app = aioqueue.App(prefix=os.environ.get("FLOW_PREFIX", "flow"))


@app.task(queue="paced")
async def tick(n: int) -> int:
    return n


@app.task(queue="capped")
async def slow(n: int) -> int:
    await asyncio.sleep(0.05)
    return n


RATES = (5, 100, 1000)  # the rates measured with the default burst, each on its own queue
rated = {rate: app.task(queue=f"rate-{rate}", name=f"tick_{rate}")(tick.fn) for rate in RATES}
