"""Log fan-out: one machine's log lines go to three processors that each analyse all of
them (the seed design's scenario), through a topic.

Run it (a private redis-server is started when ``AIOQUEUE_REDIS_URL`` is unset)::

    python -m examples.log_fanout

The sender declares the three subscriber groups, starts worker processes
(``aioqueue worker examples.log_fanout:app -p 2``: each serves every group, and the two
share each group's messages), publishes the lines, waits until every group has processed
all of them (``wait_processed``: woken by the acks, no end marker needed), prints what each
processor found, and stops the workers. What every group processed is trimmed from the
topic as it goes, so the topic ends empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aioqueue
from aioqueue.ops.embedded import EmbeddedServer

ROOT = Path(__file__).resolve().parent.parent
LINES = 10_000
SERVICES = ("api", "auth", "billing", "search")
LEVELS = ("DEBUG", "INFO", "INFO", "INFO", "WARNING", "ERROR")
PATHS = ("/login", "/orders", "/orders/{id}", "/search", "/invoices")
GROUPS = ("levels", "errors", "latency")

app = aioqueue.App(prefix=os.environ.get("LOG_FANOUT_PREFIX", "log-fanout"))
logs = app.topic("logs")


def results(name: str) -> str:
    return f"{app.settings.prefix}:results:{name}"


async def record(group: str, *commands: tuple[Any, ...]) -> None:
    """Count the line as seen by ``group`` and store its findings (one round trip)."""
    redis = await app.client()
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hincrby(results("seen"), group, 1)
        for command in commands:
            pipe.execute_command(*command)
        await pipe.execute()


@app.subscriber("logs", group="levels")
async def count_levels(line: dict[str, Any]) -> None:
    """Processor 1: how many lines of each level."""
    await record("levels", ("HINCRBY", results("levels"), line["level"], 1))


@app.subscriber("logs", group="errors")
async def count_errors(line: dict[str, Any]) -> None:
    """Processor 2: errors per service."""
    found = [("HINCRBY", results("errors"), line["service"], 1)] if line["level"] == "ERROR" else []
    await record("errors", *found)


@app.subscriber("logs", group="latency")
async def slowest_paths(line: dict[str, Any]) -> None:
    """Processor 3: the slowest request seen on each path."""
    await record("latency", ("ZADD", results("slowest"), "GT", line["ms"], line["path"]))


def make_lines(count: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "n": n,
            "service": rng.choice(SERVICES),
            "level": rng.choice(LEVELS),
            "path": rng.choice(PATHS),
            "ms": round(rng.lognormvariate(3, 0.8), 1),
        }
        for n in range(count)
    ]


@dataclass
class FanoutDemo:
    """What run_demo() measured and found, for the tests to check."""

    published: int = 0
    publish_seconds: float = 0.0
    processed_seconds: float = 0.0
    seen: dict[str, int] = field(default_factory=dict)  # group -> lines it processed
    levels: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    slowest: dict[str, float] = field(default_factory=dict)
    expected_levels: dict[str, int] = field(default_factory=dict)
    kept_after: int = -1
    dropped: int = -1


async def run_demo(lines: list[dict[str, Any]], say: Any = print) -> FanoutDemo:
    """Publish ``lines``, wait until all three processors are through, read the findings
    (the workers run elsewhere: ``aioqueue worker examples.log_fanout:app``)."""
    demo = FanoutDemo(published=len(lines))
    redis = await app.client()
    await redis.delete(*(results(name) for name in ("seen", "levels", "errors", "slowest")))
    for group in GROUPS:  # before publishing: a group created later would still get what
        await logs.add_group(group)  # the log keeps, but declaring it says what to wait for
    started = time.perf_counter()
    await logs.publish_many(lines)
    demo.publish_seconds = time.perf_counter() - started
    say(f"published {len(lines):,} lines in {demo.publish_seconds:.2f}s")
    await logs.wait_processed(timeout=120, groups=GROUPS)
    demo.processed_seconds = time.perf_counter() - started
    say(f"all {len(GROUPS)} processors through them {demo.processed_seconds:.2f}s after the first")

    demo.seen = {k.decode(): int(v) for k, v in (await redis.hgetall(results("seen"))).items()}
    demo.levels = {k.decode(): int(v) for k, v in (await redis.hgetall(results("levels"))).items()}
    demo.errors = {k.decode(): int(v) for k, v in (await redis.hgetall(results("errors"))).items()}
    slowest = await redis.zrange(results("slowest"), 0, -1, withscores=True)
    demo.slowest = {path.decode(): ms for path, ms in slowest}
    for line in lines:
        demo.expected_levels[line["level"]] = demo.expected_levels.get(line["level"], 0) + 1
    info = await logs.info()
    demo.kept_after, demo.dropped = info.size, info.dropped

    say(f"lines seen per processor: {dict(sorted(demo.seen.items()))}")
    say(f"  levels:  {dict(sorted(demo.levels.items()))}")
    say(f"  errors:  {dict(sorted(demo.errors.items()))}")
    say(f"  slowest: { {path: f'{ms:.0f} ms' for path, ms in sorted(demo.slowest.items())} }")
    say(f"topic after: {info.size} kept (processed by all: trimmed), {info.dropped} dropped")
    return demo


@contextlib.contextmanager
def workers(url: str, prefix: str, processes: int = 2) -> Any:
    """``aioqueue worker examples.log_fanout:app -p N`` in the background; SIGTERM at the
    end (running messages finish first)."""
    env = {**os.environ, "AIOQUEUE_REDIS_URL": url, "LOG_FANOUT_PREFIX": prefix}
    command = [sys.executable, "-m", "aioqueue", "worker", "examples.log_fanout:app",
               "-p", str(processes), "-c", "50"]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _run(url: str) -> None:
    app.set_redis_url(url)
    try:
        with workers(url, app.settings.prefix):
            await run_demo(make_lines(LINES))
    finally:
        await app.close()


def main() -> None:
    with contextlib.ExitStack() as stack:
        url = app.redis_url
        if url is None:
            server = stack.enter_context(EmbeddedServer())
            url = server.url
            print(f"AIOQUEUE_REDIS_URL is not set: started a private {server.name} at {url}")
        asyncio.run(_run(url))


if __name__ == "__main__":
    main()
