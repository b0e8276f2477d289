"""The delayed-job promoter: sleeps until the next due time, or until an earlier job is
scheduled, then promotes due jobs with one script call.

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

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from .keys import QueueKeys

logger = logging.getLogger(__name__)

PROMOTE_LIMIT = 1000  # per call: keeps each call to a few ms inside Redis
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
    ) -> None:
        self._redis, self._keys, self._wake_key = redis, keys, wake_key
        self._idle_wait = idle_wait
        self._stopping = stopping
        self._earlier = asyncio.Event()  # set when someone scheduled an earlier job

    async def promote_loop(self) -> None:
        while not self._stopping.is_set():
            self._earlier.clear()
            try:
                result = await scripts.promote(self._redis, self._keys, limit=PROMOTE_LIMIT)
            except RedisError as exc:
                logger.warning("promoting due jobs of %s failed: %r", self._keys.name, exc)
                await self._sleep(RETRY_PAUSE)
                continue
            if result.count >= PROMOTE_LIMIT:
                continue  # more are due right now
            if result.next_due_ms is None:
                await self._sleep(MAX_SLEEP)
            else:
                await self._sleep(min(MAX_SLEEP, (result.next_due_ms - result.now_ms) / 1000))

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

    def interrupt(self) -> None:
        self._earlier.set()

    async def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            await wait_event(self._earlier, seconds)
