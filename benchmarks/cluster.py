"""One worker's drain on a local 3-master Redis Cluster against one Redis, in one sitting.

    .venv/bin/python -m benchmarks.cluster [--jobs 60000] [--rounds 3] [--queues 3,1]

Both targets run side by side (one ``EmbeddedServer`` and one ``EmbeddedCluster``, started
once), alternating round by round (the order swapped each round), so the machine's load
hits both alike. Per round and target: fill the queues with no-op jobs (on the cluster,
each queue on a different master: ``benchmarks.scale.queue_names``), then time one
``aioqueue worker --burst -c 100`` process from spawn until it has drained them and
exited (as ``benchmarks.scale`` does), with its CPU time (getrusage of the reaped child)
and Redis's (INFO, summed over the nodes). The table gives the medians of the rounds and
the cluster's ratio to one Redis; ``--queues 3,1``: three queues (one per master), then
one queue alone.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time
from dataclasses import dataclass

from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.ops.embedded_cluster import EmbeddedCluster

from .scale import drain, fill, queue_names, redis_cpu


@dataclass(frozen=True)
class Target:
    """Where a round drains: a URL, the ports whose CPU counts, the cluster if one."""

    label: str
    url: str
    ports: list[int]
    cluster: EmbeddedCluster | None


@dataclass(frozen=True)
class Round:
    """One drain's figures."""

    label: str  # the target's
    rate: float  # jobs/s, from spawn
    worker_us: float  # the worker process's CPU per job (start-up included)
    redis_us: float  # Redis's CPU per job, every node


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_round(target: Target, jobs: int, queue_count: int) -> Round:
    prefix = f"cl{time.time_ns() % 10_000_000}"
    queues = queue_names(prefix, target.ports, target.cluster)[:queue_count]
    asyncio.run(fill(target.url, prefix, queues, jobs))
    total = jobs // len(queues) * len(queues)
    redis_before, worker_before = redis_cpu(target.ports), children_cpu()
    seconds = drain(target.url, prefix, queues, 1)
    worker_us = (children_cpu() - worker_before) / total * 1e6
    redis_us = (redis_cpu(target.ports) - redis_before) / total * 1e6
    print(f"{target.label}, {queue_count} queue(s): {total / seconds:,.0f} jobs/s, worker "
          f"{worker_us:.1f} µs/job, Redis {redis_us:.1f} µs/job", file=sys.stderr)  # fmt: skip
    return Round(target.label, total / seconds, worker_us, redis_us)


def median(rounds: list[Round], field: str) -> float:
    return float(statistics.median(getattr(one, field) for one in rounds))


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queues", default="3,1")
    args = parser.parse_args()
    counts = [int(n) for n in args.queues.split(",")]
    results: dict[tuple[str, int], list[Round]] = {}
    with EmbeddedServer() as server, EmbeddedCluster(masters=3) as cluster:
        targets = [
            Target("one Redis", server.url, [server.port], None),
            Target("3-master cluster", cluster.url, [n.port for n in cluster.masters], cluster),
        ]
        for number in range(args.rounds):
            for count in counts:
                for target in targets if number % 2 == 0 else targets[::-1]:
                    results.setdefault((target.label, count), []).append(
                        one_round(target, args.jobs, count)
                    )
    print(f"\n{args.jobs:,} no-op jobs, one worker -c 100 timed from spawn, medians of "
          f"{args.rounds} alternating rounds\n")  # fmt: skip
    print("| queues | target | drain (jobs/s) | vs one Redis (median of rounds) "
          "| worker CPU (µs/job) | Redis CPU (µs/job) |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|")
    for count in counts:
        for target in targets:
            print(row(count, results[(target.label, count)], results[("one Redis", count)]))


def row(count: int, rounds: list[Round], base: list[Round]) -> str:
    """A table row: medians, and the median of each round's ratio to one Redis's drain."""
    ratio = statistics.median(
        one.rate / other.rate for one, other in zip(rounds, base, strict=True)
    )
    return (
        f"| {count} | {rounds[0].label} | {median(rounds, 'rate'):,.0f} | {ratio:.2f} "
        f"| {median(rounds, 'worker_us'):.1f} | {median(rounds, 'redis_us'):.1f} |"
    )


if __name__ == "__main__":
    main()
