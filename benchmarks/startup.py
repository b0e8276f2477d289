"""Worker start-up: from starting ``aioqueue worker`` to its first job, as a whole process.

    .venv/bin/python -m benchmarks.startup [--runs 15] [--redis-url URL]
    .venv/bin/python -m benchmarks.startup --fill 20 --redis-url URL   # queue 20 jobs, exit

Each run queues one job, then starts ``python -m aioqueue worker
benchmarks.startup_app:app -c 1``, a new process as a deployment starts one; the job's
handler ends that process at once (``os._exit``), so the process's life is the whole
start-up: the interpreter, the imports, the app module, connecting, the worker's start, the
take and the handler's call. It prints the median, min and max of the runs' wall time and
CPU time (the kernel's accounting of the finished child), beside two floors measured the
same way: a bare interpreter, and one that imports only ``redis.asyncio``.

``--fill`` only queues jobs, for timing the same worker command with an outside tool
(``/usr/bin/time``), one job per run. Without ``--redis-url`` it starts its own
redis-server on a free loopback port, and never touches one someone else started.

The children may write their byte-code cache (``PYTHONDONTWRITEBYTECODE`` is dropped from
their environment) and the first, uncounted run writes it: an installed package has its
cache, and compiling a hundred modules on each start would be measured otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from aioqueue.ops.embedded import EmbeddedServer
from benchmarks.startup_app import app, first

ROOT = Path(__file__).resolve().parents[1]
WORKER = [
    sys.executable,
    "-m",
    "aioqueue",
    "worker",
    "benchmarks.startup_app:app",
    "-c",
    "1",
    "--log-level",
    "warning",
]
# The floors end as the worker does, with os._exit (its handler's): an interpreter's normal
# exit, tearing down every module, would add ~25-30 ms to them and none to the worker.
FLOORS = {
    "python: nothing": [sys.executable, "-c", "import os; os._exit(0)"],
    "python: import redis.asyncio": [
        sys.executable, "-c", "import redis.asyncio, os; os._exit(0)",
    ],
}  # fmt: skip


@dataclass(frozen=True)
class Timing:
    """One finished child: wall and CPU seconds."""

    wall: float
    cpu: float


def child_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["AIOQUEUE_REDIS_URL"] = url
    env["PYTHONPATH"] = str(ROOT)
    return env


def timed(argv: list[str], env: dict[str, str]) -> Timing:
    """Run ``argv`` to its end; its wall time and the kernel's count of its CPU time."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {child.returncode}")
    return Timing(wall, usage.ru_utime + usage.ru_stime)


async def fill(url: str, jobs: int) -> None:
    app.set_redis_url(url)
    async with app:
        for _ in range(jobs):
            await first.enqueue()


def measure(argv: list[str], env: dict[str, str], runs: int, url: str | None) -> list[Timing]:
    """``runs`` counted runs after one warm-up (a job queued before each when ``url``)."""
    timings = []
    for _ in range(runs + 1):
        if url is not None:
            asyncio.run(fill(url, 1))
        timings.append(timed(argv, env))
    return timings[1:]


def row(name: str, timings: list[Timing]) -> str:
    walls = [t.wall * 1000 for t in timings]
    cpus = [t.cpu * 1000 for t in timings]
    return (
        f"| {name} | {statistics.median(walls):.0f} | {min(walls):.0f}-{max(walls):.0f} "
        f"| {statistics.median(cpus):.0f} |"
    )


def report(url: str, runs: int) -> None:
    env = child_env(url)
    print(f"{runs} runs each (after one warm-up), ms; Python {sys.version.split()[0]}")
    print("| process | wall, median | wall, min-max | CPU, median |")
    print("| --- | ---: | ---: | ---: |")
    print(row("aioqueue worker: start to first job", measure(WORKER, env, runs, url)))
    for name, argv in FLOORS.items():
        print(row(name, measure(argv, env, runs, None)))
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"(all children together: {usage.ru_utime + usage.ru_stime:.2f} s of CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="counted runs (default: 15)")
    parser.add_argument("--redis-url", help="a Redis to use (default: start one)")
    parser.add_argument("--fill", type=int, metavar="N", help="only queue N jobs, then exit")
    args = parser.parse_args()
    if args.fill is not None:
        if not args.redis_url:
            raise SystemExit("--fill needs --redis-url")
        asyncio.run(fill(args.redis_url, args.fill))
        return
    if args.redis_url:
        report(args.redis_url, args.runs)
        return
    server = EmbeddedServer()
    try:
        report(server.start(), args.runs)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
