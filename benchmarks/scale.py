"""Drain rate with 1, 2 and 4 worker processes, against one Redis and against a local
3-master Redis Cluster, and the Redis CPU each job costs.

    .venv/bin/python -m benchmarks.scale [--jobs 60000] [--processes 1,2,4]

For each target and each process count: fill three queues (on the cluster: one per master)
with no-op jobs by ``enqueue_many``, then start that many ``aioqueue worker --burst -c 100``
processes and time them until every one has drained and exited ("from spawn": Python's
start-up and the connection included, as a user sees it). Redis CPU per job is the growth
of ``used_cpu_user + used_cpu_sys`` (INFO, summed over every node) across the drain,
divided by the jobs. This machine has two cores shared by Redis, the workers and this
script: past two processes the workers compete with Redis for CPU, which the figures show.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from redis import Redis as SyncRedis
from redis.crc import key_slot

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.ops.embedded_cluster import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[1]


def queue_names(prefix: str, ports: list[int], cluster: EmbeddedCluster | None) -> list[str]:
    """Three queue names; on a cluster, one served by each master."""
    if cluster is None:
        return ["q0", "q1", "q2"]
    share = 16384 // len(cluster.masters)
    found: dict[int, str] = {}
    for n in range(10_000):
        slot = key_slot(QueueKeys.for_queue(prefix, f"q{n}").base.encode())
        found.setdefault(min(slot // share, len(cluster.masters) - 1), f"q{n}")
        if len(found) == len(cluster.masters):
            return [found[i] for i in sorted(found)]
    raise AssertionError("no queue names for every master")


def redis_cpu(ports: list[int]) -> float:
    total = 0.0
    for port in ports:
        with SyncRedis(port=port) as client:
            info: dict[str, Any] = client.info("cpu")
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


async def fill(url: str, prefix: str, queues: list[str], jobs: int) -> None:
    app = aioqueue.App(redis_url=url, prefix=prefix)
    per_queue = jobs // len(queues)
    for queue in queues:

        @app.task(queue=queue, name=f"noop_{queue}")
        async def noop(n: int) -> None:
            return None

        for start in range(0, per_queue, 1000):
            chunk = range(start, min(per_queue, start + 1000))
            await app.queue(queue).enqueue_many(noop.enqueue(n) for n in chunk)
    await app.close()


def drain(url: str, prefix: str, queues: list[str], processes: int) -> float:
    env = {**os.environ, "AIOQUEUE_REDIS_URL": url, "SCALE_PREFIX": prefix,
           "SCALE_QUEUES": ",".join(queues)}  # fmt: skip
    command = [sys.executable, "-m", "aioqueue", "--log-level", "warning", "worker",
               "benchmarks.scale_app:app", "--burst", "-c", "100"]  # fmt: skip
    started = time.perf_counter()
    running = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    for process in running:
        if process.wait(timeout=600) != 0:
            raise RuntimeError(f"a worker exited with {process.returncode}")
    return time.perf_counter() - started


def measure(label: str, url: str, ports: list[int], cluster: EmbeddedCluster | None,
            jobs: int, counts: list[int]) -> list[tuple[str, int, float, float]]:  # fmt: skip
    rows = []
    for processes in counts:
        prefix = f"scale{processes}{time.time_ns() % 100000}"
        queues = queue_names(prefix, ports, cluster)
        asyncio.run(fill(url, prefix, queues, jobs))
        cpu = redis_cpu(ports)
        seconds = drain(url, prefix, queues, processes)
        cpu_us = (redis_cpu(ports) - cpu) / jobs * 1e6
        total = jobs // len(queues) * len(queues)
        rows.append((label, processes, total / seconds, cpu_us))
        print(f"{label}, {processes} process(es): {total / seconds:,.0f} jobs/s, "
              f"Redis {cpu_us:.1f} µs/job", file=sys.stderr)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--processes", default="1,2,4")
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    rows = []
    with EmbeddedServer() as server:
        rows += measure("one Redis", server.url, [server.port], None, args.jobs, counts)
    with EmbeddedCluster(masters=3) as cluster:
        ports = [node.port for node in cluster.masters]
        rows += measure("3-master cluster", cluster.url, ports, cluster, args.jobs, counts)
    base = rows[0][2]
    print(f"aioqueue {aioqueue.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; {args.jobs:,} no-op jobs in 3 queues, workers -c 100, "
          "timed from spawn\n")  # fmt: skip
    print(
        "| target | worker processes | drain (jobs/s) | vs 1 process, one Redis "
        "| Redis CPU (µs/job) |"
    )
    print("|---|---:|---:|---:|---:|")
    for label, processes, rate, cpu_us in rows:
        print(f"| {label} | {processes} | {rate:,.0f} | {rate / base:.2f} | {cpu_us:.1f} |")


if __name__ == "__main__":
    main()
