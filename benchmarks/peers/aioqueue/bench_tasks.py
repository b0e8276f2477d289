"""The benchmark's tasks, importable by aioqueue's CLI: ``aioqueue worker bench_tasks:app``.

``noop`` and ``nap`` (sleeps 10 ms) for the drains; ``stamp`` (RPUSHes its start time to a
list the adapter BLPOPs: ``latency``) and ``clock`` (returns its start time as the job's
result: the delayed scenarios, with no extra round trip per job).

The queue (and key prefix) is ``--queue`` of the adapter, passed to worker processes in
``AIOQUEUE_BENCH_QUEUE``; every key is ``<queue>:{<queue>}:...``. Tasks use the defaults of
``@app.task`` (timeout 300 s, 3 attempts, priority normal).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

import orjson

import aioqueue

ENV_QUEUE = "AIOQUEUE_BENCH_QUEUE"


@dataclass(frozen=True, slots=True)
class Bench:
    """One App with the three benchmark tasks, and the list the ``stamp`` task pushes to."""

    app: aioqueue.App
    noop: aioqueue.Task[[], None]
    nap: aioqueue.Task[[], None]
    stamp: aioqueue.Task[[int], None]
    clock: aioqueue.Task[[int], float]
    stamps_key: str


def build(queue: str, redis_url: str | None = None) -> Bench:
    app = aioqueue.App(redis_url=redis_url, prefix=queue, default_queue=queue)
    stamps_key = f"{app.queue(queue).keys.base}:bench:stamps"

    @app.task
    async def noop() -> None:
        return None

    @app.task
    async def nap() -> None:
        await asyncio.sleep(0.01)

    @app.task
    async def stamp(index: int) -> None:
        """Record when the handler started: RPUSH [index, time.time()] to the stamps list."""
        started = time.time()
        redis = await app.client()
        await redis.rpush(stamps_key, orjson.dumps([index, started]))

    @app.task
    async def clock(index: int) -> float:
        """Return when the handler started (stored as the job's result by its ack)."""
        return time.time()

    return Bench(app, noop, nap, stamp, clock, stamps_key)


bench = build(os.environ.get(ENV_QUEUE) or "bench")
app = bench.app
