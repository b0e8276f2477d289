"""Quick measurement of aioqueue's core path on a private redis-server.

    .venv/bin/python -m benchmarks.quick [--jobs 20000] [--concurrency 100] [--repeat 1]

Measures, per run (the table shows the median of ``--repeat`` runs):
  (a) enqueue rate, one ``await`` at a time
  (b) enqueue rate, ``asyncio.gather`` of 500 at a time, and of one bulk
      ``queue.enqueue_many`` of all N jobs
  (c) a redis-py baseline on the app's own client: sequential EVALSHA of ``return 1``,
      and sequential RPUSH
  (d) drain rate of N queued no-op jobs through one burst worker in a separate process
      (timed inside that process, from worker start to drained; its garbage collector
      set as ``aioqueue worker`` sets it, ops/garbage.py)
  (e) Redis commands per job during the drain, from INFO commandstats: those the worker
      sent (counted in the worker process as redis-py packs them) and those run inside
      scripts (all the others); the worker's CPU time per job (getrusage), and Redis's
      (INFO used_cpu_sys + used_cpu_user around the drain)
  (f) Redis memory per queued job (used_memory delta / N), and (g) per job still kept after
      the drain (the records of completed jobs: status, times, no payload, no result for a
      task that returns None), also as a share of (f)

It always starts its own redis-server and never touches one someone else started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer
from aioqueue.ops.garbage import tune_for_worker

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "bench"
QUEUE = "bench"
GATHER = 500
PARENT_COMMANDS = {"info", "config|resetstat"}  # what this process sends during a drain


def build_app(url: str) -> tuple[aioqueue.App, aioqueue.Task[[], None]]:
    """The app both processes build: one no-op task on one queue."""
    app = aioqueue.App(redis_url=url, prefix=PREFIX, default_queue=QUEUE)

    @app.task(queue=QUEUE, timeout=None)
    async def noop() -> None:
        return None

    return app, noop


# -- the worker process ----------------------------------------------------------------


def count_client_commands() -> Counter[str]:
    """Count every command this process sends, by name (``client|setinfo`` style)."""
    sent: Counter[str] = Counter()
    pack = AbstractConnection.pack_command

    def counting_pack(self: AbstractConnection, *args: Any) -> list[bytes]:
        name = _text(args[0]).lower()
        if " " in name:  # redis-py sends some subcommands as one "CLIENT SETINFO" arg
            name = name.replace(" ", "|")
        elif name in {"client", "config", "script"} and len(args) > 1:
            name = f"{name}|{_text(args[1]).lower()}"
        sent[name] += 1
        return pack(self, *args)

    AbstractConnection.pack_command = counting_pack  # type: ignore[method-assign]
    return sent


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def worker_process(url: str, concurrency: int) -> None:
    """Connect, say "ready", wait for "go", drain, print one JSON line of measurements."""
    sent = count_client_commands()
    app, _ = build_app(url)
    tune_for_worker()  # as `aioqueue worker` does: this process is a worker process
    async with app:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        sent.clear()  # only the drain counts
        before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        worker = app.worker(burst=True, concurrency=concurrency)
        await worker.run_until_idle()
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = {"seconds": seconds, "cpu": cpu, "outcomes": worker.outcomes, "sent": sent}
    print(json.dumps(report), flush=True)


# -- the measuring process -------------------------------------------------------------


@dataclass
class Run:
    """One run's measurements."""

    enqueue_seq: float = 0.0  # jobs/s
    enqueue_gather: float = 0.0  # jobs/s
    enqueue_bulk: float = 0.0  # jobs/s
    evalsha: float = 0.0  # calls/s
    rpush: float = 0.0  # calls/s
    drain: float = 0.0  # jobs/s
    cpu_us: float = 0.0  # worker CPU per job
    redis_us: float = 0.0  # Redis CPU per job during the drain (INFO used_cpu_sys + user)
    memory: float = 0.0  # bytes per queued job
    kept: float = 0.0  # bytes per job still kept after the drain
    sent: dict[str, float] = field(default_factory=dict)  # client commands per job, by name
    in_scripts: dict[str, float] = field(default_factory=dict)  # per job, by name

    @property
    def in_scripts_total(self) -> float:
        return sum(self.in_scripts.values())


async def rate(n: int, call: Callable[[int], Awaitable[object]], batch: int = 1) -> float:
    """Calls per second of ``call(i)`` for i in range(n), ``batch`` at a time."""
    started = time.perf_counter()
    if batch == 1:
        for i in range(n):
            await call(i)
    else:
        for start in range(0, n, batch):
            await asyncio.gather(*(call(i) for i in range(start, min(n, start + batch))))
    return n / (time.perf_counter() - started)


async def command_calls(redis: Redis) -> Counter[str]:
    stats: dict[str, dict[str, Any]] = await redis.info("commandstats")
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


async def redis_cpu(redis: Redis) -> float:
    """Seconds of CPU the server has used (INFO cpu: used_cpu_sys + used_cpu_user)."""
    info: dict[str, Any] = await redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def used_memory(redis: Redis) -> int:
    info: dict[str, Any] = await redis.info("memory")
    return int(info["used_memory"])


async def measure(url: str, jobs: int, concurrency: int) -> Run:
    run = Run()
    app, noop = build_app(url)
    async with app:
        redis = await app.client()
        await redis.flushall()

        # (a) one await at a time; (f) memory of these jobs, queued
        memory_before = await used_memory(redis)
        run.enqueue_seq = await rate(jobs, lambda _: noop.enqueue())
        run.memory = (await used_memory(redis) - memory_before) / jobs

        # (d, e) drain them in another process; (g) what the completed jobs keep
        drained = await drain(url, redis, jobs, concurrency)
        run.drain, run.cpu_us, run.redis_us, run.sent, run.in_scripts = drained
        run.kept = (await used_memory(redis) - memory_before) / jobs

        # (b) 500 at a time
        await redis.flushall()
        run.enqueue_gather = await rate(jobs, lambda _: noop.enqueue(), batch=GATHER)

        # (b) all at once, in bulk
        await redis.flushall()
        queue = app.queue(QUEUE)
        started = time.perf_counter()
        await queue.enqueue_many(noop.enqueue() for _ in range(jobs))
        run.enqueue_bulk = jobs / (time.perf_counter() - started)

        # (c) redis-py alone, on the same client and pool
        await redis.flushall()
        sha = await redis.script_load("return 1")
        run.evalsha = await rate(jobs, lambda _: redis.evalsha(sha, 0))
        run.rpush = await rate(jobs, lambda i: redis.rpush("bench:list", i))
        await redis.flushall()
    return run


async def drain(
    url: str, redis: Redis, jobs: int, concurrency: int
) -> tuple[float, float, float, dict[str, float], dict[str, float]]:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.quick", "--worker-process", url,
        "--concurrency", str(concurrency),
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    try:
        if await child.stdout.readline() != b"ready\n":
            raise RuntimeError("the worker process did not start")
        await redis.config_resetstat()
        cpu_before = await redis_cpu(redis)
        child.stdin.write(b"go\n")
        await child.stdin.drain()
        line = await child.stdout.readline()
        redis_us = (await redis_cpu(redis) - cpu_before) * 1e6 / jobs
        calls = await command_calls(redis)
    finally:
        if await child.wait() != 0:
            raise RuntimeError(f"the worker process exited with {child.returncode}")
    report = json.loads(line)
    if report["outcomes"] != {"complete": jobs}:
        raise RuntimeError(f"expected {jobs} complete jobs, got {report['outcomes']}")
    sent = Counter(report["sent"])
    for name in PARENT_COMMANDS:
        calls.pop(name, None)
    # A name the client sent is counted by the server too (unless rejected): the rest of
    # its calls, and every call of other names, ran inside scripts.
    in_scripts = Counter({name: max(0, count - sent[name]) for name, count in calls.items()})
    per_job = {name: count / jobs for name, count in sent.most_common()}
    by_name = {name: count / jobs for name, count in in_scripts.most_common() if count}
    return jobs / report["seconds"], report["cpu"] * 1e6 / jobs, redis_us, per_job, by_name


# -- the report ------------------------------------------------------------------------


def median(runs: list[Run], attribute: str) -> float:
    return float(statistics.median(getattr(run, attribute) for run in runs))


def table(runs: list[Run], jobs: int, concurrency: int) -> Iterator[str]:
    def per_second(attribute: str) -> str:
        value = median(runs, attribute)
        return f"{value:,.0f}/s | {1e6 / value:,.1f} µs"

    middle = runs[len(runs) // 2]  # one run's breakdowns by command name
    sent = middle.sent  # evalsha, blpop, then the rest
    main = {name: sent.get(name, 0.0) for name in ("evalsha", "blpop")}
    rest = {name: count for name, count in sent.items() if name not in main}
    names = ", ".join(f"{name} {count:.4f}" for name, count in main.items())
    names += f", other {sum(rest.values()):.4f}: {' '.join(rest)}" if rest else ""
    yield "| measurement | rate | per job/call |"
    yield "|---|---:|---:|"
    yield f"| (a) enqueue, one await at a time | {per_second('enqueue_seq')} |"
    yield f"| (b) enqueue, gather {GATHER} at a time | {per_second('enqueue_gather')} |"
    yield f"| (b) enqueue_many of {jobs:,}, one call | {per_second('enqueue_bulk')} |"
    yield f"| (c) redis-py EVALSHA `return 1`, sequential | {per_second('evalsha')} |"
    yield f"| (c) redis-py RPUSH, sequential | {per_second('rpush')} |"
    yield f"| (d) drain, 1 worker process, concurrency {concurrency} | {per_second('drain')} |"
    yield f"| (e) worker CPU | | {median(runs, 'cpu_us'):,.1f} µs |"
    yield f"| (e) Redis CPU during the drain | | {median(runs, 'redis_us'):,.1f} µs |"
    yield f"| (e) commands sent by the worker | | {sum(sent.values()):.4f} ({names}) |"
    shown = {name: count for name, count in middle.in_scripts.items() if count >= 0.005}
    scripted = ", ".join(f"{name} {count:.2f}" for name, count in shown.items())
    if len(shown) < len(middle.in_scripts):
        scripted += f", {len(middle.in_scripts) - len(shown)} more below 0.005"
    in_scripts = median(runs, "in_scripts_total")
    yield f"| (e) commands run inside scripts | | {in_scripts:.2f} ({scripted}) |"
    yield f"| (f) Redis memory per queued job | | {median(runs, 'memory'):,.0f} B |"
    kept, queued = median(runs, "kept"), median(runs, "memory")
    yield f"| (g) ... still kept per job after the drain | | {kept:,.0f} B ({kept / queued:.0%}) |"


async def server_version(url: str) -> str:
    redis = Redis.from_url(url)
    try:
        info: dict[str, Any] = await redis.info("server")
        return str(info["redis_version"])
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quick", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1, help="runs; rates are their median")
    parser.add_argument("--worker-process", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_process:
        asyncio.run(worker_process(args.worker_process, args.concurrency))
        return

    with EmbeddedServer() as server:
        version = asyncio.run(server_version(server.url))
        runs = [
            asyncio.run(measure(server.url, args.jobs, args.concurrency))
            for _ in range(args.repeat)
        ]
    print(
        f"aioqueue {aioqueue.__version__}, redis-server {version}, Python "
        f"{platform.python_version()}; {args.jobs:,} jobs, concurrency {args.concurrency}, "
        f"median of {args.repeat} run(s)\n"
    )
    print("\n".join(table(runs, args.jobs, args.concurrency)))


if __name__ == "__main__":
    main()
