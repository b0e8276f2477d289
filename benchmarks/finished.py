"""What finished jobs keep in Redis, per job, and what a rate and a window hold at steady
state (default settings: ``result_ttl`` 1 day, ``idempotency_ttl`` = ``result_ttl``).

    .venv/bin/python -m benchmarks.finished [--jobs 100000] [--repeat 1]

On a private redis-server, for each case: ``used_memory`` after a warm-up drain of 1,000, then
``enqueue_many`` and a drain by an in-process burst worker (concurrency 100), then
``used_memory`` again (nothing has expired yet), the growth divided by the jobs. Cases:
  - jobs that return None: their ids' fingerprints (63-bit integers) go in 4,096 done sets
    per idempotency window, here a few dozen each, in Redis's compact intset encoding (8 B
    a member, up to ``set-max-intset-entries`` a set: 512 by default);
  - the same with that setting at 0, so that every done set is a hash table, as each is
    at steady state once rate x window passes 4,096 x the setting (512: 2,097,152 jobs,
    100 jobs/s for 5.8 h);
  - jobs that return a 20-character string: a record each, kept for ``result_ttl``.
The breakdown by key (MEMORY USAGE, SAMPLES 0) shows where the bytes are; the per-minute
outcome counts (``history:<hour>``) are one small hash per queue and hour, not per job.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
from collections import Counter
from typing import Any

from redis.asyncio import Redis

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

QUEUE = "finished"
INTSET = "set-max-intset-entries"
DONE_SLOTS = 4096  # done sets per idempotency window (store/lua/include/done.lua)
RATES = (100, 1_000, 10_000)
WINDOWS = (("1 h", 3600), ("1 day", 86_400))
RAISED = 65_536  # a set-max-intset-entries that keeps 268 M ids a window compact


def build_app(url: str, result: str | None) -> tuple[aioqueue.App, aioqueue.Task[[], Any]]:
    app = aioqueue.App(redis_url=url, prefix="fin", default_queue=QUEUE)

    @app.task(queue=QUEUE, timeout=None)
    async def job() -> str | None:
        return result

    return app, job


async def used_memory(redis: Redis) -> int:
    info: dict[str, Any] = await redis.info("memory")
    return int(info["used_memory"])


async def by_role(redis: Redis) -> Counter[str]:
    """Bytes by key role (``done``, ``job``, ``history``, ...), MEMORY USAGE of each."""
    sizes: Counter[str] = Counter()
    keys = [key async for key in redis.scan_iter(match="fin:*", count=1000)]
    for start in range(0, len(keys), 10_000):  # a million in one pipeline outlasts its timeout
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys[start : start + 10_000]:
                pipe.memory_usage(key, samples=0)
            usage = await pipe.execute()
        for key, size in zip(keys[start : start + 10_000], usage, strict=True):
            sizes[key.decode().split(":")[2]] += size or 0
    return sizes


async def measure(url: str, jobs: int, intset: int, result: str | None) -> tuple[float, str]:
    """Bytes kept per finished job, and the breakdown by key role (per job)."""
    app, job = build_app(url, result)
    async with app:
        redis = await app.client()
        await redis.flushall()
        await drain(app, job, 1000)  # warm up: scripts loaded, connections open
        await redis.flushall()
        await redis.config_set(INTSET, intset)  # each case sets its own
        before = await used_memory(redis)
        await drain(app, job, jobs)
        kept = (await used_memory(redis) - before) / jobs
        roles = await by_role(redis)
        await redis.flushall()
    shares = ", ".join(f"{role} {size / jobs:.1f}" for role, size in roles.most_common())
    return kept, shares


async def drain(app: aioqueue.App, job: aioqueue.Task[[], Any], jobs: int) -> None:
    for start in range(0, jobs, 10_000):  # one call of a million outlasts enqueue_timeout
        await app.queue(QUEUE).enqueue_many(job.enqueue() for _ in range(min(10_000, jobs - start)))
    worker = app.worker(burst=True, concurrency=100)
    await worker.run_until_idle()
    if worker.outcomes != {"complete": jobs}:
        raise RuntimeError(f"expected {jobs} complete jobs, got {worker.outcomes}")


def steady_state(intset: int, small: float, large: float, with_result: float) -> list[str]:
    """Memory held by finished jobs at a rate, over a window: done sets last one to two
    windows (the peak, twice rate x window, is what to size for); records one result_ttl.
    Jobs returning None are shown at the server's set-max-intset-entries and at RAISED."""
    lines = [
        "| jobs/s | window | returning None (peak) | the same, set-max-intset-entries "
        f"{RAISED:,} | returning a 20-char string |",
        "|---:|---|---:|---:|---:|",
    ]
    for rate in RATES:
        for label, seconds in WINDOWS:
            held = rate * seconds
            per_set = held / DONE_SLOTS
            none = 2 * held * (small if per_set <= intset else large)
            raised = 2 * held * (small if per_set <= RAISED else large)
            lines.append(
                f"| {rate:,} | {label} | {gb(none)} | {gb(raised)} | {gb(held * with_result)} |"
            )
    return lines


def gb(size: float) -> str:
    return f"{size / 1e9:,.1f} GB" if size >= 1e8 else f"{size / 1e6:,.0f} MB"


async def server_config(url: str) -> tuple[str, int]:
    """The server's version and its set-max-intset-entries."""
    async with Redis.from_url(url, decode_responses=True) as redis:
        info: dict[str, Any] = await redis.info("server")
        intset = str((await redis.config_get(INTSET))[INTSET])
    return str(info["redis_version"]), int(intset)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.finished",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1, help="runs; figures are medians")
    args = parser.parse_args()
    figures: list[float] = []
    with EmbeddedServer() as server:
        version, intset = asyncio.run(server_config(server.url))
        cases = [("returning None", intset, None), (f"returning None, {INTSET} 0", 0, None),
                 ("returning a 20-character string", intset, "x" * 20)]  # fmt: skip
        for label, entries, result in cases:
            runs = [
                asyncio.run(measure(server.url, args.jobs, entries, result))
                for _ in range(args.repeat)
            ]
            figures.append(statistics.median(kept for kept, _ in runs))
            print(f"| {label} | {figures[-1]:.1f} B | {runs[0][1]} |")
    print(
        f"\naioqueue {aioqueue.__version__}, redis-server {version}, Python "
        f"{platform.python_version()}; default settings, median of {args.repeat}; "
        f"{args.jobs:,} jobs a case, {INTSET} {intset}; rows above: used_memory growth "
        "per job | by key role (B per job, MEMORY USAGE)\n"
    )
    print("\n".join(steady_state(intset, *figures)))


if __name__ == "__main__":
    main()
