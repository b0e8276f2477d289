"""Delayed jobs: how late they start, and what the promoter's tick costs on a big schedule.

    .venv/bin/python -m benchmarks.delayed [--quick] [--rounds 5] [--schedule 1000000] [--trace]

Part 1, lateness = (time the handler started) - (due time), in ms. One worker process
(``app.worker(concurrency=100)``, default settings) runs a handler that returns
``time.time()`` as its first act; this process enqueues up front with ``at=`` (due times in
whole epoch ms, the first ~0.5 s after the enqueue), waits, and reads each job's result.
Both are this machine's clock. The worker is warmed up (one immediate and one delayed
job completed) and idle before each round. Scenarios:
  sparse  100 jobs, due times uniform over 1 s
  burst   1,000 jobs, due times uniform over 0.5 s
The ``due -> taken`` column is the job record's ``st`` (the take script's Redis TIME, whole
ms) minus the due time. ``--trace`` also logs, inside the worker, every promote and take call
and every promoter sleep, and splits the lateness into its stages.

Part 2, one promoter tick on a schedule of N future jobs (N = 1,000,000; 100,000 with
``--quick``), filled with the real enqueue script in pipelined EVALSHA batches: client time
per ``leasing.promote(limit=1000)`` call, and Redis-side time per call from ``INFO
commandstats`` (mean, ``cmdstat_evalsha``) and ``SLOWLOG`` (median, logging every command
while measuring), when (a) nothing is due (200 calls) and (b) 1,000 are due (jobs enqueued
with a 20 ms delay, one call per round). An empty schedule is measured first as a baseline.
Memory: INFO used_memory delta per scheduled job, and MEMORY USAGE of the schedule ZSET.

It always starts its own redis-server and never touches one someone else started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson
from redis.asyncio import Redis

import aioqueue
from aioqueue.client.enqueue import JobOptions
from aioqueue.core.payload import Payload
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.store.scripts import enqueues, leasing
from aioqueue.worker.promoter import Promoter

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from aioqueue.core.keys import QueueKeys

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "bench"
QUEUE = "delayed"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LEAD_MS = 500  # the first due time, after the enqueue starts
GATHER = 500  # enqueues in flight at once
PROMOTE_LIMIT = 1000
FILL_BATCH = 5_000  # EVALSHA per pipeline while filling the schedule
FILL_PIPELINES = 3  # pipelines in flight at once
SOON_MS = 20  # part 2 (b): delay of the jobs that become due


@dataclass(frozen=True)
class Scenario:
    name: str
    jobs: int
    spread_ms: int


@dataclass(frozen=True)
class Config:
    quick: bool
    rounds: int
    schedule: int
    scenarios: tuple[Scenario, ...]
    idle_calls: int = 200
    due_rounds: int = 20
    trace: bool = False


def build_app(url: str) -> tuple[aioqueue.App, aioqueue.Task[[int], float]]:
    """The app both processes build: one task that reports when its handler started."""
    app = aioqueue.App(redis_url=url, prefix=PREFIX, default_queue=QUEUE)

    @app.task(queue=QUEUE, timeout=None)
    async def stamp(index: int) -> float:
        return time.time()

    return app, stamp


# -- the worker process ----------------------------------------------------------------


@dataclass
class Trace:
    """What the worker's promoter and consumer did, by this machine's clock (seconds)."""

    takes: list[tuple[float, float, list[str]]] = field(default_factory=list)
    sleeps: list[tuple[float, float, float, bool]] = field(default_factory=list)

    def install(self) -> None:
        """Wrap leasing.take (a module attribute, looked up at each call; promotes go
        through it too) and Promoter._sleep, so the worker's own loops use the wrappers."""
        take, sleep = leasing.take, Promoter._sleep

        async def traced_take(redis: Redis, keys: QueueKeys, **options: Any) -> Any:
            sent = time.time()
            result = await take(redis, keys, **options)
            self.takes.append((sent, time.time(), [job.job_id for job in result.jobs]))
            return result

        async def traced_sleep(promoter: Promoter, seconds: float) -> None:
            started = time.time()
            await sleep(promoter, seconds)
            if seconds > 0:  # woken early: by a schedule-wake token (or stopping), not the alarm
                ended = time.time()
                self.sleeps.append((started, seconds, ended, ended - started < seconds))

        for owner, name, wrapper in (
            (leasing, "take", traced_take),
            (Promoter, "_sleep", traced_sleep),
        ):
            setattr(owner, name, wrapper)


async def worker_process(url: str, concurrency: int, trace: bool) -> None:
    """Run a worker until stdin says stop; print the trace (if any) as one JSON line."""
    traced = Trace()
    if trace:
        traced.install()
    app, _ = build_app(url)
    async with app, app.worker(concurrency=concurrency):
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
    print(json.dumps(vars(traced)), flush=True)


class WorkerProcess:
    """The worker process, seen from here."""

    def __init__(self, url: str, concurrency: int, trace: bool) -> None:
        self._args = [
            sys.executable, "-m", "benchmarks.delayed", "--worker-process", url,
            "--concurrency", str(concurrency), *(["--trace"] if trace else []),
        ]  # fmt: skip
        self._child: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self._child = await asyncio.create_subprocess_exec(
            *self._args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=1 << 28
        )
        assert self._child.stdout is not None
        if await self._child.stdout.readline() != b"ready\n":
            raise RuntimeError("the worker process did not start")

    async def stop(self) -> Trace:
        child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        child.stdin.write(b"stop\n")
        await child.stdin.drain()
        line = await child.stdout.readline()
        if await child.wait() != 0:
            raise RuntimeError(f"the worker process exited with {child.returncode}")
        return Trace(**json.loads(line))


# -- part 1: lateness ------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One job: its due time (epoch ms), the handler's start (epoch ms, float), and
    the take script's Redis time (whole epoch ms)."""

    job_id: str
    due_ms: int
    started_ms: float
    taken_ms: int

    @property
    def lateness(self) -> float:
        return self.started_ms - self.due_ms


@dataclass
class RoundResult:
    samples: list[Sample]
    enqueue_margin_ms: float  # first due time minus the end of the enqueue


def due_times(jobs: int, spread_ms: int, rng: random.Random) -> list[datetime]:
    first = int(time.time() * 1000) + LEAD_MS
    return [EPOCH + timedelta(milliseconds=first + rng.randrange(spread_ms)) for _ in range(jobs)]


async def lateness_round(
    app: aioqueue.App, stamp: aioqueue.Task[[int], float], scenario: Scenario, seed: int
) -> RoundResult:
    """Enqueue the scenario's jobs up front (in random order), wait, read the stamps."""
    rng = random.Random(seed)
    times = due_times(scenario.jobs, scenario.spread_ms, rng)
    due_ms = [JobOptions(at=at).due_ms() for at in times]  # what enqueue sends to Redis
    queue = app.queue(QUEUE)
    ids: list[str] = []
    for start in range(0, scenario.jobs, GATHER):
        chunk = range(start, min(scenario.jobs, start + GATHER))
        jobs = await asyncio.gather(*(stamp.enqueue(i).options(at=times[i]) for i in chunk))
        ids += [job.id for job in jobs]
    margin = min(due_ms) - time.time() * 1000
    await asyncio.sleep(max(0.0, (max(due_ms) - time.time() * 1000) / 1000) + 0.05)
    records = await wait_complete(await app.client(), [queue.keys.job(i) for i in ids])
    samples = [
        Sample(job_id, due, orjson.loads(result) * 1000, int(taken))
        for job_id, due, (result, taken) in zip(ids, due_ms, records, strict=True)
    ]
    return RoundResult(samples, margin)


async def wait_complete(redis: Redis, keys: Sequence[str], timeout: float = 30.0) -> list[Any]:
    """Poll the job records until every one is complete; return their (r, st) fields."""
    deadline = time.monotonic() + timeout
    while True:
        async with redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hmget(key, "s", "r", "st")
            records = await pipe.execute()
        if all(state == b"complete" for state, _, _ in records):
            return [(result, taken) for _, result, taken in records]
        if time.monotonic() > deadline:
            states = sorted({str(state) for state, _, _ in records})
            raise RuntimeError(f"jobs not complete after {timeout}s: states {states}")
        await asyncio.sleep(0.05)


async def warm_up(stamp: aioqueue.Task[[int], float]) -> None:
    """One immediate and one delayed job through the worker, then let it go idle."""
    await (await stamp.enqueue(-1)).result(timeout=10)
    await (await stamp.enqueue(-2).options(delay=0.1)).result(timeout=10)
    await asyncio.sleep(0.3)


async def measure_lateness(url: str, config: Config) -> tuple[dict[str, list[RoundResult]], Trace]:
    app, stamp = build_app(url)
    results: dict[str, list[RoundResult]] = {s.name: [] for s in config.scenarios}
    async with app:
        await (await app.client()).flushall()
        worker = WorkerProcess(url, concurrency=100, trace=config.trace)
        await worker.start()
        try:
            await warm_up(stamp)
            for r in range(config.rounds):
                for scenario in config.scenarios:
                    results[scenario.name].append(await lateness_round(app, stamp, scenario, r))
                    await asyncio.sleep(0.3)  # idle again before the next round
        finally:
            trace = await worker.stop()
    return results, trace


# -- part 2: one promoter tick on a big schedule -----------------------------------------


@dataclass
class Tick:
    """Per-call figures of one measurement: client µs (median), Redis µs (commandstats
    mean, SLOWLOG median)."""

    client_us: float
    client_p99_us: float
    stats_us: float
    slowlog_us: float
    calls: int


@dataclass
class ScheduleResult:
    size: int
    idle: Tick
    due: Tick
    fill_rate: float = 0.0
    memory_per_job: float = 0.0
    zset_per_job: float = 0.0
    payload_bytes: int = 0


class CommandRecorder:
    """Stands in for the client: records the EVALSHA that ``enqueues.enqueue`` would send, so
    the schedule is filled with exactly its KEYS and ARGV, but in a pipeline."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def evalsha(self, *args: Any) -> list[Any]:
        self.calls.append(args)
        return [1, b"scheduled"]


async def enqueue_batch(
    redis: Redis, keys: QueueKeys, jobs: Sequence[tuple[str, int, int]], payload: bytes
) -> None:
    """Enqueue (id, delay_ms, due_ms) jobs with the real enqueue script, one pipeline."""
    recorder = CommandRecorder()
    client = cast("Redis", recorder)
    for job_id, delay_ms, due_ms in jobs:
        await enqueues.enqueue(
            client, keys, job_id=job_id, payload=payload, priority=5, max_attempts=3,
            delay_ms=delay_ms, due_ms=due_ms,
        )  # fmt: skip
    async with redis.pipeline(transaction=False) as pipe:
        for args in recorder.calls:
            pipe.evalsha(*args)
        replies = await pipe.execute()
    if any(reply != [1, b"scheduled"] for reply in replies):
        raise RuntimeError("enqueue did not schedule every job")


async def fill(redis: Redis, keys: QueueKeys, size: int, payload: bytes) -> float:
    """Schedule ``size`` jobs due 1 h to 25 h from now; return jobs/s."""
    first = int(time.time() * 1000) + 3_600_000
    step = max(1, 86_400_000 // size)
    started = time.perf_counter()

    async def lane(lane_no: int) -> None:
        for start in range(lane_no * FILL_BATCH, size, FILL_PIPELINES * FILL_BATCH):
            chunk = range(start, min(size, start + FILL_BATCH))
            await enqueue_batch(
                redis, keys, [(f"{i:032x}", 0, first + i * step) for i in chunk], payload
            )

    await asyncio.gather(*(lane(n) for n in range(FILL_PIPELINES)))
    return size / (time.perf_counter() - started)


async def reset_stats(redis: Redis) -> None:
    await redis.config_resetstat()
    await redis.slowlog_reset()


async def redis_side(redis: Redis, calls: int) -> tuple[float, float]:
    """(commandstats mean µs, SLOWLOG median µs) of the EVALSHA calls since reset_stats."""
    stats: dict[str, dict[str, Any]] = await redis.info("commandstats")
    evalsha = stats["cmdstat_evalsha"]
    if int(evalsha["calls"]) != calls:
        raise RuntimeError(f"expected {calls} EVALSHA calls, Redis counted {evalsha['calls']}")
    entries: list[dict[str, Any]] = await redis.slowlog_get(calls + 50)
    durations = [e["duration"] for e in entries if e["command"].upper().startswith(b"EVALSHA")]
    return float(evalsha["usec_per_call"]), float(statistics.median(durations))


async def idle_ticks(redis: Redis, keys: QueueKeys, calls: int) -> Tick:
    """(a) promote calls with nothing due."""
    timings = []
    await reset_stats(redis)
    for _ in range(calls):
        started = time.perf_counter()
        result = await leasing.promote(redis, keys, limit=PROMOTE_LIMIT)
        timings.append((time.perf_counter() - started) * 1e6)
        if result.count:
            raise RuntimeError("a job was due in the idle measurement")
    stats_us, slowlog_us = await redis_side(redis, calls)
    return Tick(statistics.median(timings), percentile(timings, 0.99), stats_us, slowlog_us, calls)


async def due_ticks(redis: Redis, keys: QueueKeys, rounds: int, payload: bytes) -> Tick:
    """(b) one promote call per round, with 1,000 jobs due (enqueued SOON_MS earlier)."""
    timings, stats, slowlog = [], [], []
    for r in range(rounds):
        ids = [f"due-{r}-{i}" for i in range(PROMOTE_LIMIT)]
        await enqueue_batch(redis, keys, [(i, SOON_MS, 0) for i in ids], payload)
        await asyncio.sleep(2 * SOON_MS / 1000)
        await reset_stats(redis)
        started = time.perf_counter()
        result = await leasing.promote(redis, keys, limit=PROMOTE_LIMIT)
        timings.append((time.perf_counter() - started) * 1e6)
        if result.count != PROMOTE_LIMIT:
            raise RuntimeError(f"promoted {result.count}, expected {PROMOTE_LIMIT}")
        stats_us, slowlog_us = await redis_side(redis, 1)
        stats.append(stats_us)
        slowlog.append(slowlog_us)
        # leave the schedule as it was: drop what was promoted
        await redis.unlink(*keys.ready_lists(), keys.notify, keys.schedule_wake)
        await redis.unlink(*(keys.job(i) for i in ids))
    return Tick(
        statistics.median(timings),
        percentile(timings, 0.99),
        statistics.median(stats),
        statistics.median(slowlog),
        rounds,
    )


async def used_memory(redis: Redis) -> int:
    info: dict[str, Any] = await redis.info("memory")
    return int(info["used_memory"])


async def measure_ticks(url: str, config: Config) -> list[ScheduleResult]:
    app, _ = build_app(url)
    keys = app.queue(QUEUE).keys
    payload = Payload("stamp", [0]).encode(app.settings.max_payload_bytes)
    async with app:
        redis = await app.client()
        await redis.flushall()
        await redis.config_set("slowlog-max-len", 1024)
        results = []
        for size in (0, config.schedule):
            await redis.config_set("slowlog-log-slower-than", 10_000)
            before = await used_memory(redis)
            rate = await fill(redis, keys, size, payload) if size else 0.0
            after = await used_memory(redis)
            zset: int = await redis.memory_usage(keys.schedule, samples=0) or 0
            await redis.config_set("slowlog-log-slower-than", 0)  # log every command
            idle = await idle_ticks(redis, keys, config.idle_calls)
            due = await due_ticks(redis, keys, config.due_rounds, payload)
            per = max(1, size)
            results.append(
                ScheduleResult(
                    size, idle, due, rate, (after - before) / per, zset / per, len(payload)
                )
            )
        await redis.config_set("slowlog-log-slower-than", 10_000)
        await redis.flushall()
    return results


# -- the report ------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def lateness_table(
    results: dict[str, list[RoundResult]], scenarios: Sequence[Scenario]
) -> Iterator[str]:
    yield (
        "| scenario | jobs x rounds | lateness p50 | p99 | max "
        "| due → taken (st) p50 / p99 / max | min enqueue margin |"
    )
    yield "|---|---:|---:|---:|---:|---:|---:|"
    for scenario in scenarios:
        rounds = results[scenario.name]
        samples = [s for r in rounds for s in r.samples]
        late = [s.lateness for s in samples]
        taken = [float(s.taken_ms - s.due_ms) for s in samples]
        margin = min(r.enqueue_margin_ms for r in rounds)
        yield (
            f"| {scenario.name}: {scenario.jobs:,} due over {scenario.spread_ms / 1000:g} s "
            f"| {scenario.jobs:,} x {len(rounds)} "
            f"| {percentile(late, 0.5):.2f} ms | {percentile(late, 0.99):.2f} ms "
            f"| {max(late):.2f} ms "
            f"| {percentile(taken, 0.5):.0f} / {percentile(taken, 0.99):.0f} / {max(taken):.0f} ms "
            f"| {margin:.0f} ms |"
        )


def tick_table(results: Sequence[ScheduleResult]) -> Iterator[str]:
    yield (
        "| schedule | promote call | client µs/call (median) | client µs p99 "
        "| Redis µs/call, commandstats (mean) | Redis µs/call, SLOWLOG (median) |"
    )
    yield "|---|---|---:|---:|---:|---:|"
    for result in results:
        for label, tick in (
            (f"nothing due, {tick_calls(result.idle)}", result.idle),
            (f"1,000 due (limit=1000), {tick_calls(result.due)}", result.due),
        ):
            yield (
                f"| {result.size:,} jobs | {label} | {tick.client_us:,.0f} "
                f"| {tick.client_p99_us:,.0f} | {tick.stats_us:,.1f} | {tick.slowlog_us:,.0f} |"
            )
    big = results[-1]
    yield (
        f"| {big.size:,} jobs | memory: used_memory delta per scheduled job "
        f"({big.payload_bytes} B payload, 32-char id) | {big.memory_per_job:,.0f} B "
        f"| schedule ZSET alone: {big.zset_per_job:,.0f} B | total "
        f"{big.memory_per_job * big.size / 2**20:,.0f} MiB | fill: {big.fill_rate:,.0f} jobs/s |"
    )


def tick_calls(tick: Tick) -> str:
    return f"{tick.calls} calls" if tick.calls > 1 else "1 call"


# -- trace: where the lateness comes from ---------------------------------------------------


def stage_table(results: dict[str, list[RoundResult]], trace: Trace) -> Iterator[str]:
    """Split each job's lateness: due -> take call sent (the promoter's wake-up; when the
    worker has room its promote call is that take, else a notify token wakes the fetch
    loop) -> take reply -> handler."""
    take_of: dict[str, tuple[float, float]] = {
        job_id: (sent, received) for sent, received, ids in trace.takes for job_id in ids
    }
    yield "| scenario | stage | p50 ms | p99 ms | max ms |"
    yield "|---|---|---:|---:|---:|"
    for name, rounds in results.items():
        stages: dict[str, list[float]] = {
            "due → take sent": [],
            "take sent → take reply": [],
            "take reply → handler": [],
        }
        for s in (s for r in rounds for s in r.samples):
            take_sent, take_reply = (t * 1000 for t in take_of[s.job_id])
            values = (take_sent - s.due_ms, take_reply - take_sent, s.started_ms - take_reply)
            for stage, value in zip(stages.values(), values, strict=True):
                stage.append(value)
        for stage_name, column in stages.items():
            yield (
                f"| {name} | {stage_name} | {percentile(column, 0.5):.2f} "
                f"| {percentile(column, 0.99):.2f} | {max(column):.2f} |"
            )
    yield from sleep_rows(trace)


def sleep_rows(trace: Trace) -> Iterator[str]:
    timer = [
        (end - started - seconds) * 1000
        for started, seconds, end, woken in trace.sleeps
        if not woken
    ]
    woken = sum(1 for *_, by_event in trace.sleeps if by_event)
    yield (
        f"| all | promoter sleeps: {len(timer)} ended by the timer, {woken} by a wake event; "
        f"timer overshoot | {percentile(timer, 0.5):.2f} | {percentile(timer, 0.99):.2f} "
        f"| {max(timer):.2f} |"
    )


async def server_version(url: str) -> str:
    redis = Redis.from_url(url)
    try:
        info: dict[str, Any] = await redis.info("server")
        return str(info["redis_version"])
    finally:
        await redis.aclose()


def make_config(args: argparse.Namespace) -> Config:
    burst = 500 if args.quick else 1000
    return Config(
        quick=args.quick,
        rounds=args.rounds or (1 if args.quick else 5),
        schedule=args.schedule or (100_000 if args.quick else 1_000_000),
        scenarios=(Scenario("sparse", 100, 1000), Scenario("burst", burst, 500)),
        due_rounds=10 if args.quick else 20,
        trace=args.trace,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.delayed", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller: finishes in < 30 s")
    parser.add_argument("--rounds", type=int, default=0, help="rounds of each scenario")
    parser.add_argument("--schedule", type=int, default=0, help="jobs scheduled in part 2")
    parser.add_argument("--trace", action="store_true", help="split the lateness into stages")
    parser.add_argument("--skip-ticks", action="store_true", help="part 1 only")
    parser.add_argument("--worker-process", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=100, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_process:
        asyncio.run(worker_process(args.worker_process, args.concurrency, args.trace))
        return

    config = make_config(args)
    with EmbeddedServer() as server:
        version = asyncio.run(server_version(server.url))
        lateness, trace = asyncio.run(measure_lateness(server.url, config))
        ticks = [] if args.skip_ticks else asyncio.run(measure_ticks(server.url, config))
    print(
        f"aioqueue {aioqueue.__version__}, redis-server {version}, Python "
        f"{platform.python_version()}; 1 worker process, concurrency 100\n"
    )
    print("Lateness of delayed jobs (handler start - due time):\n")
    print("\n".join(lateness_table(lateness, config.scenarios)))
    if config.trace:
        print("\nWhere the lateness comes from (traced inside the worker):\n")
        print("\n".join(stage_table(lateness, trace)))
    if ticks:
        print(f"\nOne promoter tick (`leasing.promote`) on a schedule of {config.schedule:,}:\n")
        print("\n".join(tick_table(ticks)))


if __name__ == "__main__":
    main()
