"""Time-driven work of a queue inside a worker.

- Promoter: sleeps until the next delayed job is due, or until an earlier job is
  scheduled, then promotes due jobs with one script call (in a worker, the same call
  takes the ones it has room for: ``QueueConsumer.promote_due``).
- PeriodicScheduler: enqueues the ticks of the queue's periodic specs (cron / interval),
  each once, however many workers race for it.

Times come from Redis (the scripts read TIME), so clock skew between hosts cannot start
a job early or strand it: the promoter only converts "due in N ms by the Redis clock"
into a local timer, which is precise to a millisecond or so, unlike a blocking command's
timeout (Redis checks those at its ``hz`` rate, ~100 ms by default).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from . import scripts
from ._aio import wait_event
from .errors import EnqueueError
from .job import Payload
from .queue import load_specs, sync_declared

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from redis.asyncio import Redis

    from .keys import QueueKeys
    from .periodic import Periodic

logger = logging.getLogger(__name__)

PROMOTE_LIMIT = 250  # per call: ~1.5 ms inside Redis at ~6 µs per job
MAX_SLEEP = 30.0  # re-read the schedule at least this often, whatever happens
RETRY_PAUSE = 0.5


class Promoter:
    """Promotes the due jobs of one queue, waking exactly when the next one is due."""

    def __init__(
        self,
        redis: Redis,
        keys: QueueKeys,
        *,
        wake_key: str,
        idle_wait: float,
        stopping: asyncio.Event,
        promote: Callable[[int], Awaitable[scripts.Promoted]] | None = None,
    ) -> None:
        self._redis, self._keys, self._wake_key = redis, keys, wake_key
        self._promote = promote or self._promote_only
        self._idle_wait = idle_wait
        self._stopping = stopping
        self._earlier = asyncio.Event()  # set when someone scheduled an earlier job
        self._listeners: list[Callable[[], None]] = []

    def on_wake(self, listener: Callable[[], None]) -> None:
        """Also call ``listener`` when the queue's schedule-wake list gets a token."""
        self._listeners.append(listener)

    async def promote_loop(self) -> None:
        while not self._stopping.is_set():
            self._earlier.clear()
            try:
                result = await self._promote(PROMOTE_LIMIT)
            except RedisError as exc:
                logger.warning("promoting due jobs of %s failed: %r", self._keys.name, exc)
                await self._sleep(RETRY_PAUSE)
                continue
            if result.count >= PROMOTE_LIMIT:
                continue  # more are due right now
            until_next = result.seconds_until_next()
            await self._sleep(MAX_SLEEP if until_next is None else min(MAX_SLEEP, until_next))

    async def _promote_only(self, limit: int) -> scripts.Promoted:
        return await scripts.promote(self._redis, self._keys, limit=limit)

    async def listen_loop(self) -> None:
        """Wait on the queue's schedule-wake list; a token means an earlier job arrived."""
        watched = [self._keys.schedule_wake, self._wake_key]
        while not self._stopping.is_set():
            try:
                popped = await self._redis.blpop(watched, timeout=self._idle_wait)
            except RedisError as exc:
                logger.warning("waiting on the schedule of %s failed: %r", self._keys.name, exc)
                await wait_event(self._stopping, RETRY_PAUSE)
                continue
            if popped is not None:
                self._earlier.set()
                for listener in self._listeners:
                    listener()

    def interrupt(self) -> None:
        self._earlier.set()
        for listener in self._listeners:
            listener()

    async def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            await wait_event(self._earlier, seconds)


class PeriodicScheduler:
    """Enqueues due ticks of one queue's periodic specs, then sleeps until the next tick.

    Specs live in Redis (declared ones are synced from code at start), so specs added or
    removed at run time are seen at the next wake-up; adding one wakes a scheduler at once.
    """

    def __init__(
        self,
        redis: Redis,
        keys: QueueKeys,
        *,
        declared: Sequence[Periodic],
        max_payload_bytes: int,
        stopping: asyncio.Event,
    ) -> None:
        self._redis, self._keys = redis, keys
        self._declared = declared
        self._max_payload_bytes = max_payload_bytes
        self._stopping = stopping
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        synced = False
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                if not synced:
                    await sync_declared(self._redis, self._keys, self._declared)
                    synced = True
                pause = await self._tick()
            except RedisError as exc:
                logger.warning("periodic jobs of %s: %r", self._keys.name, exc)
                pause = RETRY_PAUSE
            await wait_event(self._wake, pause)

    async def _tick(self) -> float:
        """Enqueue what is due; return the seconds until the next tick (capped)."""
        specs = await load_specs(self._redis, self._keys)
        now_ms = await _redis_now_ms(self._redis)
        for spec in specs:
            tick = spec.tick_to_enqueue(now_ms)
            if tick is not None:
                await self._enqueue(spec, tick)
        next_ms = min((spec.next_tick(now_ms) for spec in specs), default=None)
        return MAX_SLEEP if next_ms is None else min(MAX_SLEEP, (next_ms - now_ms) / 1000)

    async def _enqueue(self, spec: Periodic, tick_ms: int) -> None:
        try:
            payload = Payload(spec.task, list(spec.args), spec.kwargs).encode(
                self._max_payload_bytes
            )
        except EnqueueError as exc:
            logger.error("periodic %s: cannot enqueue: %s", spec.name, exc)
            return
        result = await scripts.enqueue(
            self._redis, self._keys, job_id=spec.job_id(tick_ms), payload=payload,
            priority=spec.priority, max_attempts=0, delay_ms=0, due_ms=0,
            tick=(spec.name, tick_ms),
        )  # fmt: skip
        if result.created:
            logger.info("periodic %s: enqueued tick %d", spec.name, tick_ms)


async def _redis_now_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000
