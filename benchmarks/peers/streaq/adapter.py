"""streaq adapter for the peer benchmark (the contract is ../CONTRACT.md).

    python adapter.py SCENARIO --redis-url URL --queue NAME [--jobs N] [--concurrency C]

streaq's documented API, default settings:
- one ``streaq.Worker(redis_url=..., queue_name=--queue, concurrency=C)`` with the tasks
  registered by ``@worker.task``; the same object is the client, opened with ``async with``;
- enqueue one: ``await noop.enqueue()``; bulk: ``await worker.enqueue_many([...])`` (one
  pipeline); delayed: ``record_due.enqueue(due).start(schedule=datetime)`` sent with
  ``enqueue_many``;
- the worker process is streaq's CLI, ``streaq run adapter:worker`` (started in this folder,
  which the CLI puts on ``sys.path``): it imports this module, whose ``worker`` attribute is
  built from the environment variables the adapter sets (see ``__getattr__``);
- a drain is over when ``worker.queue_size(include_scheduled=False)`` is 0: a finished task
  is XDEL'd from the stream in the same transaction that stores its result.

Variants: only ``default``. streaq has no poll-interval knob: the worker blocks on
XREADGROUP for new tasks and moves due delayed tasks to the stream every 500 ms, a constant
in ``Worker.schedule_delayed_tasks``.

The tasks that record their start RPUSH ``time.time()`` to the list ``bench:<queue>:starts``
with the worker's own client (``worker.redis``); the adapter reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import functools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from streaq import Worker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from coredis import Redis, RedisCluster
    from streaq.task import AsyncRegisteredTask

log = logging.getLogger("streaq-adapter")

HERE = Path(__file__).resolve().parent
ENV_URL = "STREAQ_BENCH_REDIS_URL"
ENV_QUEUE = "STREAQ_BENCH_QUEUE"
ENV_CONCURRENCY = "STREAQ_BENCH_CONCURRENCY"
VARIANTS = ["default"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
GATHER = 500  # enqueue_gather: enqueues in flight at once
LATENCY_ROUNDS = 200  # samples, unless LATENCY_BUDGET_S runs out first
LATENCY_BUDGET_S = 20.0  # seconds of sampling (from the first sample) ...
LATENCY_MIN_ROUNDS = 20  # ... but at least this many samples
LEAD_MS = 500  # delayed: the first due time, after the enqueue starts
DELAYED = {"delayed_sparse": (100, 1000), "delayed_burst": (1000, 500)}  # jobs, spread ms
SEED = 20240601
POLL_S = 0.02  # drain: how often the adapter asks whether the queue is empty
BUDGET_S = 105.0  # every wait gives up this long after the start (the contract: ~120 s)
DEADLINE = time.monotonic() + BUDGET_S
STOP_TIMEOUT_S = 10.0  # SIGTERM, then SIGKILL after this
PR_SET_PDEATHSIG = 1


# --- the tasks, shared by the adapter (client side) and the worker process ---------------


def starts_key(queue: str) -> str:
    return f"bench:{queue}:starts"


@dataclass(frozen=True)
class App:
    worker: Worker[None]
    noop: AsyncRegisteredTask[[], None]
    sleep: AsyncRegisteredTask[[], None]
    record: AsyncRegisteredTask[[], None]
    record_due: AsyncRegisteredTask[[int], None]


def build_app(redis_url: str, queue: str, concurrency: int) -> App:
    """One streaq Worker with the benchmark's tasks (default settings but queue and C)."""
    worker: Worker[None] = Worker(redis_url=redis_url, queue_name=queue, concurrency=concurrency)
    key = starts_key(queue)

    @worker.task(name="noop")
    async def noop() -> None:
        return None

    @worker.task(name="sleep")
    async def sleep() -> None:
        await asyncio.sleep(0.01)

    @worker.task(name="record")
    async def record() -> None:
        started = time.time()
        await worker.redis.rpush(key, [repr(started)])

    @worker.task(name="record_due")
    async def record_due(due_ms: int) -> None:
        started = time.time()
        await worker.redis.rpush(key, [f"{due_ms} {started!r}"])

    return App(worker, noop, sleep, record, record_due)


@functools.cache
def _worker_from_env() -> Worker[None]:
    env = os.environ
    return build_app(env[ENV_URL], env[ENV_QUEUE], int(env[ENV_CONCURRENCY])).worker


def __getattr__(name: str) -> Worker[None]:
    """``streaq run adapter:worker`` reads ``worker``: built from the adapter's env vars."""
    if name == "worker":
        return _worker_from_env()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- the worker process ----------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    scenario: str
    redis_url: str
    queue: str
    jobs: int
    concurrency: int
    variant: str


class WorkerProcess:
    """streaq's CLI in its own process."""

    def __init__(self, proc: asyncio.subprocess.Process, output: IO[bytes]) -> None:
        self.proc = proc
        self.output = output

    def check(self) -> None:
        if self.proc.returncode is not None:
            raise RuntimeError(f"the worker process exited with code {self.proc.returncode}")

    def cpu_seconds(self) -> float:
        """user + sys CPU of the worker process so far, from /proc/<pid>/stat."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # fields from the 3rd (state) on
        utime, stime = int(fields[11]), int(fields[12])
        return (utime + stime) / os.sysconf("SC_CLK_TCK")

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                log.warning("the worker ignored SIGTERM for %.0f s: SIGKILL", STOP_TIMEOUT_S)
                self.proc.kill()
                await self.proc.wait()

    def dump_output(self) -> None:
        self.output.seek(0)
        tail = self.output.read()[-4000:].decode(errors="replace")
        print(f"--- worker output (tail) ---\n{tail}", file=sys.stderr)


@asynccontextmanager
async def worker_process(opts: Options) -> AsyncIterator[WorkerProcess]:
    """Start ``streaq run adapter:worker``; stop it on exit, errors included.

    The child also gets PR_SET_PDEATHSIG, so it is sent SIGTERM if the adapter is killed.
    """
    env = {
        **os.environ,
        ENV_URL: opts.redis_url,
        ENV_QUEUE: opts.queue,
        ENV_CONCURRENCY: str(opts.concurrency),
    }
    cli = Path(sys.executable).parent / "streaq"
    die_with_parent = functools.partial(ctypes.CDLL(None).prctl, PR_SET_PDEATHSIG, signal.SIGTERM)
    with tempfile.TemporaryFile() as output:
        proc = await asyncio.create_subprocess_exec(
            str(cli),
            "run",
            "adapter:worker",
            cwd=HERE,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            preexec_fn=die_with_parent,
        )
        process = WorkerProcess(proc, output)
        ok = False
        try:
            yield process
            ok = True
        finally:
            await process.stop()
            if not ok:
                process.dump_output()


async def pop_start(redis: Redis[str] | RedisCluster[str], key: str, process: WorkerProcess) -> str:
    """The next record the tasks pushed (BLPOP), failing if the worker died or it never came."""
    while time.monotonic() < DEADLINE:
        process.check()
        item = await redis.blpop([key], timeout=1)
        if item is not None:
            return item[1]
    raise TimeoutError("no task recorded its start in time")


async def warm_up(app: App, process: WorkerProcess) -> None:
    """One task through the worker, then a pause: the worker is up and idle."""
    await app.record.enqueue()
    await pop_start(app.worker.redis, starts_key(app.worker.queue_name), process)
    await asyncio.sleep(0.2)


# --- scenarios -------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


async def enqueue_seq(app: App, opts: Options) -> dict[str, Any]:
    start = time.perf_counter()
    for _ in range(opts.jobs):
        await app.noop.enqueue()
    return {"seconds": time.perf_counter() - start}


async def enqueue_gather(app: App, opts: Options) -> dict[str, Any]:
    start = time.perf_counter()
    for first in range(0, opts.jobs, GATHER):
        count = min(GATHER, opts.jobs - first)
        await asyncio.gather(*(app.noop.enqueue() for _ in range(count)))
    return {"seconds": time.perf_counter() - start}


async def enqueue_bulk(app: App, opts: Options) -> dict[str, Any]:
    start = time.perf_counter()
    await app.worker.enqueue_many([app.noop.enqueue() for _ in range(opts.jobs)])
    return {"seconds": time.perf_counter() - start}


async def drain_queue(app: App, opts: Options) -> dict[str, Any]:
    """Start the worker on a filled queue; time until the stream is empty."""
    queued = await app.worker.queue_size(include_scheduled=False)
    if queued < opts.jobs:
        log.warning("the queue holds %d tasks, not %d", queued, opts.jobs)
    start = time.perf_counter()
    async with worker_process(opts) as process:
        while await app.worker.queue_size(include_scheduled=False) > 0:
            process.check()
            if time.monotonic() > DEADLINE:
                raise TimeoutError("the worker did not drain the queue in time")
            await asyncio.sleep(POLL_S)
        seconds = time.perf_counter() - start
        cpu = process.cpu_seconds()
    return {"seconds": seconds, "worker_cpu_seconds": cpu}


async def drain_sleep(app: App, opts: Options) -> dict[str, Any]:
    await app.worker.enqueue_many([app.sleep.enqueue() for _ in range(opts.jobs)])
    return await drain_queue(app, opts)


async def latency(app: App, opts: Options) -> dict[str, Any]:
    """One job at a time through the idle worker: its start - the enqueue call's start;
    LATENCY_ROUNDS samples, or fewer (at least LATENCY_MIN_ROUNDS) after LATENCY_BUDGET_S."""
    redis, key = app.worker.redis, starts_key(opts.queue)
    await redis.delete([key])
    samples: list[float] = []
    async with worker_process(opts) as process:
        await warm_up(app, process)
        budget_end = time.monotonic() + LATENCY_BUDGET_S
        for index in range(LATENCY_ROUNDS):
            if index >= LATENCY_MIN_ROUNDS and time.monotonic() > budget_end:
                break
            called = time.time()
            await app.record.enqueue()
            started = float(await pop_start(redis, key, process))
            samples.append((started - called) * 1000)
    return {
        "p50_ms": percentile(samples, 0.5),
        "p99_ms": percentile(samples, 0.99),
        "samples": len(samples),
    }


async def delayed(app: App, opts: Options) -> dict[str, Any]:
    """Schedule jobs due over a spread, the first LEAD_MS after the enqueue starts."""
    jobs, spread_ms = DELAYED[opts.scenario]
    redis, key = app.worker.redis, starts_key(opts.queue)
    await redis.delete([key])
    rng = random.Random(SEED)
    async with worker_process(opts) as process:
        await warm_up(app, process)
        first = int(time.time() * 1000) + LEAD_MS
        due = [first + rng.randrange(spread_ms) for _ in range(jobs)]
        tasks = [
            app.record_due.enqueue(ms).start(schedule=EPOCH + timedelta(milliseconds=ms))
            for ms in due
        ]
        await app.worker.enqueue_many(tasks)
        if (margin := first - time.time() * 1000) < 0:
            log.warning("the enqueue ended %.0f ms after the first due time", -margin)
        await asyncio.sleep(max(0.0, max(due) / 1000 - time.time()))
        while await redis.llen(key) < jobs:
            process.check()
            if time.monotonic() > DEADLINE:
                raise TimeoutError("not every delayed task ran in time")
            await asyncio.sleep(0.05)
        records = await redis.lrange(key, 0, -1)
    lateness = []
    for record in records:
        due_ms, started = record.split()
        lateness.append(float(started) * 1000 - int(due_ms))
    return {
        "p50_ms": percentile(lateness, 0.5),
        "p99_ms": percentile(lateness, 0.99),
        "max_ms": max(lateness),
    }


SCENARIOS: dict[str, Callable[[App, Options], Awaitable[dict[str, Any]]]] = {
    "enqueue_seq": enqueue_seq,
    "enqueue_gather": enqueue_gather,
    "enqueue_bulk": enqueue_bulk,
    "fill": enqueue_bulk,
    "drain": drain_queue,
    "drain_sleep": drain_sleep,
    "latency": latency,
    "delayed_sparse": delayed,
    "delayed_burst": delayed,
}


async def run(opts: Options) -> dict[str, Any]:
    if opts.scenario == "variants":
        return {"variants": VARIANTS}
    if opts.variant not in VARIANTS:
        return {"unsupported": f"no variant {opts.variant!r}: streaq has {VARIANTS}"}
    if opts.scenario not in SCENARIOS:
        return {"unsupported": f"unknown scenario {opts.scenario!r}"}
    app = build_app(opts.redis_url, opts.queue, opts.concurrency)
    async with app.worker:
        return await SCENARIOS[opts.scenario](app, opts)


def parse_args() -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scenario")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument("--queue", default="bench")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--variant", default="default")
    args = parser.parse_args()
    return Options(
        args.scenario, args.redis_url, args.queue, args.jobs, args.concurrency, args.variant
    )


def innermost(exc: BaseException) -> BaseException:
    """The error inside the exception groups that anyio's task groups wrap it in."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    opts = parse_args()
    try:
        result = asyncio.run(run(opts))
    except Exception as exc:
        traceback.print_exc()
        cause = innermost(exc)
        print(json.dumps({"error": f"{type(cause).__name__}: {cause}"}))
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
