"""Benchmark adapter for taskiq-redis's Redis Streams broker (``RedisStreamBroker``).

    python adapter.py SCENARIO --redis-url URL --queue NAME [--jobs N] [--concurrency C]
                      [--variant NAME]

The scenarios and what it prints are defined in ``../CONTRACT.md``. It uses taskiq's
documented API, with default settings:

- Broker: ``taskiq_redis.RedisStreamBroker(url=URL, queue_name=QUEUE)``: one stream and one
  consumer group; XADD per job, XREADGROUP (100 at a time) to take, XACK after each job (at
  least once). Tasks are declared with ``@broker.task``. The client calls
  ``await broker.startup()`` first, which creates the consumer group at the stream's end
  (jobs added before it exists are never delivered), then ``await task.kiq()`` per job.
  taskiq has no bulk enqueue: ``enqueue_bulk`` is unsupported and ``fill`` is
  ``enqueue_gather`` (``asyncio.gather`` in batches of 500).
- Worker: taskiq's CLI in a separate process, ``python -m taskiq worker adapter:broker
  --workers 1 --max-async-tasks C``: a process manager and one worker process it forks; the
  CPU reported is both together. Its default INFO log (a line per job) goes to a temporary
  file. It is stopped with SIGINT, taskiq's graceful shutdown, and SIGKILLed if still there
  after 5 s, as it often is: the worker sets its shutdown event from a plain signal handler,
  so an idle worker notices it only when its event loop next wakes up; and an idle stream
  worker never completes that shutdown (taskiq 0.13.0, taskiq-redis 1.2.4).
- Delayed jobs: ``await task.schedule_by_time(source, when, ...)`` (``asyncio.gather`` in
  batches of 500) into ``taskiq_redis.ListRedisScheduleSource(URL, prefix=...)``, the source
  taskiq-redis recommends for dynamic schedules. A separate scheduler process sends them to
  the broker when due: ``python -m taskiq scheduler adapter:scheduler``, with
  ``scheduler = TaskiqScheduler(broker, sources=[source])``. It wakes on every whole second
  of the clock (``--loop-interval``, 1 s) and sends what is due among the schedules it has
  loaded, which it reloads from Redis every ``--update-interval`` seconds (60 by default) in
  the background, for use from the next tick: a delayed job is late by up to a reload
  period plus a second. The adapter first runs warm-up jobs due at once, as many as it
  enqueues at a time (which also opens the client's connections): the scheduler loads them
  at its start and sends them on its first tick. Then it enqueues the measured jobs
  half-way through a reload period after that tick (30 s later with default settings):
  neither the best moment nor the worst.

Variants (``variants`` lists them): ``default``, and ``reload-every-tick``: the scheduler
with ``--update-interval 0``, which reloads its schedules on every tick (the interval
options take whole seconds, and the loop interval is already at its 1-s minimum). Only the
delayed scenarios differ (they alone run a scheduler), which the ``variants`` answer says
(``affects``).

The worker and scheduler processes import this file as the module ``adapter`` (their working
directory and ``--app-dir`` are this folder); the driver hands them the Redis URL, the queue
name and the number of jobs to expect in environment variables. Keys: the stream
``<queue>``, the benchmark's markers ``<queue>:*`` and the schedule source's
``<queue>-schedule:*`` (see ``SCHEDULE_PREFIX``). Every scenario but ``drain`` starts by
deleting them, and every one but ``fill`` and ``drain`` deletes them when done.

The end of a drain: the worker process counts its finished jobs in memory, and the job that
completes the N-th pushes one marker to ``<queue>:drained``, which the driver waits for with
BLPOP. ``seconds`` runs from just before the worker process is spawned (so it includes the
CLI's start-up, logged on stderr) to that marker; ``worker_cpu_seconds`` is the worker
processes' user+sys CPU, read from ``/proc`` just before they are stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from redis.asyncio import Redis
from taskiq import TaskiqEvents, TaskiqScheduler, TaskiqState
from taskiq_redis import ListRedisScheduleSource, RedisStreamBroker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

HERE = Path(__file__).resolve().parent
MODULE = "adapter"  # how the worker and scheduler processes import this file
ENV_URL = "TASKIQ_BENCH_REDIS_URL"
ENV_QUEUE = "TASKIQ_BENCH_QUEUE"
ENV_EXPECT = "TASKIQ_BENCH_EXPECT"

SCENARIOS = (
    "variants",
    "enqueue_seq",
    "enqueue_gather",
    "enqueue_bulk",
    "fill",
    "drain",
    "drain_sleep",
    "latency",
    "delayed_sparse",
    "delayed_burst",
)


@dataclass(frozen=True)
class Variant:
    scheduler_options: tuple[str, ...]  # extra `taskiq scheduler` options
    reload_period: float  # how often that scheduler reloads its schedules from Redis, s


VARIANTS = {
    "default": Variant((), 60.0),  # --update-interval defaults to 60 s
    "reload-every-tick": Variant(("--update-interval", "0"), 1.0),  # every 1-s tick
}
AFFECTS = {"reload-every-tick": ["delayed_sparse", "delayed_burst"]}  # the scheduler's setting
GATHER = 500  # enqueues in flight at once (enqueue_gather, fill)
LATENCY_JOBS = 200  # samples, unless LATENCY_BUDGET runs out first
LATENCY_BUDGET = 20.0  # seconds of sampling (from the first sample) ...
LATENCY_MIN_JOBS = 20  # ... but at least this many samples
LEAD = 0.5  # the first delayed job is due this long after the enqueue starts
DELAYED = {"delayed_sparse": (100, 1.0), "delayed_burst": (1_000, 0.5)}  # jobs, spread (s)
DRAIN_TIMEOUT = 100.0
READY_TIMEOUT = 30.0
DELAYED_TIMEOUT = 60.0  # for each stamp of a delayed job (the first comes ~30 s late by default)
STOP_TIMEOUT = 5.0  # taskiq's own --shutdown-timeout default


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenario", choices=SCENARIOS)
    parser.add_argument("--redis-url")
    parser.add_argument("--queue")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--variant", choices=list(VARIANTS), default="default")
    args = parser.parse_args(argv)
    if args.scenario != "variants" and not (args.redis_url and args.queue):
        parser.error("--redis-url and --queue are required")
    return args


# -- configuration: the driver's command line, passed on to the worker and scheduler -------

if __name__ == "__main__":
    ARGS = parse_args(sys.argv[1:])
    if ARGS.redis_url:
        os.environ.update({ENV_URL: ARGS.redis_url, ENV_QUEUE: ARGS.queue})

REDIS_URL = os.environ.get(ENV_URL, "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get(ENV_QUEUE, "taskiq-stream")
READY_KEY = f"{QUEUE}:ready"  # pushed by the worker once started
DRAINED_KEY = f"{QUEUE}:drained"  # pushed by the job that completes the expected count
STAMPS_KEY = f"{QUEUE}:stamps"  # one entry per `stamp` job: seconds from its origin to start
# No ':' in the schedule source's prefix: ListRedisScheduleSource parses its time keys with
# key.split(":", 2)[2], so with a ':' in the prefix it never sends a job whose due minute
# has passed when the scheduler next loads its schedules (every minute by default).
SCHEDULE_PREFIX = QUEUE.replace(":", "-") + "-schedule"

# -- the app: what the worker and scheduler processes import ------------------------------

broker = RedisStreamBroker(url=REDIS_URL, queue_name=QUEUE)
schedule_source = ListRedisScheduleSource(REDIS_URL, prefix=SCHEDULE_PREFIX)
scheduler = TaskiqScheduler(broker, sources=[schedule_source])
bench_redis: Redis = Redis.from_url(REDIS_URL)  # the benchmark's own markers and stamps


class Progress:
    """Finished jobs in this worker process; true for the one that completes the count."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.finished = 0

    def finish_one(self) -> bool:
        self.finished += 1
        return self.finished == self.expected


progress = Progress(int(os.environ.get(ENV_EXPECT, "0")))


@broker.on_event(TaskiqEvents.WORKER_STARTUP)
async def report_ready(state: TaskiqState) -> None:
    await bench_redis.rpush(READY_KEY, "1")


@broker.task(task_name="noop")
async def noop() -> None:
    if progress.finish_one():
        await bench_redis.rpush(DRAINED_KEY, "1")


@broker.task(task_name="nap")
async def nap() -> None:
    await asyncio.sleep(0.01)
    if progress.finish_one():
        await bench_redis.rpush(DRAINED_KEY, "1")


@broker.task(task_name="stamp")
async def stamp(origin: float) -> None:
    """Record how long after ``origin`` (epoch seconds) this job started."""
    await bench_redis.rpush(STAMPS_KEY, time.time() - origin)


# -- the driver: processes it starts --------------------------------------------------------


class TaskiqProcess:
    """A ``python -m taskiq ...`` process (and the processes it forks), logging to a file."""

    def __init__(self, proc: asyncio.subprocess.Process, log: IO[bytes], name: str) -> None:
        self.proc = proc
        self.log = log
        self.name = name

    @classmethod
    async def start(cls, name: str, log: IO[bytes], *args: str, expect: int) -> TaskiqProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "taskiq",
            *args,
            "--app-dir",
            str(HERE),
            cwd=HERE,
            env=os.environ | {ENV_EXPECT: str(expect)},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
        return cls(proc, log, name)

    def check_alive(self) -> None:
        if self.proc.returncode is not None:
            raise RuntimeError(f"taskiq {self.name} exited with {self.proc.returncode}")

    def cpu_seconds(self) -> float:
        """User+sys CPU of this process and its live descendants."""
        stats = proc_stats()
        return sum(stats[pid][1] for pid in process_tree(self.proc.pid, stats))

    async def stop(self) -> None:
        """SIGINT, taskiq's graceful shutdown; then SIGKILL whatever is left of the tree."""
        tree = process_tree(self.proc.pid, proc_stats())
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT)
            except TimeoutError:
                print(f"taskiq {self.name} did not stop in {STOP_TIMEOUT:g} s", file=sys.stderr)
        for pid in tree:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await self.proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        self.log.seek(0)
        return b"".join(self.log.readlines()[-lines:]).decode(errors="replace")


def proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user+sys CPU seconds) of every process, from /proc."""
    stats: dict[int, tuple[int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # exited meanwhile
            # Fields after the command: state, ppid, ..., utime (14th of stat), stime (15th).
            stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return stats


def process_tree(root: int, stats: dict[int, tuple[int, float]]) -> set[int]:
    """``root`` and its live descendants."""
    tree = {root} & stats.keys()
    while found := {pid for pid, (ppid, _) in stats.items() if ppid in tree} - tree:
        tree |= found
    return tree


@asynccontextmanager
async def running(name: str, *args: str, expect: int = 0) -> AsyncIterator[TaskiqProcess]:
    """A taskiq process for the duration of the block; its log tail on stderr on error."""
    with tempfile.TemporaryFile(prefix=f"taskiq-{name}-") as log:
        process = await TaskiqProcess.start(name, log, *args, expect=expect)
        try:
            yield process
        except BaseException:
            print(f"--- taskiq {name} log (tail) ---\n{process.log_tail()}", file=sys.stderr)
            raise
        finally:
            await process.stop()


def worker_args(concurrency: int) -> tuple[str, ...]:
    return ("worker", f"{MODULE}:broker", "--workers", "1", "--max-async-tasks", str(concurrency))


def scheduler_args(variant: Variant) -> tuple[str, ...]:
    return ("scheduler", f"{MODULE}:scheduler", *variant.scheduler_options)


async def pop(key: str, timeout: float, *watched: TaskiqProcess) -> float:
    """BLPOP one number from ``key``, failing early if a watched process has exited."""
    deadline = time.perf_counter() + timeout
    while (left := deadline - time.perf_counter()) > 0:
        popped = await bench_redis.blpop([key], timeout=min(0.5, left))
        if popped is not None:
            return float(popped[1])
        for process in watched:
            process.check_alive()
    raise TimeoutError(f"nothing on {key} after {timeout:g} s")


async def reset_keys() -> None:
    """Delete every key of this queue: the stream (and its consumer group), the markers,
    the schedule source's keys, and the broker's autoclaim lock."""
    keys = [
        key
        for pattern in (f"{QUEUE}:*", f"{SCHEDULE_PREFIX}:*")
        async for key in bench_redis.scan_iter(pattern, count=1000)
    ]
    lock = f"autoclaim:{broker.consumer_group_name}:{QUEUE}"
    await bench_redis.delete(QUEUE, lock, *keys)


# -- the scenarios --------------------------------------------------------------------------


async def enqueue_seq(jobs: int) -> dict[str, Any]:
    started = time.perf_counter()
    for _ in range(jobs):
        await noop.kiq()
    return {"seconds": time.perf_counter() - started}


async def enqueue_gather(
    jobs: int, kiq: Callable[[], Awaitable[object]] = noop.kiq
) -> dict[str, Any]:
    started = time.perf_counter()
    for first in range(0, jobs, GATHER):
        await asyncio.gather(*(kiq() for _ in range(min(GATHER, jobs - first))))
    return {"seconds": time.perf_counter() - started}


async def drain(jobs: int, concurrency: int) -> dict[str, Any]:
    """Run the ``jobs`` queued jobs with one worker process; see the module docstring."""
    await bench_redis.delete(READY_KEY, DRAINED_KEY)
    started = time.perf_counter()
    async with running("worker", *worker_args(concurrency), expect=jobs) as worker:
        await pop(READY_KEY, READY_TIMEOUT, worker)
        ready = time.perf_counter()
        await pop(DRAINED_KEY, DRAIN_TIMEOUT, worker)
        done = time.perf_counter()
        cpu = worker.cpu_seconds()
    print(
        f"drain: worker ready after {ready - started:.3f} s, "
        f"{jobs / (done - ready):,.0f} jobs/s from ready",
        file=sys.stderr,
    )
    return {"seconds": done - started, "worker_cpu_seconds": cpu}


async def latency(concurrency: int) -> dict[str, Any]:
    """One job at a time through the idle worker: its start - the enqueue call's start;
    LATENCY_JOBS samples, or fewer (at least LATENCY_MIN_JOBS) after LATENCY_BUDGET."""

    async def one(worker: TaskiqProcess) -> float:
        await stamp.kiq(time.time())
        return await pop(STAMPS_KEY, READY_TIMEOUT, worker)

    samples: list[float] = []
    async with running("worker", *worker_args(concurrency)) as worker:
        await pop(READY_KEY, READY_TIMEOUT, worker)
        await one(worker)  # warm-up: the worker is taking jobs
        budget_end = time.perf_counter() + LATENCY_BUDGET
        while len(samples) < LATENCY_JOBS and (
            len(samples) < LATENCY_MIN_JOBS or time.perf_counter() < budget_end
        ):
            samples.append(await one(worker) * 1000)
    return {
        "p50_ms": statistics.median(samples),
        "p99_ms": percentile(samples, 0.99),
        "samples": len(samples),
    }


async def schedule(dues: Sequence[float]) -> None:
    """One ``stamp`` job due at each time, with ``asyncio.gather`` in batches of GATHER."""
    for first in range(0, len(dues), GATHER):
        await asyncio.gather(
            *(
                stamp.schedule_by_time(schedule_source, datetime.fromtimestamp(due, UTC), due)
                for due in dues[first : first + GATHER]
            )
        )


async def delayed(jobs: int, spread: float, concurrency: int, variant: Variant) -> dict[str, Any]:
    """Lateness of ``jobs`` delayed jobs due over ``spread`` seconds; see the module docstring."""
    await schedule_source.startup()
    async with running("worker", *worker_args(concurrency)) as worker:
        await pop(READY_KEY, READY_TIMEOUT, worker)
        # Warm-up: probe jobs due now, as many as the largest batch below, which the scheduler
        # loads at start-up and sends on its first tick (a whole second).
        probes = min(jobs, GATHER)
        origin = time.time()
        await schedule([origin] * probes)
        async with running("scheduler", *scheduler_args(variant)) as sched:
            lateness = [await pop(STAMPS_KEY, READY_TIMEOUT, worker, sched) for _ in range(probes)]
            # Enqueue half-way through a reload period: neither the best case nor the worst.
            enqueue_at = math.floor(origin + min(lateness)) + variant.reload_period / 2
            while enqueue_at < time.time():
                enqueue_at += variant.reload_period
            await asyncio.sleep(enqueue_at - time.time())
            started = time.time()
            await schedule([started + LEAD + spread * i / jobs for i in range(jobs)])
            print(f"delayed: enqueued in {time.time() - started:.3f} s", file=sys.stderr)
            late = [
                (await pop(STAMPS_KEY, DELAYED_TIMEOUT, worker, sched)) * 1000 for _ in range(jobs)
            ]
    return {
        "p50_ms": statistics.median(late),
        "p99_ms": percentile(late, 0.99),
        "max_ms": max(late),
    }


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


async def play(args: argparse.Namespace) -> dict[str, Any]:
    match args.scenario:
        case "enqueue_seq":
            return await enqueue_seq(args.jobs)
        case "enqueue_gather" | "fill":
            return await enqueue_gather(args.jobs)
        case "drain":
            return await drain(args.jobs, args.concurrency)
        case "drain_sleep":
            await enqueue_gather(args.jobs, nap.kiq)
            return await drain(args.jobs, args.concurrency)
        case "latency":
            return await latency(args.concurrency)
        case _:
            jobs, spread = DELAYED[args.scenario]
            return await delayed(jobs, spread, args.concurrency, VARIANTS[args.variant])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.scenario == "variants":
        return {"variants": list(VARIANTS), "affects": AFFECTS}
    if args.scenario == "enqueue_bulk":
        return {"unsupported": "taskiq has no bulk enqueue API: one kiq() per job"}
    # SIGTERM cancels the scenario, so that the processes it started are stopped.
    if task := asyncio.current_task():
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        if args.scenario != "drain":  # drain runs what `fill` left; the rest start clean
            await reset_keys()
        await broker.startup()  # creates the consumer group before any job is added
        result = await play(args)
        if args.scenario not in {"fill", "drain"}:
            await reset_keys()
        return result
    finally:
        await broker.shutdown()
        await schedule_source.shutdown()
        await bench_redis.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(ARGS))))
