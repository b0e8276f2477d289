"""What flow control and workflows cost, against plain jobs, on a private redis-server.

    .venv/bin/python -m benchmarks.workflows [--jobs 20000] [--rounds 3]
                                             [--fan-in 1000,10000,100000]

One in-process worker (concurrency 100) drains no-op jobs; each scenario is timed from
worker start until its last job has finished, and Redis's CPU (INFO used_cpu_sys + user)
is read around it. Scenarios, alternated round by round (median of ``--rounds``):
  plain        N no-op jobs, nothing linked (the baseline)
  concurrency  the same with ``set_limits(concurrency=100000)``: a limit that never binds,
               so what is measured is its cost in take.lua
  rate         the same with ``set_limits(rate="1000000/s", burst=1000)``: likewise
  groups       N jobs in 100 groups (``.options(group=...)``): one at a time per group
  chord        a chord of N children and one callback that gets all N results
Then fan-in scaling: chords of each ``--fan-in`` size, the cost per child (wall and Redis
CPU) at each size: flat means O(children), no scan.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

CONCURRENCY = 100
GROUPS = 100


def build(url: str, prefix: str) -> tuple[aioqueue.App, Any, Any]:
    app = aioqueue.App(redis_url=url, prefix=prefix, default_queue="w")

    @app.task(queue="w", timeout=None)
    async def noop(n: int) -> None:
        return None

    @app.task(queue="w", timeout=None)
    async def gather(results: list[Any]) -> int:
        return len(results)

    return app, noop, gather


async def redis_cpu(app: aioqueue.App) -> float:
    info = await (await app.client()).info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def timed(
    app: aioqueue.App, jobs: int, wait: Callable[[], Awaitable[Any]]
) -> dict[str, float]:
    """Run a worker until ``wait`` returns; jobs/s and Redis CPU µs per job."""
    cpu = await redis_cpu(app)
    started = time.perf_counter()
    async with app.worker(concurrency=CONCURRENCY):
        await wait()
    elapsed = time.perf_counter() - started
    cpu = await redis_cpu(app) - cpu
    return {"rate": jobs / elapsed, "redis_us": cpu / jobs * 1e6}


async def drained(queue: aioqueue.Queue) -> None:
    while True:
        counts = await queue.counts()
        if counts.ready == counts.active == counts.scheduled == 0:
            return
        await asyncio.sleep(0.005)


async def scenario(name: str, url: str, prefix: str, jobs: int) -> dict[str, float]:
    app, noop, gather = build(url, prefix)
    queue = app.queue("w")
    try:
        if name == "concurrency":
            await queue.set_limits(concurrency=100_000)
        elif name == "rate":
            await queue.set_limits(rate="1000000/s", burst=1000)
        if name == "chord":
            flow = await aioqueue.chord([noop.enqueue(n) for n in range(jobs)], gather.callback())
            return await timed(app, jobs, lambda: flow.result(timeout=600))
        if name == "groups":
            await queue.enqueue_many(
                noop.enqueue(n).options(group=f"g{n % GROUPS}") for n in range(jobs)
            )
        else:
            await queue.enqueue_many(noop.enqueue(n) for n in range(jobs))
        return await timed(app, jobs, lambda: drained(queue))
    finally:
        await app.close()


async def main(jobs: int, fan_in: list[int], rounds: int) -> None:
    names = ["plain", "concurrency", "rate", "groups", "chord"]
    with EmbeddedServer() as server:
        results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for number in range(rounds):
            for name in names:
                results[name].append(await scenario(name, server.url, f"b{number}{name}", jobs))
        base = statistics.median(r["rate"] for r in results["plain"])
        base_cpu = statistics.median(r["redis_us"] for r in results["plain"])
        print(f"\n{jobs:,} no-op jobs, 1 worker (concurrency {CONCURRENCY}), median of {rounds}")
        print(
            f"{'scenario':<12} {'jobs/s':>9} {'vs plain':>9} {'Redis µs/job':>13} {'vs plain':>9}"
        )
        for name in names:
            rate = statistics.median(r["rate"] for r in results[name])
            cpu = statistics.median(r["redis_us"] for r in results[name])
            print(
                f"{name:<12} {rate:>9,.0f} {rate / base:>9.3f} {cpu:>13.1f} {cpu / base_cpu:>9.3f}"
            )
        print(f"\nfan-in: one chord of N children; cost per child, median of {rounds}")
        print(f"{'children':>9} {'children/s':>11} {'Redis µs/child':>15}")
        for size in fan_in:
            runs = [
                await scenario("chord", server.url, f"f{size}-{number}", size)
                for number in range(rounds)
            ]
            rate = statistics.median(r["rate"] for r in runs)
            cpu = statistics.median(r["redis_us"] for r in runs)
            print(f"{size:>9,} {rate:>11,.0f} {cpu:>15.1f}")
            await flush(server.url)


async def flush(url: str) -> None:
    """Empty the private server between fan-in sizes (their kept records add up)."""
    client = Redis.from_url(url)
    try:
        await client.flushall()
    finally:
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--fan-in", default="1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    sizes = [int(size) for size in options.fan_in.split(",")]
    asyncio.run(main(options.jobs, sizes, options.rounds))
