"""Does a job cost more when a million others wait? Cost per job against the backlog's size.

    .venv/bin/python -m benchmarks.backlog [--backlogs 10000,1000000] [--jobs 20000] [--rounds 3]

Per backlog size B, on a fresh private redis-server, in one process (one in-process worker
at concurrency 100):
  queued     B no-op jobs queued at priority 0 (``enqueue_many``), then the measured part:
             ``--jobs`` jobs enqueued at priority 5 ahead of them (``enqueue_many``: jobs/s)
             and drained (the worker takes priority 5 first and stops once those are done:
             jobs/s from worker start, and Redis CPU per job, INFO used_cpu around the drain);
             the B jobs stay queued throughout. Memory per queued job: used_memory / B.
  scheduled  B jobs scheduled a day ahead, then: a poller's tick with nothing due (the
             promote script, 2,000 sequential calls: Redis CPU per call, from INFO
             commandstats), ``--jobs`` delayed jobs enqueued (jobs/s) and, due at once,
             promoted and drained (jobs/s). Memory per scheduled job: used_memory / B.
The table gives the median of ``--rounds`` rounds and the ratio of the largest backlog's
figure to the smallest's (the issue's target: within 10 %; a tick O(log n)).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import TYPE_CHECKING, Any

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store.scripts import leasing
from benchmarks.quick import redis_cpu, used_memory

if TYPE_CHECKING:
    from redis.asyncio import Redis

CONCURRENCY = 100
FILL_BATCH = 50_000


class Probe:
    """One app on one server: a backlog task and a measured task that counts its runs."""

    def __init__(self, url: str, jobs: int) -> None:
        self.app = aioqueue.App(redis_url=url, prefix="backlog", default_queue="q")
        self.jobs = jobs
        self.done = 0
        self.finished = asyncio.Event()

        @self.app.task(timeout=None, priority=0)
        async def backlog() -> None:
            return None

        @self.app.task(timeout=None, priority=5)
        async def measured() -> None:
            self.done += 1
            if self.done == self.jobs:
                self.finished.set()

        self.backlog, self.measured = backlog, measured

    async def fill(self, count: int, *, delay: float | None = None) -> None:
        queue = self.app.queue()
        for start in range(0, count, FILL_BATCH):
            size = min(FILL_BATCH, count - start)
            calls = (self.backlog.enqueue() for _ in range(size))
            await queue.enqueue_many(c.options(delay=delay) if delay else c for c in calls)

    async def enqueue_measured(self, *, delay: float | None = None) -> float:
        """Enqueue the measured jobs in one enqueue_many; jobs/s."""
        calls = (self.measured.enqueue() for _ in range(self.jobs))
        started = time.perf_counter()
        await self.app.queue().enqueue_many(c.options(delay=delay) if delay else c for c in calls)
        return self.jobs / (time.perf_counter() - started)

    async def drain_measured(self, redis: Redis) -> tuple[float, float]:
        """Run a worker until the measured jobs are done: jobs/s, Redis CPU µs per job."""
        self.done, self.finished = 0, asyncio.Event()
        cpu_before = await redis_cpu(redis)
        started = time.perf_counter()
        async with self.app.worker(concurrency=CONCURRENCY):
            await asyncio.wait_for(self.finished.wait(), timeout=600)
            seconds = time.perf_counter() - started
            cpu = await redis_cpu(redis) - cpu_before
            await self.app.queue().pause()  # the backlog stays: only the jobs in hand run
        await self.app.queue().resume()
        return self.jobs / seconds, cpu / self.jobs * 1e6


async def evalsha_usec(redis: Redis) -> tuple[int, int]:
    stats: dict[str, dict[str, Any]] = await redis.info("commandstats")
    entry = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(entry["calls"]), int(entry["usec"])


async def tick_cost(probe: Probe, redis: Redis, calls: int = 2000) -> float:
    """Redis µs per promote call with nothing due (what a poller's idle tick costs)."""
    keys = probe.app.queue().keys
    calls_before, usec_before = await evalsha_usec(redis)
    for _ in range(calls):
        promoted = await leasing.promote(redis, keys, limit=100)
        assert promoted.count == 0, "nothing may be due"
    calls_after, usec_after = await evalsha_usec(redis)
    return (usec_after - usec_before) / (calls_after - calls_before)


async def one_round(backlog: int, jobs: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with EmbeddedServer() as server:
        probe = Probe(server.url, jobs)
        async with probe.app:
            redis = await probe.app.client()
            base = await used_memory(redis)
            await probe.fill(backlog)
            figures["memory per queued job (B)"] = (await used_memory(redis) - base) / backlog
            figures["enqueue_many, queued (jobs/s)"] = await probe.enqueue_measured()
            rate, cpu = await probe.drain_measured(redis)
            figures["drain (jobs/s)"], figures["Redis CPU per job, drain (µs)"] = rate, cpu
            # the worker may start a few of the backlog while it stops; the rest stay queued
            counts = await probe.app.queue().counts()
            assert counts.ready >= backlog - 500, (counts, probe.done)  # (a few hundred ran)

            await redis.flushall()
            base = await used_memory(redis)
            await probe.fill(backlog, delay=86_400)
            figures["memory per scheduled job (B)"] = (await used_memory(redis) - base) / backlog
            figures["idle poller tick (Redis µs)"] = await tick_cost(probe, redis)
            figures["enqueue_many, delayed (jobs/s)"] = await probe.enqueue_measured(delay=0.001)
            rate, cpu = await probe.drain_measured(redis)
            figures["drain of due jobs (jobs/s)"] = rate
            figures["Redis CPU per due job (µs)"] = cpu
            assert (await probe.app.queue().counts()).scheduled == backlog  # none due yet
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="10000,1000000")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(size) for size in args.backlogs.split(",")]
    results: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
    for round_ in range(args.rounds):  # alternate sizes, so drift hits each alike
        for size in sizes:
            results[size].append(await one_round(size, args.jobs))
            print(f"round {round_ + 1}, backlog {size:,}: done", flush=True)
    medians = {
        size: {name: statistics.median(r[name] for r in runs) for name in runs[0]}
        for size, runs in results.items()
    }
    small, large = sizes[0], sizes[-1]
    print(f"\n{args.jobs:,} measured jobs, median of {args.rounds}\n")
    print(f"| measurement | backlog {small:,} | backlog {large:,} | ratio |")
    print("|---|---:|---:|---:|")
    for name in medians[small]:
        a, b = medians[small][name], medians[large][name]
        print(f"| {name} | {a:,.1f} | {b:,.1f} | {b / a:.3f} |")


if __name__ == "__main__":
    asyncio.run(main())
