"""What bucketed job records would save: memory per queued and per delayed job, today's
layout against a sketch of records kept as fields of shared hashes.

    .venv/bin/python -m benchmarks.layouts [--jobs 100000] [--repeat 3]

Today a queued job is a hash of its own (``job:<id>``: its key, object and dict entry cost
~100 B before its fields) plus its id in a ready list (a delayed one: in the schedule
ZSET). The sketch keeps the same record, its fields packed into one value (each field's
name and value, a separator after each), as the field ``<id>`` of one of 4,096 bucket
hashes (the slot the done sets use: ``ids.done_slot``, so the jobs enqueued together share
a bucket), with the same ready list or schedule entry. Only memory is measured: the sketch
is written with plain commands from the records aioqueue wrote, not by scripts (every
script that reads or writes a record would change: see the README's "What bounds it").

On a private redis-server, per case and repeat: ``enqueue_many`` of ``--jobs`` jobs (a
no-op's short payload, or one 200-byte argument; queued, or delayed a day), used_memory
growth per job; then the server is emptied and the same records, read back before, are
written in the sketch's layout, and its growth measured the same way. Buckets stay
listpack-encoded while each value is at most ``hash-max-listpack-value`` (64 B by
default): the 200-byte payload's rows are measured at the default and at 1,024.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
from typing import TYPE_CHECKING

import aioqueue
from aioqueue.core.ids import done_slot
from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from benchmarks.quick import used_memory

if TYPE_CHECKING:
    from redis.asyncio import Redis

PREFIX = QUEUE = "layout"
LISTPACK_VALUE = "hash-max-listpack-value"
CHUNK = 10_000  # jobs per enqueue_many, and per pipeline of the sketch
DAY_S = 86_400
Written = list[tuple[bytes, dict[bytes, bytes], float | None]]  # id, record, schedule score
KEYS = QueueKeys.for_queue(PREFIX, QUEUE)


async def today(app: aioqueue.App, jobs: int, argument: str | None, delayed: bool) -> float:
    """Bytes per job as aioqueue stores it now."""
    redis = await app.client()

    @app.task(queue=QUEUE)
    async def job(text: str | None = None) -> None: ...

    before = await used_memory(redis)
    for start in range(0, jobs, CHUNK):
        calls = [job.enqueue(argument) for _ in range(min(CHUNK, jobs - start))]
        if delayed:
            calls = [call.options(delay=DAY_S) for call in calls]
        await app.queue(QUEUE).enqueue_many(calls)
    return (await used_memory(redis) - before) / jobs


async def records(redis: Redis) -> Written:
    """Every job record of the queue, with its schedule score if it has one."""
    found = [key async for key in redis.scan_iter(match=f"{KEYS.job_prefix}*", count=1000)]
    out = []
    for start in range(0, len(found), CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for key in found[start : start + CHUNK]:
                pipe.hgetall(key)
                pipe.zscore(KEYS.schedule, key[len(KEYS.job_prefix) :])
            replies = await pipe.execute()
        for key, record, score in zip(
            found[start : start + CHUNK], replies[::2], replies[1::2], strict=True
        ):
            out.append((key[len(KEYS.job_prefix) :], record, score))
    return out


def packed(record: dict[bytes, bytes]) -> bytes:
    """The record's fields in one value: name, value, each followed by a separator."""
    return b"".join(name + b"\x00" + value + b"\x00" for name, value in record.items())


async def bucketed(redis: Redis, jobs: Written) -> float:
    """Bytes per job with the same records as fields of 4,096 bucket hashes."""
    before = await used_memory(redis)
    for start in range(0, len(jobs), CHUNK):
        async with redis.pipeline(transaction=False) as pipe:
            for job_id, record, score in jobs[start : start + CHUNK]:
                pipe.hset(f"{KEYS.base}:rec:{done_slot(job_id)}", job_id, packed(record))
                if score is None:
                    pipe.rpush(KEYS.ready_lists()[int(record.get(b"pr", b"5"))], job_id)
                else:
                    pipe.zadd(KEYS.schedule, {job_id: score})
            await pipe.execute()
    return (await used_memory(redis) - before) / len(jobs)


async def measure(
    url: str, jobs: int, argument: str | None, delayed: bool, value_max: int
) -> tuple[float, float]:
    app = aioqueue.App(redis_url=url, prefix=PREFIX, default_queue=QUEUE)
    async with app:
        redis = await app.client()
        await redis.flushall()
        await redis.config_set(LISTPACK_VALUE, value_max)
        now = await today(app, jobs, argument, delayed)
        written = await records(redis)
        await redis.flushall()
        sketch = await bucketed(redis, written)
        await redis.flushall()
        await redis.config_set(LISTPACK_VALUE, 64)
    return now, sketch


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.layouts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs; figures are medians")
    args = parser.parse_args()
    long = "x" * 180  # a payload of ~200 bytes
    cases = [
        ("queued, no-op payload", None, False, 64),
        ("delayed, no-op payload", None, True, 64),
        ("queued, 200-byte payload", long, False, 64),
        ("queued, 200-byte payload, hash-max-listpack-value 1024", long, False, 1024),
        ("delayed, 200-byte payload, hash-max-listpack-value 1024", long, True, 1024),
    ]
    print("| job | today (B/job) | bucketed records (B/job) | bucketed / today |")
    print("|---|---:|---:|---:|")
    with EmbeddedServer() as server:
        for label, argument, delayed, value_max in cases:
            runs = [
                asyncio.run(measure(server.url, args.jobs, argument, delayed, value_max))
                for _ in range(args.repeat)
            ]
            now = statistics.median(run[0] for run in runs)
            sketch = statistics.median(run[1] for run in runs)
            print(f"| {label} | {now:.0f} | {sketch:.0f} | {sketch / now:.2f} |")
    print(
        f"\naioqueue {aioqueue.__version__}, Python {platform.python_version()}; "
        f"{args.jobs:,} jobs a case, median of {args.repeat}; used_memory growth per job"
    )


if __name__ == "__main__":
    main()
