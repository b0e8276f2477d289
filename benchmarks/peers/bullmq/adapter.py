"""BullMQ (Python package ``bullmq``) adapter for the peer benchmark (see ../CONTRACT.md).

    python adapter.py SCENARIO --redis-url URL --queue NAME [--jobs N] [--concurrency C]

BullMQ's documented API, default settings:
- client: ``bullmq.Queue(--queue, {"connection": URL})``; enqueue one:
  ``await queue.add(name, {})``; bulk: ``await queue.addBulk([{"name": ..., "data": {}}])``
  (one MULTI/EXEC pipeline per call; used for ``enqueue_bulk``, ``fill`` and the delayed
  scenarios); delayed: the job option ``{"delay": ms}``, due at ``job.timestamp + delay``;
- worker: ``bullmq.Worker(--queue, process, {"connection": URL, "concurrency": C})`` in its
  own process (this file run as ``adapter.py _worker ...``), kept alive until SIGTERM, then
  ``await worker.close()``, as in BullMQ's Python docs; ``process(job, token)`` dispatches on
  ``job.name``;
- a drain is over when ``queue.getJobCountByTypes("waiting", "active")`` is 0 (both moves
  are atomic Lua scripts); it then checks ``getFailedCount()``.

Variants: only ``default``. BullMQ does not poll: an idle worker blocks in BZPOPMIN on the
queue's marker key, which every add (delayed ones too) writes to; its only related option,
``drainDelay`` (5 s), is the BZPOPMIN timeout when nothing is due, and a new job ends that
wait at once.

The ``record`` job RPUSHes ``"<job id> <time.time()>"`` to the list ``bench:<queue>:starts``
as its first act (the worker's own redis-py client); the adapter reads it.
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
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import redis.asyncio as aioredis
from bullmq import Job, Queue, Worker  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

log = logging.getLogger("bullmq-adapter")

SCRIPT = Path(__file__).resolve()
VARIANTS = ["default"]
WORKER_MODE = "_worker"  # the first argument that makes this script the worker process
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


def starts_key(queue: str) -> str:
    return f"bench:{queue}:starts"


@dataclass(frozen=True)
class Options:
    scenario: str
    redis_url: str
    queue: str
    jobs: int
    concurrency: int
    variant: str


# --- the worker process ----------------------------------------------------------------


async def serve(opts: Options) -> None:
    """The worker process: a bullmq Worker until SIGTERM/SIGINT, then a graceful close."""
    records = aioredis.from_url(opts.redis_url, decode_responses=True)
    key = starts_key(opts.queue)

    async def process(job: Job, token: str) -> None:
        if job.name == "record":
            started = time.time()
            await records.rpush(key, f"{job.id} {started!r}")
        elif job.name == "sleep":
            await asyncio.sleep(0.01)
        elif job.name != "noop":
            raise ValueError(f"unknown job {job.name!r}")

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    worker = Worker(
        opts.queue, process, {"connection": opts.redis_url, "concurrency": opts.concurrency}
    )
    await stop.wait()
    await worker.close()
    await records.aclose()


class WorkerProcess:
    """This script in worker mode, in its own process."""

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
    """Start ``adapter.py _worker``; stop it on exit, errors included.

    The child also gets PR_SET_PDEATHSIG, so it is sent SIGTERM if the adapter is killed.
    """
    die_with_parent = functools.partial(ctypes.CDLL(None).prctl, PR_SET_PDEATHSIG, signal.SIGTERM)
    with tempfile.TemporaryFile() as output:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(SCRIPT),
            WORKER_MODE,
            "--redis-url",
            opts.redis_url,
            "--queue",
            opts.queue,
            "--concurrency",
            str(opts.concurrency),
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


# --- the adapter (client side) -----------------------------------------------------------


@dataclass(frozen=True)
class Client:
    queue: Queue
    redis: aioredis.Redis  # the adapter's own connection, to read the start records
    key: str


async def pop_start(client: Client, process: WorkerProcess) -> tuple[str, float]:
    """The next (job id, start) a job recorded (BLPOP); fails if the worker died."""
    while time.monotonic() < DEADLINE:
        process.check()
        item = await client.redis.blpop([client.key], timeout=1)
        if item is not None:
            job_id, started = cast("str", item[1]).split()
            return job_id, float(started)
    raise TimeoutError("no job recorded its start in time")


async def warm_up(client: Client, process: WorkerProcess) -> None:
    """One job through the worker, then a pause: the worker is up and idle."""
    await client.queue.add("record", {})
    await pop_start(client, process)
    await asyncio.sleep(0.2)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


async def enqueue_seq(client: Client, opts: Options) -> dict[str, Any]:
    start = time.perf_counter()
    for _ in range(opts.jobs):
        await client.queue.add("noop", {})
    return {"seconds": time.perf_counter() - start}


async def enqueue_gather(client: Client, opts: Options) -> dict[str, Any]:
    start = time.perf_counter()
    for first in range(0, opts.jobs, GATHER):
        count = min(GATHER, opts.jobs - first)
        await asyncio.gather(*(client.queue.add("noop", {}) for _ in range(count)))
    return {"seconds": time.perf_counter() - start}


async def enqueue_bulk(client: Client, opts: Options) -> dict[str, Any]:
    start = time.perf_counter()
    await client.queue.addBulk([{"name": "noop", "data": {}} for _ in range(opts.jobs)])
    return {"seconds": time.perf_counter() - start}


async def unfinished(queue: Queue) -> int:
    return int(await queue.getJobCountByTypes("waiting", "active"))


async def drain_queue(client: Client, opts: Options) -> dict[str, Any]:
    """Start the worker on a filled queue; time until nothing waits or runs."""
    if (queued := await unfinished(client.queue)) < opts.jobs:
        log.warning("the queue holds %d jobs, not %d", queued, opts.jobs)
    start = time.perf_counter()
    async with worker_process(opts) as process:
        while await unfinished(client.queue) > 0:
            process.check()
            if time.monotonic() > DEADLINE:
                raise TimeoutError("the worker did not drain the queue in time")
            await asyncio.sleep(POLL_S)
        seconds = time.perf_counter() - start
        cpu = process.cpu_seconds()
    if failed := await client.queue.getFailedCount():
        raise RuntimeError(f"{failed} jobs failed")
    return {"seconds": seconds, "worker_cpu_seconds": cpu}


async def drain_sleep(client: Client, opts: Options) -> dict[str, Any]:
    await client.queue.addBulk([{"name": "sleep", "data": {}} for _ in range(opts.jobs)])
    return await drain_queue(client, opts)


async def latency(client: Client, opts: Options) -> dict[str, Any]:
    """One job at a time through the idle worker: its start - the enqueue call's start;
    LATENCY_ROUNDS samples, or fewer (at least LATENCY_MIN_ROUNDS) after LATENCY_BUDGET_S."""
    await client.redis.delete(client.key)
    samples: list[float] = []
    async with worker_process(opts) as process:
        await warm_up(client, process)
        budget_end = time.monotonic() + LATENCY_BUDGET_S
        for index in range(LATENCY_ROUNDS):
            if index >= LATENCY_MIN_ROUNDS and time.monotonic() > budget_end:
                break
            called = time.time()
            await client.queue.add("record", {})
            _, started = await pop_start(client, process)
            samples.append((started - called) * 1000)
    return {
        "p50_ms": percentile(samples, 0.5),
        "p99_ms": percentile(samples, 0.99),
        "samples": len(samples),
    }


async def delayed(client: Client, opts: Options) -> dict[str, Any]:
    """Add jobs due over a spread, the first LEAD_MS after the enqueue starts."""
    jobs, spread_ms = DELAYED[opts.scenario]
    await client.redis.delete(client.key)
    rng = random.Random(SEED)
    delays = [LEAD_MS + rng.randrange(spread_ms) for _ in range(jobs)]
    async with worker_process(opts) as process:
        await warm_up(client, process)
        added = await client.queue.addBulk(
            [{"name": "record", "data": {}, "opts": {"delay": ms}} for ms in delays]
        )
        due = {job.id: job.timestamp + job.delay for job in added}
        if (margin := min(due.values()) - time.time() * 1000) < 0:
            log.warning("the enqueue ended %.0f ms after the first due time", -margin)
        await asyncio.sleep(max(0.0, max(due.values()) / 1000 - time.time()))
        while await client.redis.llen(client.key) < jobs:
            process.check()
            if time.monotonic() > DEADLINE:
                raise TimeoutError("not every delayed job ran in time")
            await asyncio.sleep(0.05)
        records = await client.redis.lrange(client.key, 0, -1)
    lateness = []
    for record in records:
        job_id, started = record.split()
        lateness.append(float(started) * 1000 - due[job_id])
    return {
        "p50_ms": percentile(lateness, 0.5),
        "p99_ms": percentile(lateness, 0.99),
        "max_ms": max(lateness),
    }


SCENARIOS: dict[str, Callable[[Client, Options], Awaitable[dict[str, Any]]]] = {
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
        return {"unsupported": f"no variant {opts.variant!r}: bullmq has {VARIANTS}"}
    if opts.scenario not in SCENARIOS:
        return {"unsupported": f"unknown scenario {opts.scenario!r}"}
    queue = Queue(opts.queue, {"connection": opts.redis_url})
    records = aioredis.from_url(opts.redis_url, decode_responses=True)
    try:
        return await SCENARIOS[opts.scenario](Client(queue, records, starts_key(opts.queue)), opts)
    finally:
        await queue.close()
        await records.aclose()


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


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    opts = parse_args()
    if opts.scenario == WORKER_MODE:
        asyncio.run(serve(opts))
        return
    try:
        result = asyncio.run(run(opts))
    except Exception as exc:
        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
