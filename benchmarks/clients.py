"""Enqueue rate of each client, beside Python's: same Redis, same run.

    .venv/bin/python -m benchmarks.clients [--jobs 20000] [--repeat 3]

For each client (Python's own producer, the Go client, the Node client) and each of
``--repeat`` rounds, in turn: N no-op jobs enqueued one at a time (each call awaited before
the next), then N in one bulk call (``enqueue_many`` / ``EnqueueMany`` / ``enqueueMany``).
Each client runs in its own process except Python's (this one), on a private
redis-server this starts, each round under a fresh key prefix. The table shows the median
rate of the rounds and its ratio to Python's. A client whose toolchain is missing (Go, or
Node with ``npm ci`` run in clients/node) is left out, with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from tests.conformance import runners

QUEUE = "bench"


async def python_rates(url: str, prefix: str, jobs: int) -> dict[str, float]:
    app = aioqueue.App(redis_url=url, prefix=prefix)
    queue = app.queue(QUEUE)
    try:
        await queue.enqueue("noop", -1)  # connect and load the script outside the timing
        started = time.perf_counter()
        for n in range(jobs):
            await queue.enqueue("noop", n)
        single = time.perf_counter() - started
        started = time.perf_counter()
        await queue.enqueue_many(queue.enqueue("noop", n) for n in range(jobs))
        bulk = time.perf_counter() - started
    finally:
        await app.close()
    return {"single_per_s": jobs / single, "bulk_per_s": jobs / bulk}


def process_rates(runner: runners.Runner) -> Any:
    async def rates(url: str, prefix: str, jobs: int) -> dict[str, float]:
        warm = {"do": "enqueue", "task": "noop", "args": [-1]}
        spec = {"url": url, "prefix": prefix, "queue": QUEUE, "config": {},
                "steps": [warm, {"do": "bench", "count": jobs}]}  # fmt: skip
        outcomes = await runner(spec)
        return {key: float(outcomes[-1][key]) for key in ("single_per_s", "bulk_per_s")}

    return rates


async def main(jobs: int, repeat: int) -> None:
    clients: dict[str, Any] = {"python": python_rates}
    left_out = {}
    with tempfile.TemporaryDirectory() as build:
        if reason := runners.go_missing():
            left_out["go"] = reason
        else:
            binary = runners.build_go(Path(build))
            clients["go"] = process_rates(runners.process_runner([str(binary)], runners.GO_MODULE))
        if reason := runners.node_missing():
            left_out["node"] = reason
        else:
            command = ["node", "conformance/runner.js"]
            clients["node"] = process_rates(runners.process_runner(command, runners.NODE_PACKAGE))
        server = EmbeddedServer()
        server.start()
        try:
            results: dict[str, list[dict[str, float]]] = {name: [] for name in clients}
            for _ in range(repeat):
                for name, rates in clients.items():
                    results[name].append(await rates(server.url, f"b{uuid.uuid4().hex[:8]}", jobs))
        finally:
            server.stop()
    report(results, jobs, left_out)


def report(results: dict[str, list[dict[str, float]]], jobs: int, left_out: dict[str, str]) -> None:
    medians = {
        name: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for name, rounds in results.items()
    }
    base = medians["python"]
    print(f"enqueue rate, {jobs} no-op jobs, median of {len(results['python'])} rounds")
    print(f"{'client':8} {'one at a time':>16} {'ratio':>6} {'bulk':>14} {'ratio':>6}")
    for name, rates in medians.items():
        single, bulk = rates["single_per_s"], rates["bulk_per_s"]
        print(
            f"{name:8} {single:>12,.0f} j/s {single / base['single_per_s']:>6.2f}"
            f" {bulk:>10,.0f} j/s {bulk / base['bulk_per_s']:>6.2f}"
        )
    for name, reason in left_out.items():
        print(f"{name}: left out: {reason}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    if options.jobs < 1 or options.repeat < 1:
        sys.exit("--jobs and --repeat must be at least 1")
    asyncio.run(main(options.jobs, options.repeat))
