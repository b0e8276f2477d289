"""Promoting the delayed jobs of one queue when they fall due.

A Promoter sleeps until the next delayed job is due, or until an earlier job is
scheduled, then promotes due jobs with one script call. In a worker the call is the
consumer's (``QueueConsumer.promote_due``), which takes in the same call what it has
room for, so a due job is leased one round trip after it is due.

Times come from Redis (the scripts read TIME), so clock skew between hosts cannot start a
job early or strand it: the promoter only converts "due in N ms by the Redis clock" into
a local timer, which is precise to a millisecond or so, unlike a blocking command's
timeout (Redis checks those at its ``hz`` rate, ~100 ms by default).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ..store.scripts import leasing
from .loops import CLIENT_FAILURES, RETRY_PAUSE, Component, ring, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    from redis.asyncio import Redis

    from ..core.keys import QueueKeys
    from ..core.lifecycle import Promoted

logger = logging.getLogger(__name__)

PROMOTE_LIMIT = 250  # per call: ~1.5 ms inside Redis at ~6 µs per job
MAX_SLEEP = 30.0  # re-read the schedule at least this often, whatever happens
LAST_STRETCH = 0.001  # the end of a wait is spent yielding to the loop, not in a timer: the
# loop's timers wake up to a millisecond late (epoll's timeout is in whole milliseconds)


class Promoter(Component):
    """Promotes the due jobs of one queue, waking exactly when the next one is due.

    Its listen loop waits on the queue's schedule-wake list: a token there means an
    earlier job was scheduled (or a periodic spec added), so it re-reads the schedule and
    tells ``on_wake`` (the queue's periodic scheduler, if any).
    """

    def __init__(
        self,
        redis: Redis,
        keys: QueueKeys,
        *,
        worker_id: str,
        idle_wait: float,
        promote: Callable[[int], Awaitable[Promoted]] | None = None,
        on_wake: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self._redis, self._keys = redis, keys
        self._wake_key = keys.wake(worker_id, "schedule")
        self._promote = promote or self._promote_only
        self._idle_wait = idle_wait
        self._earlier = asyncio.Event()  # set when someone scheduled an earlier job
        self._on_wake = on_wake  # told when the schedule-wake list gets a token
        self.name = f"the promoter of {keys.name}"
        stopping = self.stopping.is_set
        self._promotions = Outage(logger, f"promoting due jobs of {keys.name}", stopping)
        self._waits = Outage(logger, f"waiting on the schedule of {keys.name}", stopping)

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._promote_loop(), self._listen_loop()]

    def stop(self) -> None:
        super().stop()
        self._earlier.set()

    async def unblock(self) -> None:
        """End the listen loop's BLPOP now (a token on this promoter's own wake list)."""
        await ring(self._redis, self._wake_key)

    async def _promote_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set():
            self._earlier.clear()
            try:
                result = await self._promote(PROMOTE_LIMIT)
            except CLIENT_FAILURES as exc:
                self._promotions.failed(exc)
                await self._sleep(RETRY_PAUSE)
                continue
            self._promotions.ended()
            if result.count >= PROMOTE_LIMIT:
                continue  # more are due right now
            until_next = result.seconds_until_next()
            if until_next is None or until_next > MAX_SLEEP:
                await self._sleep(MAX_SLEEP)
            else:
                await self._sleep_until(loop.time() + until_next)

    async def _promote_only(self, limit: int) -> Promoted:
        return await leasing.promote(self._redis, self._keys, limit=limit)

    async def _listen_loop(self) -> None:
        """Wait on the queue's schedule-wake list; a token means an earlier job arrived."""
        watched = [self._keys.schedule_wake, self._wake_key]
        while not self.stopping.is_set():
            try:
                popped = await self._redis.blpop(watched, timeout=self._idle_wait)
            except CLIENT_FAILURES as exc:
                self._waits.failed(exc)
                await wait_event(self.stopping, RETRY_PAUSE)
                continue
            self._waits.ended()
            if popped is not None:
                self._earlier.set()
                if self._on_wake is not None:
                    self._on_wake()

    async def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            await wait_event(self._earlier, seconds)

    async def _sleep_until(self, deadline: float) -> None:
        """Sleep until ``deadline`` (loop time), the last LAST_STRETCH by yielding to the
        loop: a due job is promoted within a fraction of a millisecond, at the cost of up to
        a millisecond of a busy loop per wake (other tasks run meanwhile)."""
        loop = asyncio.get_running_loop()
        await self._sleep(deadline - loop.time() - LAST_STRETCH)
        while loop.time() < deadline and not self._earlier.is_set():  # noqa: ASYNC110 - a yield
            await asyncio.sleep(0)
