"""The task of ``benchmarks.fairness``'s cap scenario, run by worker processes: sleeps
20 ms and returns its tenant (a result keeps its record, with the Redis-clock times it
started and finished, after the job)."""

from __future__ import annotations

import asyncio
import os

import aioqueue

app = aioqueue.App(prefix=os.environ.get("FAIR_PREFIX", "fair"))


@app.task(queue="capped")
async def slow(tenant: str) -> str:
    await asyncio.sleep(0.02)
    return tenant
