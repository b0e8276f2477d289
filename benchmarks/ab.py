"""A/B of aioqueue's hot path between a base commit and this checkout, in one sitting.

    .venv/bin/python -m benchmarks.ab --base 676f4f4 [--rounds 5] [--jobs 20000]

For "no regression" claims on a shared, noisy machine: both sides run the same probe
(this file) on the same redis-server, alternating base / this checkout round by round, so
drift in the machine's load hits both alike. The base is a ``git worktree`` of ``--base``
(made in a temporary directory and removed after), put first on the probe's sys.path (on
PYTHONPATH alone it came after ``python -m``'s working directory, so both sides imported
this checkout; the probe now checks where ``aioqueue`` came from); the probe uses only the
public API, so it runs against any version.

The probe, per run: enqueue N no-op jobs with ``enqueue_many`` (fill rate), then drain
them with one burst worker in this process (concurrency 100; the task's timeout is
``--task-timeout``, 300 s by default as in ``@app.task``), timed from worker start to
drained, the process's CPU time per job during the drain (the worker's whole cost: no
producer runs meanwhile) and the server's (INFO's used_cpu_user + used_cpu_sys around the
drain; both sides use the same server, which serves nothing else). The table gives the
median of the rounds per side and their ratio (this checkout / base; > 1 means more for
rates, more CPU for costs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
METRICS = {  # name: (label, higher is better)
    "fill": ("enqueue_many fill (jobs/s)", True),
    "drain": ("drain, 1 in-process burst worker (jobs/s)", True),
    "drain_cpu_us": ("drain: process CPU per job (µs)", False),
    "drain_redis_us": ("drain: Redis CPU per job (µs)", False),
}


async def probe(url: str, prefix: str, jobs: int, timeout: float | None) -> dict[str, float]:
    import aioqueue  # the side's own package: main() put its tree first on sys.path

    app = aioqueue.App(redis_url=url, prefix=prefix, default_queue="ab")

    @app.task(queue="ab", timeout=timeout)
    async def noop(n: int) -> None:
        return None

    queue = app.queue("ab")
    started = time.perf_counter()
    for start in range(0, jobs, 1000):
        await queue.enqueue_many(noop.enqueue(n) for n in range(start, min(jobs, start + 1000)))
    fill = jobs / (time.perf_counter() - started)
    worker = app.worker(burst=True, concurrency=100)
    redis = await app.client()
    server = await redis_cpu(redis)
    cpu, wall = time.process_time(), time.perf_counter()
    await worker.run_until_idle()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    server = await redis_cpu(redis) - server
    await app.close()
    assert worker.outcomes["complete"] == jobs, worker.outcomes
    return {
        "fill": fill, "drain": jobs / wall, "drain_cpu_us": cpu / jobs * 1e6,
        "drain_redis_us": server / jobs * 1e6,
    }  # fmt: skip


async def redis_cpu(redis: Any) -> float:
    """The server's CPU seconds so far (user + system; INFO's own reply is in it)."""
    info: dict[str, Any] = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run_side(tree: Path, url: str, prefix: str, jobs: int, timeout: str) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.ab", "--probe", str(tree), url, prefix,
               str(jobs), timeout]  # fmt: skip
    out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def compare(base: str, rounds: int, jobs: int, timeout: str) -> None:
    from aioqueue.ops.embedded import EmbeddedServer

    workdir = Path(tempfile.mkdtemp(prefix="aioqueue-ab-"))
    tree = workdir / "base"
    subprocess.run(
        ["git", "worktree", "add", "-q", "--detach", str(tree), base], cwd=ROOT, check=True
    )
    results: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
    try:
        with EmbeddedServer() as server:
            for n in range(rounds):
                for side, path in (("base", tree), ("this", ROOT)):
                    run = run_side(path, server.url, f"ab{n}{side}", jobs, timeout)
                    results[side].append(run)
                    print(f"round {n + 1} {side}: {results[side][-1]}", file=sys.stderr)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    report(base, rounds, jobs, results)


def report(base: str, rounds: int, jobs: int, results: dict[str, list[dict[str, float]]]) -> None:
    print(f"A/B, {jobs:,} no-op jobs, median of {rounds} alternating rounds; base {base}\n")
    print("| metric | base | this checkout | this / base |")
    print("|---|---:|---:|---:|")
    for key, (label, _) in METRICS.items():
        base_median = statistics.median(run[key] for run in results["base"])
        this_median = statistics.median(run[key] for run in results["this"])
        ratio = this_median / base_median
        print(f"| {label} | {base_median:,.1f} | {this_median:,.1f} | {ratio:.3f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        tree, url, prefix, jobs, timeout = sys.argv[2:7]
        sys.path.insert(0, tree)  # before the working directory, which holds this checkout
        import aioqueue

        found = Path(aioqueue.__file__).resolve()
        assert found.is_relative_to(Path(tree).resolve()), f"{found} is not from {tree}"
        seconds = None if timeout == "none" else float(timeout)
        print(json.dumps(asyncio.run(probe(url, prefix, int(jobs), seconds))))
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__)
    parser.add_argument("--base", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument(
        "--task-timeout", default="300", help="the no-op task's timeout in seconds, or 'none'"
    )
    args = parser.parse_args()
    compare(args.base, args.rounds, args.jobs, args.task_timeout)


if __name__ == "__main__":
    main()
