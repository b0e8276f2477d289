"""Periodic jobs inside a worker: enqueue the ticks of one queue's periodic specs (cron or
interval), each once, however many workers race for it.

Specs live in Redis (``store.specs``; the declared ones are synced from code at start),
so specs added or removed at run time are seen at the next wake-up, and adding one wakes
the schedulers at once (through the queue's promoter, which hears the token). Ticks are
judged by the Redis clock.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ..core.errors import EnqueueError
from ..core.payload import Payload
from ..store import specs
from ..store.routing import server_time
from ..store.scripts import enqueues
from .loops import RETRY_PAUSE, Component, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from redis.asyncio import Redis

    from ..core.keys import QueueKeys
    from ..core.periodic import Periodic

logger = logging.getLogger(__name__)

MAX_SLEEP = 30.0  # re-read the specs at least this often, whatever happens


class PeriodicScheduler(Component):
    """Enqueues due ticks of one queue's periodic specs, then sleeps until the next tick."""

    def __init__(
        self,
        redis: Redis,
        keys: QueueKeys,
        *,
        declared: Sequence[Periodic],
        max_payload_bytes: int,
        span_ms: int = 0,
    ) -> None:
        super().__init__()
        self._span_ms = span_ms  # the idempotency window of jobs completed with no result
        self._redis, self._keys = redis, keys
        self._declared = declared
        self._max_payload_bytes = max_payload_bytes
        self._wake = asyncio.Event()
        self.name = f"the periodic scheduler of {keys.name}"
        self._outage = Outage(logger, f"periodic jobs of {keys.name}", self.stopping.is_set)

    def wake(self) -> None:
        """Look at the specs now (one was added, or an earlier job scheduled)."""
        self._wake.set()

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._run()]

    def stop(self) -> None:
        super().stop()
        self._wake.set()

    async def _run(self) -> None:
        synced = False
        while not self.stopping.is_set():
            self._wake.clear()
            try:
                if not synced:
                    await specs.sync_declared(self._redis, self._keys, self._declared)
                    synced = True
                pause = await self._tick()
                self._outage.ended()
            except RedisError as exc:
                self._outage.failed(exc)
                pause = RETRY_PAUSE
            await wait_event(self._wake, pause)

    async def _tick(self) -> float:
        """Enqueue what is due; return the seconds until the next tick (capped)."""
        due_specs = await specs.load(self._redis, self._keys)
        now_ms = await _redis_now_ms(self._redis, self._keys.base)
        for spec in due_specs:
            tick = spec.tick_to_enqueue(now_ms)
            if tick is not None:
                await self.enqueue_tick(spec, tick)
        next_ms = min((spec.next_tick(now_ms) for spec in due_specs), default=None)
        return MAX_SLEEP if next_ms is None else min(MAX_SLEEP, (next_ms - now_ms) / 1000)

    async def enqueue_tick(self, spec: Periodic, tick_ms: int) -> None:
        """Enqueue one tick of ``spec`` (once, however often it is asked: the job id and
        the spec's last tick are the tick's); the testing kit's ``advance`` calls it."""
        try:
            payload = Payload(spec.task, list(spec.args), spec.kwargs).encode(
                self._max_payload_bytes
            )
        except EnqueueError as exc:
            logger.error("periodic %s: cannot enqueue: %s", spec.name, exc)
            return
        result = await enqueues.enqueue(
            self._redis, self._keys, job_id=spec.job_id(tick_ms), payload=payload,
            priority=spec.priority, max_attempts=0, delay_ms=0, due_ms=0,
            tick=(spec.name, tick_ms), span_ms=self._span_ms,
        )  # fmt: skip
        if result.created:
            logger.info("periodic %s: enqueued tick %d", spec.name, tick_ms)


async def _redis_now_ms(redis: Redis, key: str) -> int:
    seconds, micros = await server_time(redis, key)  # (on a cluster: the queue's node)
    return seconds * 1000 + micros // 1000
