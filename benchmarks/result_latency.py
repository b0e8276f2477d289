"""How soon ``await job.result()`` returns once a job is done, and what waiting costs.

    .venv/bin/python -m benchmarks.result_latency [--jobs 1000] [--waiters 200]

A worker runs in a separate process (``aioqueue worker``) on a private redis-server. The
task returns ``time.monotonic()`` as it ends (CLOCK_MONOTONIC: one clock for every process
on the machine), and the producer notes ``time.monotonic()`` when ``result()`` returns, so
the latency is handler end -> result in the caller's hands: the ack's batching and round
trip, the settled announcement, and the waiter's two reads.

  (a) sequential: enqueue one job, wait for it, N times (latency p50/p99/max)
  (b) concurrent: W waiters at once on W jobs that run 0.2 to 0.4 s (ending one by one
      over 0.2 s), so every waiter is waiting long before its job ends (latency p50/p99,
      and the producer's Redis calls per waiter: counted on its client, they stay the
      same however long a job runs)

Polling (the old ``result()``) is not a mode here: its latency was the poll interval
(up to 50 ms) and its calls grew with the wait.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

if TYPE_CHECKING:
    from redis.asyncio import Redis

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "latency"

app = aioqueue.App(redis_url=os.environ.get("AIOQUEUE_REDIS_URL"), prefix=PREFIX)


@app.task(timeout=None)
async def finish(seconds: float) -> float:
    """Sleep, then return the moment it ends (monotonic clock)."""
    if seconds:
        await asyncio.sleep(seconds)
    return time.monotonic()


class CallCounter:
    """Counts the commands the producer's client sends (single commands and pipelines)."""

    def __init__(self, client: Redis) -> None:
        self.calls = 0
        original_execute, original_pipeline = client.execute_command, client.pipeline

        async def execute_command(*args: Any, **options: Any) -> Any:
            self.calls += 1
            return await original_execute(*args, **options)

        def pipeline(*args: Any, **options: Any) -> Any:
            self.calls += 1  # one round trip, however many commands
            return original_pipeline(*args, **options)

        client.execute_command = execute_command  # type: ignore[method-assign]
        client.pipeline = pipeline  # type: ignore[method-assign]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def sequential(jobs: int) -> list[float]:
    latencies = []
    for _ in range(jobs):
        job = await finish.enqueue(0.0)
        ended = await job.result(timeout=30)
        latencies.append(time.monotonic() - ended)
    return latencies


async def concurrent(waiters: int) -> tuple[list[float], float]:
    client = await app.client()
    counter = CallCounter(client)
    runs = (0.2 + 0.2 * n / waiters for n in range(waiters))  # they end over 0.2 s
    jobs = await app.queue().enqueue_many(finish.enqueue(seconds) for seconds in runs)
    before = counter.calls

    async def wait(job: aioqueue.Job[float]) -> float:
        ended = await job.result(timeout=60)
        return time.monotonic() - ended

    latencies = await asyncio.gather(*(wait(job) for job in jobs))
    return list(latencies), (counter.calls - before) / waiters


def row(name: str, latencies: list[float]) -> str:
    ms = [value * 1000 for value in latencies]
    return (
        f"| {name} | {len(ms)} | {statistics.median(ms):.2f} | {percentile(ms, 0.99):.2f} "
        f"| {max(ms):.2f} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--waiters", type=int, default=200)
    args = parser.parse_args()
    with EmbeddedServer() as server:
        app.set_redis_url(server.url)
        concurrency = str(max(100, args.waiters))
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aioqueue", "worker", "benchmarks.result_latency:app",
            "--redis-url", server.url, "-c", concurrency, "--log-level", "warning", cwd=ROOT,
        )  # fmt: skip
        try:
            await finish.enqueue(0.0)  # warm up: the worker is up once this returns
            await (await finish.enqueue(0.0)).result(timeout=60)
            seq = await sequential(args.jobs)
            conc, calls_per_waiter = await concurrent(args.waiters)
        finally:
            worker.terminate()
            await asyncio.wait_for(worker.wait(), 30)
            await app.close()
    print(f"result latency: handler end -> result() returned (ms), {server.name}")
    print("| mode | jobs | p50 | p99 | max |\n|---|---:|---:|---:|---:|")
    print(row("sequential", seq))
    print(row(f"{args.waiters} concurrent waiters", conc))
    print(f"producer Redis calls per waiter (enqueue excluded): {calls_per_waiter:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
