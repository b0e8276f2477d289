"""What Prometheus metrics cost a worker: drains with and without ``instrument(app)``.

    .venv/bin/python -m benchmarks.observer_overhead [--rounds 7] [--jobs 20000]

Each run is a fresh process on one private redis-server: enqueue N no-op jobs with
``enqueue_many``, then drain them with one burst worker (concurrency 100), timed from
worker start to drained, with the process's CPU time per job over the drain. The
instrumented side also serves ``/metrics`` (on a free loopback port, not scraped during
the drain, as with a Prometheus scraping every 15 s) and checks after the drain that
``jobs_total`` says N complete, so that a broken observer cannot look cheap.

The machine is shared and noisy: the sides alternate run by run (which one goes first
alternates too), and the table gives each side's median and their ratio (metrics / plain).
The target is a cost of at most 10 %: drain rate ratio >= 0.90, CPU ratio <= 1.10.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = {  # name: label
    "fill": "enqueue_many fill (jobs/s)",
    "drain": "drain, 1 in-process burst worker (jobs/s)",
    "drain_cpu_us": "drain: process CPU per job (µs)",
}


async def probe(url: str, prefix: str, jobs: int, metrics: bool) -> dict[str, float]:
    import aioqueue

    app = aioqueue.App(redis_url=url, prefix=prefix, default_queue="bench")

    @app.task(queue="bench", timeout=None)
    async def noop(n: int) -> None:
        return None

    server = None
    if metrics:
        from aioqueue.ops.metrics import instrument, start_metrics_server

        server = start_metrics_server(instrument(app), 0)
    queue = app.queue("bench")
    started = time.perf_counter()
    for start in range(0, jobs, 1000):
        await queue.enqueue_many(noop.enqueue(n) for n in range(start, min(jobs, start + 1000)))
    fill = jobs / (time.perf_counter() - started)
    worker = app.worker(burst=True, concurrency=100)
    cpu, wall = time.process_time(), time.perf_counter()
    await worker.run_until_idle()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert worker.outcomes["complete"] == jobs, worker.outcomes
    if server is not None:
        page = await asyncio.to_thread(_scrape, server.url)
        expected = f'aioqueue_jobs_total{{outcome="complete",queue="bench",task="noop"}} {jobs}.0'
        assert expected in page, f"not in the scrape: {expected}"
        server.close()
    await app.close()
    return {"fill": fill, "drain": jobs / wall, "drain_cpu_us": cpu / jobs * 1e6}


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def run_side(url: str, prefix: str, jobs: int, metrics: bool) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.observer_overhead", "--probe", url, prefix,
               str(jobs), "on" if metrics else "off"]  # fmt: skip
    out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def compare(rounds: int, jobs: int) -> None:
    from aioqueue.ops.embedded import EmbeddedServer

    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with EmbeddedServer() as server:
        for n in range(rounds):
            for metrics in (False, True) if n % 2 == 0 else (True, False):
                side = "metrics" if metrics else "plain"
                run = run_side(server.url, f"oo{n}{side}", jobs, metrics)
                results[metrics].append(run)
                print(f"round {n + 1} {side}: {run}", file=sys.stderr)
    print(f"Metrics cost, {jobs:,} no-op jobs, median of {rounds} alternating rounds\n")
    print("| figure | plain | metrics | metrics / plain |")
    print("|---|---:|---:|---:|")
    for key, label in FIGURES.items():
        plain = statistics.median(run[key] for run in results[False])
        instrumented = statistics.median(run[key] for run in results[True])
        print(f"| {label} | {plain:,.1f} | {instrumented:,.1f} | {instrumented / plain:.3f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        url, prefix, jobs, metrics = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        print(json.dumps(asyncio.run(probe(url, prefix, jobs, metrics == "on"))))
        return
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.observer_overhead",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    compare(args.rounds, args.jobs)


if __name__ == "__main__":
    main()
