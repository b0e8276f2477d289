"""aioqueue's adapter for the cross-system benchmark (the contract: ../CONTRACT.md).

    python benchmarks/peers/aioqueue/adapter.py SCENARIO --redis-url URL --queue NAME
           [--jobs N] [--concurrency C] [--variant default|uvloop] [--processes P]

The orchestrator runs it with the project's own interpreter (the one running
``benchmarks.compare``), so it measures the working tree; see requirements.txt.

Everything runs with aioqueue's defaults: ``App(prefix=NAME, default_queue=NAME)`` (so every
key is ``NAME:{NAME}:...``), tasks registered with a bare ``@app.task`` (bench_tasks.py), and
workers run by aioqueue's own CLI, ``aioqueue worker bench_tasks:app -q NAME -c C [--burst]``,
in worker_child.py: a separate process that imports everything, says ``ready`` and starts
the CLI when told ``go`` (at once). The drain time (``seconds``) runs from spawning the
process to its report that the queue is drained (burst mode: nothing ready, running,
unacknowledged or due), so it holds the interpreter's start-up like the peers' CLIs do;
``startup_seconds`` is the part until ``ready`` (interpreter and imports), and
``worker_cpu_seconds`` is the process's whole CPU time, start-up included.

Enqueues: ``await noop.enqueue()``; ``enqueue_gather`` gathers 500 of them at a time (aioqueue
coalesces concurrent enqueues into one script call per round trip); ``enqueue_bulk`` is one
``await queue.enqueue_many(noop.enqueue() for _ in range(N))``, and so is ``fill``, in calls
of at most 50,000 jobs (one call up to that; bounded memory for ``--scale``'s 1,000,000).
Delayed jobs: ``clock.enqueue(i).options(at=<aware datetime>)``, gathered 500 at a time; the
handler returns ``time.time()`` as its first act and the adapter reads the jobs' results.
``latency`` uses ``stamp`` instead, which RPUSHes its start time to a list the adapter
BLPOPs (bench_tasks.py): 200 samples, or as many as 20 s allow (at least 20).

Variants: ``default`` (asyncio's own event loop) and ``uvloop`` (listed where uvloop is
installed, ``pip install -e '.[uvloop]'``): workers run ``aioqueue worker --uvloop`` and the
adapter's own loop (the producer) is uvloop's too, so it affects every scenario (the
``variants`` answer has no ``affects``).

Beyond the contract: ``--processes P`` runs the ``drain`` scenarios with P worker processes
(each with C slots, like ``aioqueue worker -p P``), and ``drain`` also reports
``worker_run_cpu_seconds`` (the workers' CPU from ``go`` on, without start-up) and
``worker_sent`` (the commands the workers sent to Redis, by name, from ``go`` on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import astuple, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import bench_tasks
import orjson

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from redis.asyncio import Redis

    from aioqueue import Job, Queue, Task

HERE = Path(__file__).resolve().parent
GATHER = 500  # enqueues in flight at once
FILL_CHUNK = 50_000  # jobs per enqueue_many call in fill
LATENCY_JOBS = 200  # samples, unless LATENCY_BUDGET_S runs out first
LATENCY_BUDGET_S = 20.0  # seconds of sampling (from the first sample) ...
LATENCY_MIN_JOBS = 20  # ... but at least this many samples
LEAD_MS = 500  # delayed scenarios: the first due time, after the enqueue starts
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
VARIANTS = ("default", "uvloop")  # uvloop: listed only where it is installed


class AdapterError(Exception):
    """The scenario could not be measured (the message says why)."""


@dataclass(frozen=True, slots=True)
class Args:
    scenario: str
    redis_url: str
    queue: str
    jobs: int
    concurrency: int
    variant: str
    processes: int


# -- worker processes ------------------------------------------------------------------


class Workers:
    """Worker processes (worker_child.py): started, told to go, and stopped from here."""

    def __init__(self, args: Args, *, burst: bool, processes: int = 1) -> None:
        self._argv = [
            sys.executable, str(HERE / "worker_child.py"), "--redis-url", args.redis_url,
            "--queue", args.queue, "-c", str(args.concurrency), *(["--burst"] if burst else []),
            *(["--uvloop"] if args.variant == "uvloop" else []),
        ]  # fmt: skip
        self._queue, self._processes = args.queue, processes
        self._children: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        """Start the processes and wait until each has imported everything."""
        env = {**os.environ, bench_tasks.ENV_QUEUE: self._queue}
        for _ in range(self._processes):
            self._children.append(
                await asyncio.create_subprocess_exec(
                    *self._argv, cwd=HERE, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
                )
            )
        for child in self._children:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), timeout=60)
            if line != b"ready\n":
                raise AdapterError(f"a worker process did not start (said {line!r})")

    async def go(self) -> None:
        """Tell every process to start its worker."""
        for child in self._children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
        await asyncio.gather(*(child.stdin.drain() for child in self._children if child.stdin))

    async def reports(self) -> list[dict[str, Any]]:
        """Each process's final report (its worker has returned), once all have one."""
        lines = await asyncio.gather(*(_read_line(child) for child in self._children))
        reports = [json.loads(line) for line in lines]
        for child, report in zip(self._children, reports, strict=True):
            if await child.wait() != 0 or report["code"] != 0:
                raise AdapterError(f"a worker process exited with {child.returncode}: {report}")
        return reports

    async def stop(self) -> list[dict[str, Any]]:
        """SIGTERM (aioqueue's graceful stop), then the reports."""
        for child in self._children:
            if child.returncode is None:
                child.send_signal(signal.SIGTERM)
        return await self.reports()

    async def close(self) -> None:
        """Make sure no process outlives the adapter (on errors too)."""
        for child in self._children:
            if child.returncode is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(child.wait(), timeout=15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    child.kill()
                await child.wait()


async def _read_line(child: asyncio.subprocess.Process) -> bytes:
    assert child.stdout is not None
    line = await child.stdout.readline()
    if not line:
        raise AdapterError(f"a worker process exited with {await child.wait()} and no report")
    return line


# -- scenarios -------------------------------------------------------------------------


async def enqueue_seq(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    started = time.perf_counter()
    for _ in range(args.jobs):
        await bench.noop.enqueue()
    return {"seconds": time.perf_counter() - started}


async def enqueue_gather(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    return {"seconds": await gather_enqueue(bench.noop, args.jobs)}


async def gather_enqueue(task: Task[[], None], jobs: int) -> float:
    """Enqueue ``jobs`` jobs of ``task``, GATHER at a time; the seconds it took."""
    started = time.perf_counter()
    for start in range(0, jobs, GATHER):
        await asyncio.gather(*(task.enqueue() for _ in range(min(GATHER, jobs - start))))
    return time.perf_counter() - started


async def enqueue_bulk(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    queue = bench.app.queue(args.queue)
    started = time.perf_counter()
    await queue.enqueue_many(bench.noop.enqueue() for _ in range(args.jobs))
    return {"seconds": time.perf_counter() - started}


async def fill(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    return {"seconds": await bulk_enqueue(bench, bench.noop, args.jobs)}


async def bulk_enqueue(bench: bench_tasks.Bench, task: Task[[], None], jobs: int) -> float:
    """Enqueue ``jobs`` jobs of ``task`` with enqueue_many, FILL_CHUNK per call; seconds."""
    queue = bench.app.queue(bench.app.settings.default_queue)
    started = time.perf_counter()
    for start in range(0, jobs, FILL_CHUNK):
        await queue.enqueue_many(task.enqueue() for _ in range(min(FILL_CHUNK, jobs - start)))
    return time.perf_counter() - started


async def drain(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    """Run burst workers over the N queued jobs; check that all N completed."""
    workers = Workers(args, burst=True, processes=args.processes)
    try:
        started = time.perf_counter()
        await workers.start()
        ready = time.perf_counter()
        await workers.go()
        reports = await workers.reports()
        done = time.perf_counter()
    finally:
        await workers.close()
    complete = sum(report["outcomes"].get("complete", 0) for report in reports)
    counts = await bench.app.queue(args.queue).counts()
    if complete != args.jobs or (counts.ready, counts.active, counts.dead) != (0, 0, 0):
        raise AdapterError(f"expected {args.jobs} complete jobs, got {complete}; left {counts}")
    sent: Counter[str] = Counter()
    for report in reports:
        sent.update(report["sent"])
    return {
        "seconds": done - started,
        "startup_seconds": ready - started,
        "worker_cpu_seconds": sum(report["cpu_seconds"] for report in reports),
        "worker_run_cpu_seconds": sum(report["run_cpu_seconds"] for report in reports),
        "processes": args.processes,
        "worker_sent": dict(sent.most_common()),
    }


async def drain_sleep(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    await bulk_enqueue(bench, bench.nap, args.jobs)
    return await drain(bench, args)


async def latency(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    """One job at a time through an idle worker: its handler's start - the enqueue call;
    LATENCY_JOBS samples, or fewer (at least LATENCY_MIN_JOBS) after LATENCY_BUDGET_S."""
    redis = await bench.app.client()
    workers = Workers(args, burst=False)
    samples = []
    try:
        await start_warm(workers, bench, redis)
        budget_end = time.monotonic() + LATENCY_BUDGET_S
        for index in range(LATENCY_JOBS):
            if index >= LATENCY_MIN_JOBS and time.monotonic() > budget_end:
                break
            sent = time.time()
            await bench.stamp.enqueue(index)
            stamped, started = await next_stamp(redis, bench.stamps_key)
            if stamped != index:
                raise AdapterError(f"expected the stamp of job {index}, got {stamped}")
            samples.append((started - sent) * 1000)
        await workers.stop()
    finally:
        await workers.close()
    return {
        "p50_ms": percentile(samples, 0.5),
        "p99_ms": percentile(samples, 0.99),
        "samples": len(samples),
    }


async def start_warm(workers: Workers, bench: bench_tasks.Bench, redis: Redis) -> None:
    """Start one worker process; run one immediate and one delayed job; let it go idle."""
    await redis.delete(bench.stamps_key)
    await workers.start()
    await workers.go()
    await bench.stamp.enqueue(-1)
    await next_stamp(redis, bench.stamps_key, timeout=30)
    await bench.stamp.enqueue(-2).options(delay=0.1)
    await next_stamp(redis, bench.stamps_key)
    await asyncio.sleep(0.3)


async def next_stamp(redis: Redis, key: str, timeout: int = 5) -> tuple[int, float]:
    popped = await redis.blpop([key], timeout=timeout)
    if popped is None:
        raise AdapterError(f"no job started within {timeout}s")
    index, started = orjson.loads(popped[1])
    return int(index), float(started)


async def delayed(
    bench: bench_tasks.Bench, args: Args, *, jobs: int, spread_ms: int
) -> dict[str, Any]:
    """Jobs due evenly over ``spread_ms`` (the first LEAD_MS after the enqueue starts),
    enqueued up front with ``at=``; lateness = handler start (the job's result) - due time."""
    redis = await bench.app.client()
    workers = Workers(args, burst=False)
    try:
        await start_warm(workers, bench, redis)
        first = int(time.time() * 1000) + LEAD_MS
        due_ms = [first + i * spread_ms // jobs for i in range(jobs)]
        enqueued: list[Job[float]] = []
        for start in range(0, jobs, GATHER):
            enqueued += await asyncio.gather(
                *(
                    bench.clock.enqueue(i).options(at=EPOCH + timedelta(milliseconds=due_ms[i]))
                    for i in range(start, min(jobs, start + GATHER))
                )
            )
        await asyncio.sleep(max(0.0, due_ms[-1] / 1000 - time.time()))
        await settled(bench.app.queue(args.queue))
        started = await asyncio.gather(*(job.result(timeout=10) for job in enqueued))
        await workers.stop()
    finally:
        await workers.close()
    late = [at * 1000 - due for at, due in zip(started, due_ms, strict=True)]
    return {
        "p50_ms": percentile(late, 0.5),
        "p99_ms": percentile(late, 0.99),
        "max_ms": max(late),
    }


async def settled(queue: Queue, timeout: float = 30.0) -> None:
    """Wait until nothing is scheduled, ready or running (every job has its result)."""
    deadline = time.monotonic() + timeout
    while sum(astuple(await queue.counts())[:3]):
        if time.monotonic() > deadline:
            raise AdapterError(f"jobs left after {timeout}s: {await queue.counts()}")
        await asyncio.sleep(0.02)


async def delayed_sparse(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    return await delayed(bench, args, jobs=100, spread_ms=1000)


async def delayed_burst(bench: bench_tasks.Bench, args: Args) -> dict[str, Any]:
    return await delayed(bench, args, jobs=1000, spread_ms=500)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


SCENARIOS: dict[str, Callable[[bench_tasks.Bench, Args], Awaitable[dict[str, Any]]]] = {
    "enqueue_seq": enqueue_seq,
    "enqueue_gather": enqueue_gather,
    "enqueue_bulk": enqueue_bulk,
    "fill": fill,
    "drain": drain,
    "drain_sleep": drain_sleep,
    "latency": latency,
    "delayed_sparse": delayed_sparse,
    "delayed_burst": delayed_burst,
}


# -- main ------------------------------------------------------------------------------


def deadline(jobs: int) -> float:
    """Seconds one call may take: ~2 minutes, longer only for huge N (--scale)."""
    return max(110.0, jobs / 2_000)


async def run(args: Args) -> dict[str, Any]:
    if args.scenario == "variants":
        return {"variants": variants()}
    if args.variant not in variants():
        known = ", ".join(variants())
        raise AdapterError(f"unknown variant {args.variant!r}; variants: {known}")
    bench = bench_tasks.build(args.queue, args.redis_url)
    async with bench.app, asyncio.timeout(deadline(args.jobs)):
        return await SCENARIOS[args.scenario](bench, args)


def variants() -> list[str]:
    return [v for v in VARIANTS if v != "uvloop" or importlib.util.find_spec("uvloop")]


def new_loop(variant: str) -> asyncio.AbstractEventLoop:
    if variant == "uvloop" and importlib.util.find_spec("uvloop"):
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def parse_args(argv: Sequence[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario", choices=["variants", *SCENARIOS])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--variant", default="default")
    parser.add_argument("--processes", type=int, default=1, help="drain: worker processes")
    ns = parser.parse_args(argv)
    return Args(
        ns.scenario, ns.redis_url, ns.queue, ns.jobs, ns.concurrency, ns.variant, ns.processes
    )


def main() -> int:
    args = parse_args()
    try:
        with asyncio.Runner(loop_factory=lambda: new_loop(args.variant)) as runner:
            result = runner.run(run(args))
    except TimeoutError:
        error = f"did not finish within {deadline(args.jobs):.0f}s"
        print(json.dumps({"error": error}), flush=True)
        return 1
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
