"""Fairness between tenants (``.options(tenant=...)``), measured.

    .venv/bin/python -m benchmarks.fairness [--jobs 20000] [--rounds 3]

On a private redis-server, four scenarios:
- starvation: tenant A enqueues 10,000 no-op jobs, then tenant B 20; one worker at
  concurrency 10 drains them: how many jobs start between B's enqueue and B's last start,
  with tenants and with the same jobs plain (FIFO: every one of A's first). Fair is about
  2 x 20 + the concurrency (turns of A and B, and the jobs taken ahead).
- cap: two worker processes (``aioqueue worker -c 20``) serve 5 tenants' jobs (20 ms each)
  under a cap of 3 per tenant (``set_tenant_limits(max_running=3)``): the most of one
  tenant running at once, sampled from Redis (the tenants' running counts) every few ms,
  and computed from the records' start and finish times (Redis clock).
- cost: takes of 10 and of 100 jobs against 10, 100 and 10,000 tenants with jobs ready
  (all of them throughout): Redis's time per take (INFO commandstats), median of
  ``--rounds``. The contract: 10,000 within 10 % of 10. (With takes of 100, each of 10
  tenants has ten turns a take: the same few keys over and over, warm in every cache.)
- throughput: ``--jobs`` no-op jobs over 1, 100 and 10,000 tenants, and as many plain jobs,
  each drained by one in-process burst worker (concurrency 100), in turn, in one run:
  jobs/s, and the ratio to plain.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store.scripts import leasing

ROOT = Path(__file__).resolve().parents[1]
CAP, CAP_TENANTS, CAP_JOBS = 3, 5, 60


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fairness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per throughput drain")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the cost scenario")
    args = parser.parse_args()
    print(f"aioqueue {aioqueue.__version__}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs\n")  # fmt: skip
    with EmbeddedServer() as server:
        fifo, fair = asyncio.run(starvation(server.url))
        print("## starvation: A enqueues 10,000 no-op jobs, then B 20; 1 worker, -c 10\n")
        print("| order | jobs started between B's enqueue and B's last start |")
        print("|---|---:|")
        print(f"| FIFO (plain jobs) | {fifo:,} |\n| tenants A and B | {fair:,} |\n")
        sampled, computed = cap(server.url)
        print(f"## cap: {CAP} per tenant, {CAP_TENANTS} tenants x {CAP_JOBS} jobs of 20 ms, "
              "2 worker processes (-c 20)\n")  # fmt: skip
        print("| most of one tenant running at once | measured | bound |\n|---|---:|---:|")
        print(f"| sampled from Redis | {sampled} | ≤ {CAP} |")
        print(f"| from the records' start and finish times | {computed} | ≤ {CAP} |\n")
        print("## cost of a take, Redis's time (INFO commandstats)\n")
        print("| jobs a take | tenants with jobs ready | µs per take | per job | ratio to 10 |")
        print("|---:|---:|---:|---:|---:|")
        for size in (10, 100):
            costs = asyncio.run(take_costs(server.url, args.rounds, size))
            for tenants, usec in costs.items():
                print(f"| {size} | {tenants:,} | {usec:.0f} | {usec / size:.2f} | "
                      f"{usec / costs[10]:.3f} |")  # fmt: skip
        rates = asyncio.run(throughput(server.url, args.jobs))
        print(f"\n## throughput: {args.jobs:,} no-op jobs, 1 in-process burst worker, -c 100\n")
        print("| jobs | jobs/s | ratio to plain |\n|---|---:|---:|")
        for label, rate in rates.items():
            print(f"| {label} | {rate:,.0f} | {rate / rates['plain']:.3f} |")


# -- starvation -----------------------------------------------------------------------------------


async def starvation(url: str) -> tuple[int, int]:
    """For FIFO and for tenants: the jobs started between B's enqueue and B's last start."""
    return await _starvation(url, tenants=False), await _starvation(url, tenants=True)


async def _starvation(url: str, *, tenants: bool) -> int:
    app = aioqueue.App(redis_url=url, prefix=f"starve{time.time_ns()}")
    started: list[str] = []
    flooding, b_done = asyncio.Event(), asyncio.Event()

    @app.task
    async def noop(tenant: str) -> None:
        started.append(tenant)
        if len(started) >= 10:
            flooding.set()  # (A's flood under way)
        if tenant == "B" and started.count("B") == 20:
            b_done.set()

    queue = app.queue()

    def calls(tenant: str, count: int) -> Any:
        for _ in range(count):
            call = noop.enqueue(tenant)
            yield call.options(tenant=tenant) if tenants else call

    try:
        await queue.enqueue_many(calls("A", 10_000))
        async with app.worker(concurrency=10):
            await flooding.wait()
            await queue.enqueue_many(calls("B", 20))
            mark = len(started)
            await b_done.wait()
            return len(started) - mark
    finally:
        await app.close()


# -- cap across worker processes -------------------------------------------------------------------


def cap(url: str) -> tuple[int, int]:
    """The most of one tenant running at once: sampled from Redis, and from the records."""
    prefix = f"fair{time.time_ns() % 100000}"
    os.environ.update(AIOQUEUE_REDIS_URL=url, FAIR_PREFIX=prefix)
    ids = asyncio.run(_fill_capped())
    command = [sys.executable, "-m", "aioqueue", "--log-level", "warning", "worker",
               "benchmarks.fairness_app:app", "-q", "capped", "-c", "20"]  # fmt: skip
    workers = [subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL) for _ in range(2)]
    try:
        sampled = asyncio.run(_sample_running(len(ids)))
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)
    return sampled, asyncio.run(_most_at_once(ids))


async def _fill_capped() -> list[str]:
    from benchmarks import fairness_app

    app, queue = fairness_app.app, fairness_app.app.queue("capped")
    try:
        await queue.set_tenant_limits(max_running=CAP)
        jobs = await queue.enqueue_many(
            fairness_app.slow.enqueue(f"t{n % CAP_TENANTS}").options(tenant=f"t{n % CAP_TENANTS}")
            for n in range(CAP_TENANTS * CAP_JOBS)
        )
        return [job.id for job in jobs]
    finally:
        await app.close()


async def _sample_running(total: int) -> int:
    """Sample every tenant's running count until every job finished; the most seen."""
    from benchmarks import fairness_app

    app, queue = fairness_app.app, fairness_app.app.queue("capped")
    key, most = queue.keys.tenant_key("running"), 0
    try:
        redis = await app.client()
        while True:
            running = await redis.hvals(key)
            most = max([most, *(int(n) for n in running)])
            counts = await queue.counts(top_tenants=0)
            if counts.ready == 0 and counts.active == 0 and counts.scheduled == 0:
                return most
            await asyncio.sleep(0.002)
    finally:
        await app.close()


async def _most_at_once(ids: list[str]) -> int:
    from benchmarks import fairness_app

    app, queue = fairness_app.app, fairness_app.app.queue("capped")
    try:
        spans: dict[str, list[tuple[int, int]]] = {}
        for job_id in ids:
            info = await queue.job(job_id).info()
            if info is not None and info.started_at_ms and info.finished_at_ms:
                spans.setdefault(info.tenant or "", []).append(
                    (info.started_at_ms, info.finished_at_ms)
                )
        assert sum(map(len, spans.values())) == len(ids), "some jobs did not finish"
        return max(_overlap(found) for found in spans.values())
    finally:
        await app.close()


def _overlap(spans: list[tuple[int, int]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(f, -1) for _, f in spans])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


# -- the cost of a take against many tenants -------------------------------------------------------


async def take_costs(url: str, rounds: int, size: int) -> dict[int, float]:
    """Redis's µs per take of ``size`` jobs with 10, 100 and 10,000 tenants ready, each
    with enough jobs to stay ready throughout (30,000 jobs in all)."""
    found: dict[int, list[float]] = {10: [], 100: [], 10_000: []}
    for _ in range(rounds):
        for tenants in found:
            found[tenants].append(await _take_cost(url, tenants, size))
    return {tenants: statistics.median(usecs) for tenants, usecs in found.items()}


async def _take_cost(url: str, tenants: int, size: int = 100) -> float:
    app = aioqueue.App(redis_url=url, prefix=f"cost{time.time_ns()}")
    queue = app.queue()
    try:
        per_tenant = 30_000 // tenants
        await queue.enqueue_many(
            queue.enqueue("noop", n).options(tenant=f"tenant-{n % tenants}")
            for n in range(per_tenant * tenants)
        )
        redis = await app.client()
        await redis.config_resetstat()
        for n in range(20_000 // size):  # every tenant still has jobs ready at the end
            taken = await leasing.take(
                redis, queue.keys, lease=f"bench:{n}", lease_ms=600_000, limit=size
            )
            assert len(taken.jobs) == size
        assert (await queue.counts(top_tenants=0)).tenants == tenants
        stats: dict[str, Any] = await redis.info("commandstats")
        return float(stats["cmdstat_evalsha"]["usec_per_call"])
    finally:
        await (await app.client()).flushdb()
        await app.close()


# -- throughput ------------------------------------------------------------------------------------


async def throughput(url: str, jobs: int) -> dict[str, float]:
    """Drain rates of ``jobs`` no-op jobs: plain, and over 1, 100 and 10,000 tenants."""
    rates: dict[str, float] = {}
    for label, tenants in (("plain", 0), ("1 tenant", 1), ("100 tenants", 100),
                           ("10,000 tenants", 10_000), ("plain, again", 0)):  # fmt: skip
        rates[label] = await _drain(url, jobs, tenants)
    return rates


async def _drain(url: str, jobs: int, tenants: int) -> float:
    app = aioqueue.App(redis_url=url, prefix=f"drain{time.time_ns()}")

    @app.task
    async def noop(n: int) -> None:
        return None

    queue = app.queue()
    try:
        for start in range(0, jobs, 1000):
            calls = (noop.enqueue(n) for n in range(start, min(jobs, start + 1000)))
            if tenants:
                calls = (
                    call.options(tenant=f"t{n % tenants}") for n, call in enumerate(calls, start)
                )
            await queue.enqueue_many(calls)
        worker = app.worker(burst=True, concurrency=100)
        started = time.perf_counter()
        await worker.run_until_idle()
        return jobs / (time.perf_counter() - started)
    finally:
        await app.close()


if __name__ == "__main__":
    main()
