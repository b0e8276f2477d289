"""Latency on an idle worker and on one busy draining a backlog of another queue.

    .venv/bin/python -m benchmarks.latency [--rounds 3] [--backlog 400000]

One worker process (``aioqueue worker benchmarks.latency:app -q lat -q load -c 100``) on
a private redis-server. Its handler ``stamp`` returns ``time.time()`` as its first act (one
machine, one clock), so:
  enqueue -> start   200 jobs enqueued one at a time, 5 ms apart, on queue ``lat``: the
                     handler's start less the time just before ``await enqueue()``
  delayed lateness   100 jobs due at whole-ms times spread over 1 s (the first 0.5 s
                     ahead), on ``lat``: the handler's start less the due time
each measured three times per round: with the worker idle; while another worker process
(``-q load``) drains ``--backlog`` no-op jobs of queue ``load`` (the machine loaded: its
two cores shared by Redis, the drain and this worker); and while this worker drains them
itself (``-q lat -q load``: its own event loop busy). The backlog is enqueued before the
workers start; the run checks that it outlasted the measurement. p50 / p99 / max over all
rounds, in ms.
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
from aioqueue.ops.embedded import EmbeddedServer

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


def start_worker(queues: list[str]) -> subprocess.Popen[bytes]:
    """``aioqueue worker`` of this app on ``queues``, at concurrency 100."""
    queue_args = [arg for queue in queues for arg in ("-q", queue)]
    return subprocess.Popen(
        [sys.executable, "-m", "aioqueue", "worker", "benchmarks.latency:app", *queue_args,
         "-c", "100", "--log-level", "warning"],
        cwd=ROOT, env=os.environ.copy(),
    )  # fmt: skip


async def round_(backlog: int, load: str) -> tuple[tuple[list[float], ...], list[float], int]:
    """One round: (enqueue -> start, lateness) in ms, and the load jobs still ready after.
    ``load``: "" (none), "other" (another worker process drains it), "same" (this one)."""
    load_queue = app.queue("load")
    if backlog:
        for start in range(0, backlog, 10_000):
            await load_queue.enqueue_many(noop.enqueue(n) for n in range(start, start + 10_000))
    queues = {"": ["lat"], "other": ["lat"], "same": ["lat", "load"]}[load]
    commands = [queues] + ([["load"]] if load == "other" else [])
    workers = [start_worker(names) for names in commands]
    try:
        await (await stamp.enqueue(-1)).result(timeout=30)  # the worker is up
        starts = await enqueue_to_start()
        lateness = await delayed_lateness()
        left = (await load_queue.counts()).ready
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            await asyncio.to_thread(worker.wait, 30)
        await (await app.client()).flushall()
    return starts, lateness, left


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"{statistics.median(ordered):.2f} / {p99:.2f} / {ordered[-1]:.2f}"


LABELS = {
    "": "idle",
    "other": "idle, another worker process draining {backlog:,} no-op jobs",
    "same": "draining {backlog:,} no-op jobs of another queue itself",
}


async def main(rounds: int, backlog: int) -> None:
    results: dict[str, list[list[float]]] = {load: [[], [], [], []] for load in LABELS}
    short = 0
    for _ in range(rounds):
        for load in LABELS:
            (starts, in_redis, in_worker), lateness, left = await round_(
                backlog if load else 0, load
            )
            measured = (starts, in_redis, in_worker, lateness)
            for found, values in zip(results[load], measured, strict=True):
                found.extend(values)
            short += bool(load) and left == 0
    await app.close()
    print(f"\nthe worker on queue lat: 1 process (concurrency 100), {rounds} rounds pooled; ms")
    header = "enqueue -> start | (enqueued -> taken | taken -> started) | delayed lateness"
    print(f"| worker | {header} |")
    print("|---|---:|---:|---:|---:|")
    for load, parts in results.items():
        label = LABELS[load].format(backlog=backlog)
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
