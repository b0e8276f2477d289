"""Drain rate with 1, 2 and 4 worker processes, against one Redis and against a local
3-master Redis Cluster, and the worker and Redis CPU each job costs.

    .venv/bin/python -m benchmarks.scale [--jobs 60000] [--processes 1,2,4] [--repeat 1]
        [--no-cluster]

For each target and each process count: fill three queues (on the cluster: one per master)
with no-op jobs by ``enqueue_many``, then start that many ``aioqueue worker --burst -c 100``
processes and time them until every one has drained and exited ("from spawn": Python's
start-up and the connection included, as a user sees it). Redis CPU per job is the growth
of ``used_cpu_user + used_cpu_sys`` (INFO, summed over every node) across the drain,
divided by the jobs; worker CPU per job is the workers' CPU time (getrusage of the
children) less a start-up's (an ``aioqueue worker --burst`` with nothing to do, timed
once per target) per process, divided by the jobs. Each figure is the median of
``--repeat`` runs. This machine has two cores shared by Redis, the workers and this
script: past two processes the workers compete with Redis for CPU, which the figures show.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis as SyncRedis
from redis.crc import key_slot

import aioqueue
from aioqueue.core.keys import QueueKeys
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.ops.embedded_cluster import EmbeddedCluster

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Row:
    """The medians for one target and process count."""

    label: str
    processes: int
    rate: float  # jobs/s, from spawn
    worker_us: float  # worker CPU per job, start-up excluded
    redis_us: float  # Redis CPU per job, every node


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


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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
            jobs: int, counts: list[int], repeat: int) -> list[Row]:  # fmt: skip
    idle = queue_names("scaleidle", ports, cluster)
    cpu = children_cpu()
    drain(url, "scaleidle", idle, 1)
    startup = children_cpu() - cpu  # a worker's start and exit, with no job to run
    rows = []
    for processes in counts:
        runs = [run(url, ports, cluster, jobs, processes, startup) for _ in range(repeat)]
        medians = (statistics.median(column) for column in zip(*runs, strict=True))
        rate, worker_us, redis_us = medians
        rows.append(Row(label, processes, rate, worker_us, redis_us))
        print(f"{label}, {processes} process(es): {rate:,.0f} jobs/s, worker "
              f"{worker_us:.1f} µs/job, Redis {redis_us:.1f} µs/job", file=sys.stderr)  # fmt: skip
    return rows


def run(url: str, ports: list[int], cluster: EmbeddedCluster | None, jobs: int,
        processes: int, startup: float) -> tuple[float, float, float]:  # fmt: skip
    """One drain: jobs/s from spawn, worker and Redis CPU per job (µs)."""
    prefix = f"scale{processes}{time.time_ns() % 100000}"
    queues = queue_names(prefix, ports, cluster)
    asyncio.run(fill(url, prefix, queues, jobs))
    total = jobs // len(queues) * len(queues)
    redis, workers = redis_cpu(ports), children_cpu()
    seconds = drain(url, prefix, queues, processes)
    worker_us = (children_cpu() - workers - processes * startup) / total * 1e6
    return total / seconds, worker_us, (redis_cpu(ports) - redis) / total * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--repeat", type=int, default=1, help="runs; figures are medians")
    parser.add_argument("--no-cluster", action="store_true", help="one Redis only")
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    rows = []
    with EmbeddedServer() as server:
        rows += measure("one Redis", server.url, [server.port], None, args.jobs, counts,
                        args.repeat)  # fmt: skip
    if not args.no_cluster:
        with EmbeddedCluster(masters=3) as cluster:
            ports = [node.port for node in cluster.masters]
            rows += measure("3-master cluster", cluster.url, ports, cluster, args.jobs,
                            counts, args.repeat)  # fmt: skip
    print(f"aioqueue {aioqueue.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; {args.jobs:,} no-op jobs in 3 queues, workers -c 100, "
          f"timed from spawn, medians of {args.repeat}\n")  # fmt: skip
    print(
        "| target | worker processes | drain (jobs/s) | vs 1 process, one Redis "
        "| worker CPU (µs/job) | Redis CPU (µs/job) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        ratio = row.rate / rows[0].rate
        print(f"| {row.label} | {row.processes} | {row.rate:,.0f} | {ratio:.2f} | "
              f"{row.worker_us:.1f} | {row.redis_us:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
