"""Test helpers: wait on conditions against a deadline, and run a worker until idle."""

from __future__ import annotations

import asyncio
import gc
import time
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

import aioqueue
from aioqueue.core.ids import fingerprint
from aioqueue.store.memory import memory_client


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], timeout: float = 5.0, *, interval: float = 0.01
) -> None:
    """Poll until ``predicate`` holds; fail at the deadline (instead of sleep-and-hope)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def plain_client(url: str) -> Redis:
    """A plain client of ``url``: ``Redis.from_url``, or the in-process server's."""
    return memory_client(url) if url.startswith("memory:") else Redis.from_url(url)


async def run_until_idle(app: aioqueue.App, **options: Any) -> aioqueue.Worker:
    """Run a burst worker until nothing is ready, running or due; return it for its stats."""
    worker = app.worker(burst=True, **options)
    await asyncio.wait_for(worker.run_until_idle(), timeout=30)
    return worker


def counts(ready: int = 0, scheduled: int = 0, active: int = 0, dead: int = 0) -> Any:
    """A QueueCounts to compare ``queue.counts()`` with."""
    return aioqueue.QueueCounts(ready=ready, scheduled=scheduled, active=active, dead=dead)


async def drain(app: aioqueue.App, **options: Any) -> Counter[str]:
    """Run a burst worker until the queues are idle; return its outcomes, after checking
    that nothing was left ready (a burst worker must not stop early)."""
    worker = await run_until_idle(app, **options)
    for name in worker.settings.queues:
        assert (await app.queue(name).counts()).ready == 0, f"{name} was left with ready jobs"
    return Counter(worker.outcomes)


async def produce_confirmed(
    enqueue: Callable[[str], Awaitable[object]], count: int, confirmed: dict[str, float]
) -> int:
    """Enqueue jobs ``j0``.. ``j<count-1>`` one at a time, each with its key as its id; an
    unconfirmed enqueue (Redis away, a failover) is retried with the same id, so none is
    lost and none written twice. Records when each was confirmed; returns the retries."""
    retries = 0
    for n in range(count):
        key = f"j{n}"
        while True:
            try:
                await enqueue(key)
            except aioqueue.ServerUnavailable:  # (EnqueueUnconfirmed is one)
                retries += 1
                await asyncio.sleep(0.1)
                continue
            confirmed[key] = time.monotonic()
            break
        await asyncio.sleep(0.002)
    return retries


async def now(value: object) -> bool:
    """A value already known, as the awaitable ``wait_until`` polls:
    ``wait_until(lambda: now(len(runs) > 100))``."""
    return bool(value)


def collect_leaked_sockets() -> list[str]:
    """Collect garbage now and return the unclosed sockets it found (``ResourceWarning``
    texts), instead of letting them surface as warnings in whichever test runs next."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    return [
        str(warning.message)
        for warning in caught
        if issubclass(warning.category, ResourceWarning) and "socket.socket" in str(warning.message)
    ]


def leaks_outside(leaked: list[str], ports: set[int]) -> list[str]:
    """The leaked sockets (see ``collect_leaked_sockets``) whose peer is not one of ``ports``."""
    return [text for text in leaked if not any(f", {port})" in text for port in ports)]


async def in_done_set(redis: Any, key: str, job_id: str | bytes) -> bool:
    """Whether a done set holds the id (its fingerprint: core/ids.py)."""
    raw = job_id.encode() if isinstance(job_id, str) else job_id
    return bool(await redis.sismember(key, str(fingerprint(raw))))


async def redis_ms(redis: Any) -> int:
    """The Redis clock, in epoch milliseconds (tests that wait on it, not on this host's)."""
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000
