"""Flow control across worker processes: a rate limit and a concurrency cap, measured.

    .venv/bin/python -m benchmarks.flow_control [--processes 4] [--seconds 10]

On a private redis-server, ``--processes`` worker processes (``aioqueue worker -c 50``)
serve two queues, each with far more jobs ready than its limit lets through:
- ``paced``, ``set_limits(rate="100/s", burst=10)``, no-op jobs: the starts (the Redis-clock
  start time each job record keeps) within the first ``--seconds`` after the first start,
  against the most the limit allows (rate x seconds + burst) and the rate itself;
- ``capped``, ``set_limits(concurrency=5)``, jobs sleeping 50 ms: the most running at once
  (from the records' start and finish times), and the jobs finished per second against the
  cap's ideal (5 / 50 ms = 100/s);
- ``rate-5``, ``rate-100``, ``rate-1000``, ``set_limits(rate="N/s")`` with the default burst
  (1), no-op jobs: the rate delivered (starts in the window / (N x seconds); at least 95 %
  is the target: a held-back worker comes a little late to each start).
Also the take calls the workers made per second while held back (EVALSHA count from INFO
commandstats, over both queues): the cost of waiting on a limit.
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

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parents[1]
RATE, BURST, CAP, SLEEP = 100, 10, 5, 0.05


async def prepare(seconds: float) -> dict[str, list[str]]:
    """Set the limits and fill the queues; the ids of their jobs, by queue."""
    from benchmarks import flow_app

    app = flow_app.app
    try:
        await app.queue("paced").set_limits(rate=f"{RATE}/s", burst=BURST)
        await app.queue("capped").set_limits(concurrency=CAP)
        paced = await app.queue("paced").enqueue_many(
            flow_app.tick.enqueue(n) for n in range(int(RATE * seconds * 1.5))
        )
        capped = await app.queue("capped").enqueue_many(
            flow_app.slow.enqueue(n) for n in range(int(CAP / SLEEP * seconds * 1.5))
        )
        ids = {"paced": [job.id for job in paced], "capped": [job.id for job in capped]}
        for rate, task in flow_app.rated.items():
            queue = app.queue(f"rate-{rate}")
            await queue.set_limits(rate=f"{rate}/s")
            count = int(rate * seconds * 1.5)
            jobs = await queue.enqueue_many(task.enqueue(n) for n in range(count))
            ids[queue.name] = [job.id for job in jobs]
        return ids
    finally:
        await app.close()


async def evalsha_calls() -> int:
    from benchmarks import flow_app

    try:
        info: dict[str, Any] = await (await flow_app.app.client()).info("commandstats")
        return int(info.get("cmdstat_evalsha", {}).get("calls", 0))
    finally:
        await flow_app.app.close()


async def spans(ids: dict[str, list[str]]) -> dict[str, list[tuple[int, int]]]:
    """(started_at_ms, finished_at_ms) of the finished jobs among ``ids``, by Redis's
    clock, by queue."""
    from benchmarks import flow_app

    try:
        found: dict[str, list[tuple[int, int]]] = {}
        for queue, job_ids in ids.items():
            infos = [await flow_app.app.queue(queue).job(job_id).info() for job_id in job_ids]
            found[queue] = [
                (info.started_at_ms, info.finished_at_ms)
                for info in infos
                if info is not None and info.started_at_ms and info.finished_at_ms
            ]
        return found
    finally:
        await flow_app.app.close()


def starts_within(spans: list[tuple[int, int]], window_ms: float) -> int:
    """The starts within ``window_ms`` of the first."""
    first = min(start for start, _ in spans)
    return sum(1 for start, _ in spans if first <= start < first + window_ms)


def most_at_once(spans: list[tuple[int, int]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.flow_control",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    prefix = f"flow{time.time_ns() % 100000}"
    with EmbeddedServer() as server:
        os.environ.update(AIOQUEUE_REDIS_URL=server.url, FLOW_PREFIX=prefix)
        ids = asyncio.run(prepare(args.seconds))
        command = [sys.executable, "-m", "aioqueue", "--log-level", "warning", "worker",
                   "benchmarks.flow_app:app", "-c", "50"]  # fmt: skip
        command += [option for queue in ids for option in ("-q", queue)]
        calls_before = asyncio.run(evalsha_calls())
        workers = [subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL)
                   for _ in range(args.processes)]  # fmt: skip
        time.sleep(args.seconds + 3)  # (the workers' start-up, then the measured window)
        calls_after = asyncio.run(evalsha_calls())
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
        found = asyncio.run(spans(ids))
    report(found, args.processes, args.seconds, calls_after - calls_before)


def report(
    found: dict[str, list[tuple[int, int]]], processes: int, seconds: float, calls: int
) -> None:
    """Print the table: each limit against its bound (``calls``: the script calls made)."""
    paced, capped = found["paced"], found["capped"]
    window_ms = seconds * 1000
    starts = starts_within(paced, window_ms)
    allowed = RATE * seconds + BURST
    capped_first = min(start for start, _ in capped)
    capped_done = sum(1 for _, end in capped if end < capped_first + window_ms)
    print(f"aioqueue {aioqueue.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; {processes} worker processes (-c 50), "
          f"{seconds:.0f} s windows from each queue's first start\n")  # fmt: skip
    print("| limit | measured | bound | measured / bound |")
    print("|---|---:|---:|---:|")
    print(f"| rate {RATE}/s, burst {BURST}: starts in the window | {starts:,} | "
          f"≤ {allowed:,.0f} | {starts / allowed:.3f} |")  # fmt: skip
    print(f"| ... as a share of the rate ({RATE * seconds:,.0f}) | {starts:,} | "
          f"≥ 95 % | {starts / (RATE * seconds):.3f} |")  # fmt: skip
    print(f"| concurrency {CAP}: most running at once | {most_at_once(capped)} | ≤ {CAP} | "
          f"{most_at_once(capped) / CAP:.2f} |")  # fmt: skip
    ideal = CAP / SLEEP * seconds
    print(f"| ... jobs of {SLEEP * 1000:.0f} ms finished in the window | {capped_done:,} | "
          f"{ideal:,.0f} (ideal) | {capped_done / ideal:.3f} |")  # fmt: skip
    for queue in found:
        if not queue.startswith("rate-"):
            continue
        rate = int(queue.removeprefix("rate-"))
        delivered = starts_within(found[queue], window_ms)
        print(f"| rate {rate}/s, default burst: starts in the window | {delivered:,} | "
              f"≥ 95 % of {rate * seconds:,.0f} | "
              f"{delivered / (rate * seconds):.3f} |")  # fmt: skip
    per_second = calls / (seconds + 3)
    print(f"\nscript calls while held back: {per_second:,.0f}/s over {processes} "
          "processes and all queues (EVALSHA: takes, acks, lease renewals)")  # fmt: skip


if __name__ == "__main__":
    main()
