"""arq adapter for the peer comparison (the contract: ``benchmarks/peers/CONTRACT.md``).

    python benchmarks/peers/arq/adapter.py SCENARIO --redis-url URL --queue NAME
           [--jobs N] [--concurrency C] [--variant default|poll10ms]

What it uses of arq 0.28 (documented API, arq's defaults unless said otherwise):

- Enqueue: ``arq.connections.create_pool(RedisSettings.from_dsn(url),
  default_queue_name=queue)``, then ``ArqRedis.enqueue_job("noop")``: one
  WATCH/EXISTS/MULTI/PSETEX/ZADD/EXEC transaction per job. arq has no bulk enqueue, so
  ``enqueue_bulk`` is unsupported and ``fill`` gathers ``enqueue_job`` in batches of 500.
  Delayed jobs: ``enqueue_job(..., _defer_until=<aware datetime>)``.
- Worker: arq's CLI, ``python -m arq adapter.worker_settings``, run as a child process from
  this folder (the CLI puts the working directory on ``sys.path``). ``worker_settings`` is
  the documented settings dict: ``functions``, ``redis_settings``, ``queue_name`` and
  ``max_jobs=C``, read from the ``BENCH_WORKER_OPTIONS`` environment variable the adapter
  sets. The CLI's default logging (INFO, two lines per job) goes to a temp file, shown on
  stderr only if the worker fails.
- Variants: ``default`` (``poll_delay`` 0.5 s) and ``poll10ms`` (``poll_delay=0.01``): arq
  finds due work, immediate or deferred, only by polling its queue's sorted set. The
  setting is the worker's, so ``poll10ms`` affects only the scenarios that run one (drain,
  drain_sleep, latency, the delayed ones; ``affects`` in the ``variants`` answer).
- Jobs done: ``drain`` polls ``ZCARD`` of the queue (arq removes a job from its sorted set
  when the job finishes) every 10 ms.
- Start times: the ``record_start`` job RPUSHes ``"<tag> <time.time()>"`` to
  ``<queue>:starts`` through the worker's own connection (``ctx["redis"]``) as its first act.

``latency`` waits a random ``uniform(0, poll_delay)`` before each enqueue, so jobs arrive at
random points of the worker's poll cycle: back to back, each would be enqueued just after a
poll and wait a whole ``poll_delay``. It stops after 200 samples or 20 s of sampling,
whichever comes first (at least 20 samples): with the default 0.5 s, ~40 samples.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from arq.connections import ArqRedis, RedisSettings, create_pool

if TYPE_CHECKING:
    from redis.asyncio import Redis

HERE = Path(__file__).resolve().parent
OPTIONS_ENV = "BENCH_WORKER_OPTIONS"  # the adapter's options, as JSON, for the worker process
VARIANTS: dict[str, dict[str, Any]] = {  # worker settings on top of arq's defaults
    "default": {},
    "poll10ms": {"poll_delay": 0.01},
}
AFFECTS = {  # the scenarios a variant changes: poll_delay is the worker's; enqueues run none
    "poll10ms": ["drain", "drain_sleep", "latency", "delayed_sparse", "delayed_burst"],
}
DEFAULT_POLL_DELAY_S = 0.5  # arq.worker.Worker's default poll_delay
UNSUPPORTED = {
    "enqueue_bulk": "arq has no bulk enqueue API (enqueue_job is one transaction per job)",
}


# -- the jobs, and the settings the worker process imports -----------------------------


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def sleep10ms(ctx: dict[str, Any]) -> None:
    await asyncio.sleep(0.01)


async def record_start(ctx: dict[str, Any], *, into: str, tag: int) -> None:
    """Record when this job started, by this machine's clock, with the adapter's tag."""
    started = time.time()
    redis: Redis = ctx["redis"]  # the worker's ArqRedis
    await cast("Awaitable[int]", redis.rpush(into, f"{tag} {started!r}"))


@dataclass(frozen=True)
class Options:
    redis_url: str = "redis://127.0.0.1:6379/0"
    queue: str = "bench"
    jobs: int = 20_000
    concurrency: int = 100
    variant: str = "default"

    @property
    def starts_key(self) -> str:
        return f"{self.queue}:starts"


def build_worker_settings(options: Options) -> dict[str, Any]:
    return {
        "functions": [noop, sleep10ms, record_start],
        "redis_settings": RedisSettings.from_dsn(options.redis_url),
        "queue_name": options.queue,
        "max_jobs": options.concurrency,
        **VARIANTS[options.variant],
    }


# What ``arq adapter.worker_settings`` runs (in the adapter itself, only defaults).
worker_settings = build_worker_settings(Options(**json.loads(os.environ.get(OPTIONS_ENV, "{}"))))


def worker_command() -> list[str]:
    return [sys.executable, "-m", "arq", "adapter.worker_settings"]


def arrival_jitter_s(options: Options) -> float:
    """How long a job may wait for the worker's next poll."""
    poll_delay: float = VARIANTS[options.variant].get("poll_delay", DEFAULT_POLL_DELAY_S)
    return poll_delay


# -- the adapter's side of arq ---------------------------------------------------------


class Client:
    """The adapter's ArqRedis pool: enqueues, and reads the queue and the start records."""

    def __init__(self, redis: ArqRedis, queue: str) -> None:
        self.redis = redis
        self._queue = queue

    @classmethod
    async def connect(cls, options: Options) -> Client:
        settings = RedisSettings.from_dsn(options.redis_url)
        return cls(await create_pool(settings, default_queue_name=options.queue), options.queue)

    async def close(self) -> None:
        await self.redis.aclose()

    async def enqueue(self, function: str, *, due_ms: int | None = None, **kwargs: Any) -> None:
        defer_until = None if due_ms is None else datetime.fromtimestamp(due_ms / 1000, UTC)
        if await self.redis.enqueue_job(function, _defer_until=defer_until, **kwargs) is None:
            raise RuntimeError("enqueue_job returned None (a job with that id exists)")

    async def unfinished(self) -> int:
        """Jobs queued or running: arq removes a job from its queue when it finishes."""
        return await cast("Awaitable[int]", self.redis.zcard(self._queue))


# -- the harness: the same in the arq and saq adapters -----------------------------------

GATHER = 500  # enqueues in flight at once
LATENCY_SAMPLES = 200  # unless LATENCY_BUDGET_S runs out first
LATENCY_BUDGET_S = 20.0  # seconds of sampling (from the first sample) ...
LATENCY_MIN_SAMPLES = 20  # ... but at least this many samples
LEAD_MS = 500  # the first due time of the delayed scenarios, after the enqueue starts
DONE_POLL_S = 0.01  # how often drain checks whether the queue is empty
WAIT_LIMIT_S = 100.0  # no single wait of a scenario takes longer
STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL after this
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def note(message: str) -> None:
    print(f"[{HERE.name}] {message}", file=sys.stderr, flush=True)


def now_ms() -> int:
    return int(time.time() * 1000)


class Worker:
    """A running worker process, seen from the adapter."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def check(self) -> None:
        """Raise if the worker has exited."""
        if self.process.poll() is not None:
            raise RuntimeError(f"the worker exited early with {self.process.returncode}")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the worker process so far."""
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # from field 3 (state) on
        user, system = int(fields[11]), int(fields[12])  # fields 14 and 15
        return (user + system) / os.sysconf("SC_CLK_TCK")

    async def wait_until(self, done: Callable[[], Awaitable[bool]], every: float) -> None:
        """Poll ``done`` until true; raise if the worker exits or WAIT_LIMIT_S passes."""
        deadline = time.monotonic() + WAIT_LIMIT_S
        while not await done():
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"not done after {WAIT_LIMIT_S}s")
            await asyncio.sleep(every)


@contextlib.contextmanager
def worker_process(options: Options) -> Iterator[Worker]:
    """Run the system's worker (its CLI) as a child process, stopped on exit (SIGTERM, then
    SIGKILL); on Linux it also gets SIGTERM if the adapter dies first. Its log goes to a
    temp file, shown on stderr if the block fails."""
    env = {**os.environ, OPTIONS_ENV: json.dumps(asdict(options))}
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            worker_command(), cwd=HERE, env=env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
        )  # fmt: skip
        failed = True
        try:
            yield Worker(process)
            failed = False
        finally:
            stop(process)
            if failed:
                log.seek(0)
                note(f"the worker's log ends with:\n{log.read()[-4000:].decode(errors='replace')}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        note(f"the worker did not stop within {STOP_GRACE_S}s: killing it")
        process.kill()
        process.wait()


def die_with_parent() -> Callable[[], object] | None:
    """A preexec_fn asking Linux to SIGTERM the child when the adapter dies."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    return functools.partial(libc.prctl, PR_SET_PDEATHSIG, signal.SIGTERM)


class Starts:
    """The Redis list the ``record_start`` jobs push ``"<tag> <start time>"`` to."""

    def __init__(self, redis: Redis, key: str) -> None:
        self._redis = redis
        self.key = key

    async def next(self, worker: Worker) -> tuple[int, float]:
        """Wait for the next record: (tag, start time)."""
        deadline = time.monotonic() + WAIT_LIMIT_S
        while True:
            popped = await cast(
                "Awaitable[list[bytes] | None]", self._redis.blpop([self.key], timeout=1)
            )
            if popped is not None:
                return self._parse(popped[1])
            worker.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no job started within {WAIT_LIMIT_S}s")

    async def count(self) -> int:
        return await cast("Awaitable[int]", self._redis.llen(self.key))

    async def take_all(self) -> list[tuple[int, float]]:
        records = await cast("Awaitable[list[bytes]]", self._redis.lrange(self.key, 0, -1))
        await self._redis.delete(self.key)
        return [self._parse(record) for record in records]

    @staticmethod
    def _parse(record: bytes) -> tuple[int, float]:
        tag, started = record.split()
        return int(tag), float(started)


def percentiles(values: list[float], *, with_max: bool = False) -> dict[str, float]:
    """p50 and p99 (linear interpolation between closest ranks), in ms, rounded."""
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    summary = {"p50_ms": cuts[49], "p99_ms": cuts[98]}
    if with_max:
        summary["max_ms"] = max(values)
    return {name: round(value, 2) for name, value in summary.items()}


async def enqueue_gathered(client: Client, function: str, jobs: int) -> None:
    for start in range(0, jobs, GATHER):
        batch = range(start, min(jobs, start + GATHER))
        await asyncio.gather(*(client.enqueue(function) for _ in batch))


async def warm_up(client: Client, starts: Starts, worker: Worker) -> None:
    """One immediate and one delayed job through the worker, then let it go idle."""
    await client.enqueue("record_start", into=starts.key, tag=-1)
    await starts.next(worker)
    await client.enqueue("record_start", due_ms=now_ms() + 100, into=starts.key, tag=-2)
    await starts.next(worker)
    await asyncio.sleep(0.3)


# -- scenarios -------------------------------------------------------------------------


async def enqueue_seq(client: Client, options: Options) -> dict[str, Any]:
    started = time.perf_counter()
    for _ in range(options.jobs):
        await client.enqueue("noop")
    return {"seconds": time.perf_counter() - started}


async def enqueue_gather(client: Client, options: Options) -> dict[str, Any]:
    started = time.perf_counter()
    await enqueue_gathered(client, "noop", options.jobs)
    return {"seconds": time.perf_counter() - started}


async def fill(client: Client, options: Options) -> dict[str, Any]:
    return await enqueue_gather(client, options)  # no bulk API: gathered enqueues


async def drain(client: Client, options: Options) -> dict[str, Any]:
    if (queued := await client.unfinished()) != options.jobs:
        note(f"drain: the queue holds {queued} jobs, not --jobs {options.jobs}")

    async def drained() -> bool:
        return await client.unfinished() == 0

    started = time.perf_counter()
    with worker_process(options) as worker:
        await worker.wait_until(drained, DONE_POLL_S)
        seconds = time.perf_counter() - started
        cpu = worker.cpu_seconds()
    return {"seconds": seconds, "worker_cpu_seconds": cpu}


async def drain_sleep(client: Client, options: Options) -> dict[str, Any]:
    await enqueue_gathered(client, "sleep10ms", options.jobs)
    return await drain(client, options)


async def latency(client: Client, options: Options) -> dict[str, Any]:
    """Enqueue one job at a time (after a random pause of up to the system's poll interval,
    if it polls) and wait for its start; latency = start - the enqueue call's start.
    LATENCY_SAMPLES samples, or fewer (at least LATENCY_MIN_SAMPLES) after the budget."""
    starts = Starts(client.redis, options.starts_key)
    rng = random.Random(0)
    pause = arrival_jitter_s(options)
    samples: list[float] = []
    with worker_process(options) as worker:
        await warm_up(client, starts, worker)
        budget_end = time.monotonic() + LATENCY_BUDGET_S
        for index in range(LATENCY_SAMPLES):
            if index >= LATENCY_MIN_SAMPLES and time.monotonic() > budget_end:
                note(f"latency: {LATENCY_BUDGET_S:g} s budget spent after {index} samples")
                break
            await asyncio.sleep(rng.uniform(0, pause))
            sent = time.time()
            await client.enqueue("record_start", into=starts.key, tag=index)
            tag, started = await starts.next(worker)
            if tag != index:
                raise RuntimeError(f"expected the start of job {index}, got {tag}")
            samples.append((started - sent) * 1000)
    return {**percentiles(samples), "samples": len(samples)}


async def delayed(client: Client, options: Options, jobs: int, spread_ms: int) -> dict[str, Any]:
    """Enqueue ``jobs`` jobs up front, gathered, due at random over ``spread_ms`` from
    LEAD_MS after the enqueue starts; lateness = start - due."""
    starts = Starts(client.redis, options.starts_key)
    rng = random.Random(jobs)
    with worker_process(options) as worker:
        await warm_up(client, starts, worker)
        first = now_ms() + LEAD_MS
        due = [first + rng.randrange(spread_ms) for _ in range(jobs)]
        for start in range(0, jobs, GATHER):
            await asyncio.gather(
                *(
                    client.enqueue("record_start", due_ms=ms, into=starts.key, tag=ms)
                    for ms in due[start : start + GATHER]
                )
            )
        note(f"delayed: the enqueue ended {min(due) - now_ms()} ms before the first due time")
        await asyncio.sleep(max(0, max(due) - now_ms()) / 1000)

        async def all_started() -> bool:
            return await starts.count() >= jobs

        await worker.wait_until(all_started, 0.05)
    lateness = [started * 1000 - due_ms for due_ms, started in await starts.take_all()]
    return percentiles(lateness, with_max=True)


async def delayed_sparse(client: Client, options: Options) -> dict[str, Any]:
    return await delayed(client, options, jobs=100, spread_ms=1000)


async def delayed_burst(client: Client, options: Options) -> dict[str, Any]:
    return await delayed(client, options, jobs=1000, spread_ms=500)


Scenario = Callable[[Client, Options], Awaitable[dict[str, Any]]]
SCENARIOS: dict[str, Scenario] = {
    scenario.__name__: scenario
    for scenario in (
        enqueue_seq, enqueue_gather, fill, drain, drain_sleep, latency,
        delayed_sparse, delayed_burst,
    )
}  # fmt: skip


async def run(scenario: str, options: Options) -> dict[str, Any]:
    if scenario == "variants":
        return {"variants": list(VARIANTS), "affects": AFFECTS}
    if scenario in UNSUPPORTED:
        return {"unsupported": UNSUPPORTED[scenario]}
    client = await Client.connect(options)
    try:
        return await SCENARIOS[scenario](client, options)
    finally:
        await client.close()


def parse_args() -> tuple[str, Options]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("scenario", choices=["variants", *SCENARIOS, *UNSUPPORTED])
    parser.add_argument("--redis-url")
    parser.add_argument("--queue")
    parser.add_argument("--jobs", type=int, default=Options.jobs)
    parser.add_argument("--concurrency", type=int, default=Options.concurrency)
    parser.add_argument("--variant", choices=list(VARIANTS), default="default")
    args = parser.parse_args()
    if args.scenario != "variants" and not (args.redis_url and args.queue):
        parser.error("--redis-url and --queue are required")
    options = Options(
        redis_url=args.redis_url or Options.redis_url,
        queue=args.queue or Options.queue,
        jobs=args.jobs,
        concurrency=args.concurrency,
        variant=args.variant,
    )
    return args.scenario, options


def main() -> None:
    scenario, options = parse_args()
    print(json.dumps(asyncio.run(run(scenario, options))), flush=True)


if __name__ == "__main__":
    main()
