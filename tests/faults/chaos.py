"""The chaos matrix's harness: a producer and two workers on a real topology, a fault, and a
ledger of what was confirmed and what ran.

``Chaos`` runs, inside the test process, producers that enqueue jobs one after another
(each with its key as its id: an unconfirmed enqueue is retried with that id, as
``EnqueueUnconfirmed`` says to do) and two workers, each on an App of its own (its own
connections), that record every run with its attempt. After the fault, the producers
stop, the workers drain, and the ledger says:

- lost: confirmed enqueues that never ran, or whose record on the surviving master does
  not say complete once the workers drained (a job run on a demoted master only, whose
  completion vanished with its data): must be none;
- same-attempt duplicates: runs of a job with an attempt it already ran with (a job run
  again because a lease expired counts another attempt, which is at-least-once working);
  at most what was in flight (leased) at the fault;
- stalled: the longest stretch without a confirmed enqueue from the fault on: how long
  producers waited for the system to come back.

Each case prints one line (``pytest -s``), the figures "Running at scale" quotes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

import aioqueue
from tests.helpers import now, wait_until

FULL_MATRIX = os.environ.get("AIOQUEUE_CHAOS") == "1"
slow = pytest.mark.skipif(not FULL_MATRIX, reason="a slow chaos case: AIOQUEUE_CHAOS=1 runs it")


@dataclass
class Ledger:
    """What the producers had confirmed and what the workers ran."""

    confirmed: dict[str, float] = field(default_factory=dict)  # key -> when (monotonic)
    runs: dict[str, list[int]] = field(default_factory=dict)  # key -> attempts of its runs
    unconfirmed: int = 0  # enqueue calls that raised (retried with the same id)
    incomplete: list[str] = field(default_factory=list)  # ran, but not complete in Redis

    def ran(self, key: str, attempt: int) -> None:
        self.runs.setdefault(key, []).append(attempt)

    @property
    def lost(self) -> list[str]:
        return sorted((set(self.confirmed) - set(self.runs)) | set(self.incomplete))

    @property
    def same_attempt_duplicates(self) -> int:
        return sum(len(attempts) - len(set(attempts)) for attempts in self.runs.values())

    @property
    def all_ran(self) -> bool:
        return set(self.confirmed) <= set(self.runs)

    def stalled(self, since: float) -> float:
        """The longest wait for a confirmed enqueue from ``since`` on (seconds)."""
        times = sorted(at for at in self.confirmed.values() if at >= since)
        if not times:
            return float("inf")
        gaps = [b - a for a, b in zip([since, *times], times, strict=False)]
        return max(gaps)

    def first_after(self, at: float) -> float:
        """Seconds from ``at`` to the first enqueue confirmed after it."""
        later = [when for when in self.confirmed.values() if when >= at]
        return min(later) - at if later else float("inf")


@dataclass
class Chaos:
    """Producers and two workers of queue ``queue`` on ``url`` (see the module docstring)."""

    url: str
    prefix: str
    queue: str = "chaos"
    options: dict[str, Any] = field(default_factory=dict)  # App options
    concurrency: int = 50
    lease: float = 5.0
    idle_wait: float = 1.0  # (below socket_timeout: a blocking wait never looks hung)
    producers: int = 2
    ledger: Ledger = field(default_factory=Ledger)
    apps: list[aioqueue.App] = field(default_factory=list)
    workers: list[aioqueue.Worker] = field(default_factory=list)
    lost_records: dict[str, str] = field(default_factory=dict)  # a few lost jobs' records
    _producing: list[asyncio.Task[None]] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def _app(self) -> aioqueue.App:
        app = aioqueue.App(redis_url=self.url, prefix=self.prefix, **self.options)
        ledger = self.ledger

        @app.task(queue=self.queue, name="work")
        async def work(key: str) -> None:
            ledger.ran(key, aioqueue.current_job().attempt)
            await asyncio.sleep(0.005)

        self.apps.append(app)
        return app

    @property
    def producer_app(self) -> aioqueue.App:
        return self.apps[0]

    async def start(self, *, warm_up: int = 300) -> None:
        """Start producing and two workers; return once ``warm_up`` jobs ran."""
        self._app()  # the producers'
        for _ in range(2):
            worker = self._app().worker(
                concurrency=self.concurrency, lease=self.lease, idle_wait=self.idle_wait
            )
            await worker.start()
            self.workers.append(worker)
        queue = self.producer_app.queue(self.queue)
        for number in range(self.producers):
            self._producing.append(asyncio.ensure_future(self._produce(queue, f"p{number}-")))
        await wait_until(lambda: now(len(self.ledger.runs) >= warm_up), timeout=30)

    async def _produce(self, queue: aioqueue.Queue, tag: str) -> None:
        for number in range(1_000_000):
            if self._stop.is_set():
                return
            key = f"{tag}{number}"
            while True:
                try:
                    await queue.enqueue("work", key).options(id=key)
                except aioqueue.ServerUnavailable:  # EnqueueUnconfirmed is one
                    self.ledger.unconfirmed += 1
                    await asyncio.sleep(0.05)
                    continue
                self.ledger.confirmed[key] = time.monotonic()
                break
            await asyncio.sleep(0.002)  # a steady load, not a wait for anything

    async def in_flight(self) -> int:
        """Jobs leased now (read before a fault: the bound on same-attempt duplicates)."""
        return (await self.producer_app.queue(self.queue).counts()).active

    async def confirmed_after(self, at: float, count: int = 50, timeout: float = 60) -> None:
        """Wait until ``count`` enqueues were confirmed after ``at`` (the system is back)."""

        def done() -> bool:
            return sum(1 for when in self.ledger.confirmed.values() if when > at) >= count

        await wait_until(lambda: now(done()), timeout=timeout, interval=0.05)

    async def finish(self, drain: float = 60) -> None:
        """Stop producing, let the workers run what was confirmed, stop everything."""
        self._stop.set()
        await asyncio.gather(*self._producing)
        with contextlib.suppress(AssertionError):  # the checks that follow say what is wrong
            await wait_until(lambda: now(self.ledger.all_ran), timeout=drain, interval=0.1)
        queue = self.producer_app.queue(self.queue)
        with contextlib.suppress(AssertionError):
            await wait_until(lambda: self._all_complete(queue), timeout=drain, interval=0.5)
        for key in self.ledger.lost[:5]:  # what became of them, for the report
            self.lost_records[key] = repr(await queue.info(key))
        await self.close()

    async def _all_complete(self, queue: aioqueue.Queue) -> bool:
        """Whether every confirmed job's record says complete (the ones that did not are
        in ``ledger.incomplete``)."""
        keys = self.ledger.incomplete or sorted(self.ledger.confirmed)
        # One at a time: redis-py 8.1's Cluster client, reading its slot map again after
        # a failover while other commands hold connections, fails some of them with
        # "'NoneType' object has no attribute 'writelines'".
        statuses = [await queue.status(key) for key in keys]
        done = aioqueue.JobStatus.COMPLETE
        self.ledger.incomplete = [k for k, s in zip(keys, statuses, strict=True) if s is not done]
        return not self.ledger.incomplete

    async def close(self) -> None:
        self._stop.set()
        for task in self._producing:
            task.cancel()
        await asyncio.gather(*self._producing, return_exceptions=True)
        for worker in self.workers:
            await worker.stop()
        for app in self.apps:
            await app.close()

    def report(self, case: str, fault_at: float, in_flight: int, details: str = "") -> None:
        ledger = self.ledger
        print(  # noqa: T201 - the case's figures, for the report (pytest -s)
            f"\nchaos: {case}: {len(ledger.confirmed)} confirmed, lost {len(ledger.lost)}, "
            f"same-attempt duplicates {ledger.same_attempt_duplicates} (in flight "
            f"{in_flight}), enqueues stalled {ledger.stalled(fault_at):.2f}s, "
            f"{ledger.unconfirmed} unconfirmed tries{details and '; ' + details}",
            flush=True,
        )

    def check(self, in_flight: int) -> None:
        assert self.ledger.lost == [], self.lost_records
        assert self.ledger.same_attempt_duplicates <= in_flight


class SentinelEvents:
    """What the Sentinels announce (every channel but their hello), and when each event
    was first heard from any of them."""

    def __init__(self, ports: list[int]) -> None:
        self._ports = ports
        self.seen: dict[str, float] = {}
        self._clients: list[Redis] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> SentinelEvents:
        for port in self._ports:
            client = Redis(port=port)
            pubsub = client.pubsub()
            await pubsub.psubscribe("*")
            self._clients.append(client)
            self._tasks.append(asyncio.ensure_future(self._listen(pubsub)))
        return self

    async def _listen(self, pubsub: Any) -> None:
        try:
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message and message["type"] == "pmessage":
                    self.seen.setdefault(message["channel"].decode(), time.monotonic())
        finally:
            await pubsub.aclose()

    async def wait(self, event: str, timeout: float = 30) -> float:
        """When ``event`` was first heard (waiting for it)."""
        await wait_until(lambda: now(event in self.seen), timeout=timeout, interval=0.005)
        return self.seen[event]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in self._clients:
            await client.aclose()


WRITES = ("evalsha", "hset", "set", "del", "rpush", "lpush", "zadd", "xadd")  # (no PUBLISH:
# the Sentinels publish their hello messages on every server)


def writes(port: int) -> int:
    """How many write commands a server has run (its commandstats)."""
    with SyncRedis(port=port) as client:
        stats: dict[str, Any] = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in WRITES)


def role(port: int) -> str:
    with SyncRedis(port=port) as client:
        reply: Any = client.execute_command("ROLE")
    return reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
