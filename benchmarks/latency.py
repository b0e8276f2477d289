"""Latency on an idle worker and on one busy draining a backlog of another queue.

    .venv/bin/python -m benchmarks.latency [--rounds 3] [--backlog 400000]

One worker process (``aioqueue worker benchmarks.latency:app -q lat -q load -c 100``) on
a private redis-server. Its handler ``stamp`` returns ``time.time()`` as its first act (one
machine, one clock), so:
  enqueue -> start   200 jobs enqueued one at a time, 5 ms apart, on queue ``lat``: the
                     handler's start less the time just before ``await enqueue()``
  delayed lateness   100 jobs due at whole-ms times spread over 1 s (the first 0.5 s
                     ahead), on ``lat``: the handler's start less the due time
each measured twice per round: with the worker idle, and while it drains ``--backlog``
no-op jobs of queue ``load`` (enqueued before it starts; the run checks that the backlog
outlasted the measurement). p50 / p99 / max over all rounds, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aioqueue
from aioqueue.store.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[1]

app = aioqueue.App()  # the worker process's: AIOQUEUE_REDIS_URL names the server


@app.task(queue="lat", timeout=None)
async def stamp(index: int) -> float:
    return time.time()


@app.task(queue="load", timeout=None)
async def noop(index: int) -> None:
    return None


async def enqueue_to_start(jobs: int = 200, gap: float = 0.005) -> tuple[list[float], ...]:
    """Each job's enqueue -> start, and its split by the record's Redis-clock times:
    enqueued -> taken (in Redis), taken -> started (in the worker)."""
    latencies, in_redis, in_worker, handles = [], [], [], []
    for index in range(jobs):
        sent = time.time()
        handles.append((sent, await stamp.enqueue(index)))
        await asyncio.sleep(gap)  # pacing: sparse arrivals, each on a worker with room
    for sent, job in handles:
        started = await job.result(timeout=60)
        latencies.append((started - sent) * 1000)
        info = await job.info()
        if info.enqueued_at_ms is not None and info.started_at_ms is not None:
            in_redis.append(float(info.started_at_ms - info.enqueued_at_ms))
            in_worker.append(started * 1000 - info.started_at_ms)
    return latencies, in_redis, in_worker


async def delayed_lateness(jobs: int = 100, spread_ms: int = 1000) -> list[float]:
    start = datetime.now(UTC) + timedelta(milliseconds=500)
    rng = random.Random(7)
    dues = sorted(start + timedelta(milliseconds=rng.randrange(spread_ms)) for _ in range(jobs))
    dues = [due.replace(microsecond=due.microsecond // 1000 * 1000) for due in dues]
    handles = [await stamp.enqueue(i).options(at=due) for i, due in enumerate(dues)]
    return [
        (await job.result(timeout=60) - due.timestamp()) * 1000
        for job, due in zip(handles, dues, strict=True)
    ]


async def round_(backlog: int) -> tuple[tuple[list[float], ...], list[float], int]:
    """One round: (enqueue -> start, lateness) in ms, and the load jobs still ready after."""
    load = app.queue("load")
    if backlog:
        for start in range(0, backlog, 10_000):
            await load.enqueue_many(noop.enqueue(n) for n in range(start, start + 10_000))
    worker = subprocess.Popen(  # noqa: ASYNC220 - started once per round, then awaited on Redis
        [sys.executable, "-m", "aioqueue", "worker", "benchmarks.latency:app",
         "-q", "lat", "-q", "load", "-c", "100", "--log-level", "warning"],
        cwd=ROOT, env=os.environ.copy(),
    )  # fmt: skip
    try:
        await (await stamp.enqueue(-1)).result(timeout=30)  # the worker is up
        starts = await enqueue_to_start()
        lateness = await delayed_lateness()
        left = (await load.counts()).ready
    finally:
        worker.terminate()
        await asyncio.to_thread(worker.wait, 30)
        await (await app.client()).flushall()
    return starts, lateness, left


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):.2f} / {p99:.2f} / {ordered[-1]:.2f}"


async def main(rounds: int, backlog: int) -> None:
    results: dict[str, list[list[float]]] = {"idle": [[], [], [], []], "busy": [[], [], [], []]}
    short = 0
    for _ in range(rounds):
        for name, size in (("idle", 0), ("busy", backlog)):
            (starts, in_redis, in_worker), lateness, left = await round_(size)
            measured = (starts, in_redis, in_worker, lateness)
            for found, values in zip(results[name], measured, strict=True):
                found.extend(values)
            short += name == "busy" and left == 0
    await app.close()
    print(f"\n1 worker process (concurrency 100), {rounds} rounds pooled; ms")
    header = "enqueue -> start | (enqueued -> taken | taken -> started) | delayed lateness"
    print(f"| worker | {header} |")
    print("|---|---:|---:|---:|---:|")
    for name, (starts, in_redis, in_worker, lateness) in results.items():
        label = "idle" if name == "idle" else f"draining {backlog:,} no-op jobs of another queue"
        parts = (starts, in_redis, in_worker, lateness)
        print(f"| {label} | " + " | ".join(summary(values) for values in parts) + " |")
    print("(each cell: p50 / p99 / max; the split is by the record's Redis-clock times, whole ms)")
    if short:
        print(f"(in {short} round(s) the backlog ran out before the measurement ended)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=400_000)
    options = parser.parse_args()
    with EmbeddedServer() as server:
        os.environ["AIOQUEUE_REDIS_URL"] = server.url
        app.set_redis_url(server.url)
        asyncio.run(main(options.rounds, options.backlog))
