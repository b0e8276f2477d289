"""Taking and settling the jobs of one queue inside a worker.

A QueueConsumer runs two loops over one queue:
- fetch: take up to the free slots in one script call; when nothing is ready, block in
  BLPOP on the queue's notify list (and this worker's wake list) until a job arrives.
- acks: settle finished jobs in batches, one script call for everything that finished
  while the previous call was in flight, so an idle worker acks at once and a busy one
  acks hundreds of jobs per round trip.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from . import scripts
from ._aio import wait_event
from .priorities import planner

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from redis.asyncio import Redis

    from .keys import QueueKeys
    from .scripts import Settlement, Taken
    from .settings import WorkerSettings

logger = logging.getLogger(__name__)

MAX_ACK_BATCH = 500  # bounds one ack script's run time inside Redis
MAX_TAKE = 1000  # jobs per take call, likewise
RETRY_PAUSE = 0.5  # pause before retrying after a Redis error
GIVE_UP_AFTER = 30.0  # at shutdown, stop retrying acks after this long without Redis


class Slots:
    """The worker's concurrency limit, shared by all its queues."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self._freed = asyncio.Event()
        self._interrupted = False

    def reserve(self, limit: int) -> int:
        """Reserve up to ``limit`` free slots; give back the unused ones with release()."""
        count = min(limit, self.size - self.used)
        self.used += count
        return count

    def release(self, count: int = 1) -> None:
        self.used -= count
        if count:
            self._freed.set()

    async def wait_free(self) -> None:
        """Return when a slot is free, or when interrupt() is called."""
        while self.used >= self.size and not self._interrupted:
            self._freed.clear()
            await self._freed.wait()

    def interrupt(self) -> None:
        self._interrupted = True
        self._freed.set()


class AckBatcher:
    """Settles finished jobs of one queue, batching whatever accumulates per round trip."""

    def __init__(
        self,
        redis: Redis,
        keys: QueueKeys,
        *,
        result_ttl_ms: int,
        on_settled: Callable[[Sequence[Settlement], Sequence[bool]], None],
    ) -> None:
        self._redis, self._keys, self._result_ttl_ms = redis, keys, result_ttl_ms
        self._on_settled = on_settled
        self._pending: list[Settlement] = []
        self._wake = asyncio.Event()
        self._in_flight = False
        self._closing = False
        self._give_up_at = 0.0

    @property
    def idle(self) -> bool:
        return not self._pending and not self._in_flight

    def add(self, settlement: Settlement) -> None:
        self._pending.append(settlement)
        self._wake.set()

    def close(self) -> None:
        """Finish what is pending, then return from run().

        If Redis stays unreachable, run() gives up after GIVE_UP_AFTER seconds: those jobs
        stay active in Redis and come back when their leases expire, so none is lost.
        """
        self._closing = True
        self._give_up_at = asyncio.get_running_loop().time() + GIVE_UP_AFTER
        self._wake.set()

    async def run(self) -> None:
        while self._pending or not self._closing:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._pending[:MAX_ACK_BATCH]
            del self._pending[:MAX_ACK_BATCH]
            self._in_flight = True
            try:
                settled = await scripts.ack(
                    self._redis, self._keys, batch, result_ttl_ms=self._result_ttl_ms
                )
            except RedisError as exc:  # keep them: the guarantee needs every ack to land
                logger.warning(
                    "acking %d job(s) of %s failed: %r", len(batch), self._keys.name, exc
                )
                self._pending[:0] = batch
                if self._closing and asyncio.get_running_loop().time() > self._give_up_at:
                    logger.error(
                        "giving up acking %d job(s) of %s; they return when their leases expire",
                        len(self._pending),
                        self._keys.name,
                    )
                    return
                await asyncio.sleep(RETRY_PAUSE)
                continue
            finally:
                self._in_flight = False
            self._on_settled(batch, settled)


class QueueConsumer:
    """Takes jobs of one queue into the worker's free slots and settles them."""

    def __init__(
        self,
        redis: Redis,
        keys: QueueKeys,
        *,
        settings: WorkerSettings,
        result_ttl_ms: int,
        slots: Slots,
        worker_id: str,
        start_job: Callable[[QueueConsumer, Taken], None],
        stopping: asyncio.Event,
    ) -> None:
        self.redis, self.keys, self.settings = redis, keys, settings
        self._slots, self._worker_id, self._start_job = slots, worker_id, start_job
        self._stopping = stopping
        self.wake_key = keys.wake(worker_id)
        self._result_ttl_ms = result_ttl_ms
        self.acks = AckBatcher(redis, keys, result_ttl_ms=result_ttl_ms, on_settled=self._settled)
        self.held: dict[bytes, Taken] = {}  # leased to this worker until the ack lands
        self.running = 0
        self._activity = asyncio.Event()
        self._take_calls = 0
        self._settled_batches = 0
        self._plan = planner(settings.priority_mode, settings.priority_weights)

    def interrupt(self) -> None:
        """Wake the fetch loop wherever it waits in-process (stopping)."""
        self._activity.set()

    def finished(self, settlement: Settlement) -> None:
        """A job of this queue finished running: free its slot, queue its ack."""
        self.running -= 1
        self._slots.release()
        self.acks.add(settlement)

    def _settled(self, batch: Sequence[Settlement], settled: Sequence[bool]) -> None:
        self._settled_batches += 1
        for settlement, ok in zip(batch, settled, strict=True):
            self.held.pop(settlement.id, None)
            if not ok:
                logger.warning(
                    "job %s of %s: lease lost before its %s was recorded (it ran elsewhere too)",
                    settlement.id.decode("utf-8", "backslashreplace"),
                    self.keys.name,
                    settlement.outcome,
                )
        self._activity.set()

    async def fetch_loop(self) -> None:
        """Take jobs until stopping (or, in burst mode, until the queue is drained)."""
        woken = False
        while not self._stopping.is_set():
            await self._slots.wait_free()
            if self._stopping.is_set():
                break
            settled_before = self._settled_batches
            taken = await self._take(woken)
            if taken is None:  # Redis error: pause, then try again
                await wait_event(self._stopping, RETRY_PAUSE)
                continue
            if taken:
                woken = False
                continue
            if self.settings.burst:
                if await self._drained(settled_before):
                    return
                continue
            woken = await self._wait_for_work()

    async def _take(self, woken: bool) -> int | None:
        """Take up to the free slots; the number taken, or None after a Redis error."""
        free = self._slots.reserve(MAX_TAKE)
        self._take_calls += 1
        lease = f"{self._worker_id}:{self._take_calls}"
        try:
            result = await scripts.take(
                self.redis,
                self.keys,
                lease=lease,
                lease_ms=self.settings.lease_ms,
                limit=free,
                result_ttl_ms=self._result_ttl_ms,
                plan=self._plan(free),
                woken=woken,
            )
        except RedisError as exc:
            self._slots.release(free)
            logger.warning("taking jobs from %s failed: %r", self.keys.name, exc)
            return None
        self._slots.release(free - len(result.jobs))
        for job in result.jobs:
            self.held[job.id] = job
            self.running += 1
            self._start_job(self, job)
        return len(result.jobs)

    async def _wait_for_work(self) -> bool:
        """Block until a job is announced; True if a notify token was consumed."""
        try:
            popped = await self.redis.blpop(
                [self.keys.notify, self.wake_key], timeout=self.settings.idle_wait
            )
        except RedisError as exc:
            logger.warning("waiting for jobs on %s failed: %r", self.keys.name, exc)
            await wait_event(self._stopping, RETRY_PAUSE)
            return False
        return popped is not None and popped[0] == self.keys.notify.encode()

    async def _drained(self, settled_before: int) -> bool:
        """Burst mode: True once nothing is ready, running, unacked, or due.

        An ack that landed while the empty take was in flight may have put a job back in
        ready (a retry without delay, a release): then take once more before deciding.
        """
        if self._settled_batches != settled_before:
            return False
        if self.running or not self.acks.idle:
            self._activity.clear()
            await self._activity.wait()
            return False
        try:
            promoted = await scripts.promote(self.redis, self.keys, limit=1000)
        except RedisError:
            return False
        return promoted.count == 0
