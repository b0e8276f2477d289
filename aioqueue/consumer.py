"""Taking and settling the jobs of one queue inside a worker.

A QueueConsumer runs two loops over one queue:
- fetch: take up to the free slots (plus the lookahead, see ``slots``) in a few concurrent
  script calls; when nothing is ready, block in BLPOP on the queue's notify list (and this
  worker's wake list) until a job arrives.
- acks: settle finished jobs in batches, one script call for everything that finished
  while the previous call was in flight, so an idle worker acks at once and a busy one
  acks hundreds of jobs per round trip.
"""

from __future__ import annotations

import asyncio
import logging
import time
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
    from .slots import Slots

logger = logging.getLogger(__name__)

MAX_ACK_BATCH = 500  # bounds one ack script's run time inside Redis
MAX_TAKE = 1000  # jobs per take call, likewise
TAKES_IN_FLIGHT = 4  # take calls out at once: the next jobs come while the current run
MIN_TAKE_CHUNK = 16  # with a take out, wait for this much room: smaller calls cost more
RETRY_PAUSE = 0.5  # pause before retrying after a Redis error
GIVE_UP_AFTER = 30.0  # at shutdown, stop retrying acks after this long without Redis


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
        slots: Slots[tuple[QueueConsumer, Taken]],
        worker_id: str,
        stopping: asyncio.Event,
    ) -> None:
        self.redis, self.keys, self.settings = redis, keys, settings
        self._slots, self._worker_id = slots, worker_id
        self._stopping = stopping
        self.wake_key = keys.wake(worker_id)
        self._result_ttl_ms = result_ttl_ms
        self.acks = AckBatcher(redis, keys, result_ttl_ms=result_ttl_ms, on_settled=self._settled)
        self.held: dict[bytes, Taken] = {}  # leased to this worker until the ack lands
        self.running = 0  # taken and not yet settled: running, or waiting for a slot
        self._activity = asyncio.Event()
        self._take_calls = 0
        self._settled_batches = 0
        self._dry_since: int | None = None  # a take came back short (settled count at its send)
        self._failed = False  # a take failed: pause before the next
        self._takes_out = 0  # take calls in flight
        # One take at a time until one comes back full: a worker woken for one job sends
        # one call, not TAKES_IN_FLIGHT (the extra calls would only delay that job).
        self._probing = True
        self._plan = planner(settings.priority_mode, settings.priority_weights)

    def interrupt(self) -> None:
        """Wake the fetch loop wherever it waits in-process (stopping)."""
        self._activity.set()

    def finished(self, settlement: Settlement) -> None:
        """A job of this queue finished running: free its slot, queue its ack."""
        self.running -= 1
        self._slots.end()
        self.acks.add(settlement)

    def handed_back(self, settlement: Settlement) -> None:
        """A job that waited for a slot and never started is settled (released, aborted)."""
        self.running -= 1
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
        """Take jobs until stopping (or, in burst mode, until the queue is drained).

        Takes are pipelined: up to TAKES_IN_FLIGHT calls at once, each for a chunk of the
        room in the slots, so the next jobs are on their way while the current ones run
        (one call at a time leaves the worker idle during every script, and Redis idle
        while the worker runs). A take that comes back short means the queue ran dry:
        once the other takes are back, block until a job is announced (in burst mode,
        check whether everything is done).
        """
        woken = False
        takes: set[asyncio.Task[scripts.TakeResult | None]] = set()
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            if self._dry_since is not None or self._failed:
                if self._takes_out:  # let the other takes come back first
                    await self._slots.wait_change()
                    continue
                if self._failed:  # Redis error: pause, then try again
                    self._failed, self._dry_since = False, None
                    await wait_event(self._stopping, RETRY_PAUSE)
                    continue
                settled_before, self._dry_since = self._dry_since or 0, None
                if self.settings.burst:
                    if await self._drained(settled_before):
                        return
                    continue
                woken = await self._wait_for_work()
                self._probing = True
                continue
            size = await self._reserve_take()
            if size:
                self._takes_out += 1
                take = loop.create_task(self._take(size, woken))
                takes.add(take)  # a reference, so the task is not collected mid-flight
                take.add_done_callback(takes.discard)
                take.add_done_callback(_log_take_crash)
                woken = False
        if takes:
            await asyncio.wait(takes)

    async def _reserve_take(self) -> int:
        """Wait for room for the next take (a chunk's worth while other takes are out, any
        room when none is) and reserve it; 0 when the loop has something else to do."""
        slots = self._slots
        while not (self._stopping.is_set() or self._failed or self._dry_since is not None):
            chunk = min(MAX_TAKE, max(MIN_TAKE_CHUNK, slots.capacity // TAKES_IN_FLIGHT))
            out = self._takes_out
            limit = 1 if self._probing else TAKES_IN_FLIGHT
            if out < limit and slots.room >= (chunk if out else 1):
                return slots.reserve(chunk)
            await slots.wait_change()
        return 0

    async def promote_due(self, limit: int) -> scripts.Promoted:
        """Promote up to ``limit`` due jobs, and take what there is room for in the same
        call: the promoter's call when a delayed job falls due, so it is leased one round
        trip after it is due (not a promote, then a notify token, then a take)."""
        room = 0 if self._stopping.is_set() else self._slots.reserve(MAX_TAKE)
        if room:
            self._takes_out += 1
            result = await self._take(room, woken=False, promote=limit)
            if result is not None:
                return result.promoted
        return await scripts.promote(self.redis, self.keys, limit=limit)

    async def _take(self, limit: int, woken: bool, promote: int = 0) -> scripts.TakeResult | None:
        """One take call for ``limit`` reserved slots; admits the jobs it leases. None
        after an error (the fetch loop then pauses)."""
        self._take_calls += 1
        lease = f"{self._worker_id}:{self._take_calls}"
        settled_before = self._settled_batches
        started = time.perf_counter()
        try:
            result = await scripts.take(
                self.redis,
                self.keys,
                lease=lease,
                lease_ms=self.settings.lease_ms,
                limit=limit,
                result_ttl_ms=self._result_ttl_ms,
                plan=self._plan(limit),
                woken=woken,
                promote=promote,
            )
        except Exception as exc:  # RedisError, or a reply it could not parse
            logger.warning("taking jobs from %s failed: %r", self.keys.name, exc)
            self._failed = True
            self._takes_out -= 1
            self._slots.unreserve(limit)
            return None
        self._takes_out -= 1
        self._slots.size_lookahead(time.perf_counter() - started)
        if len(result.jobs) == limit:
            self._probing = False  # the queue has more: pipeline the takes
        elif self._dry_since is None or settled_before < self._dry_since:
            self._dry_since = settled_before
        for job in result.jobs:  # first: their tasks then run before the fetch loop's next call
            self.held[job.id] = job
            self.running += 1
            self._slots.admit((self, job))
        self._slots.unreserve(limit - len(result.jobs))  # also wakes the fetch loop
        return result

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


def _log_take_crash(take: asyncio.Task[scripts.TakeResult | None]) -> None:
    if not take.cancelled() and (exc := take.exception()) is not None:
        logger.error("a take task crashed: %r", exc, exc_info=exc)
