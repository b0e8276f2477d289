"""Dead-letter retention: keep each queue's dead set within ``dead_max_jobs`` and
``dead_ttl`` (App settings), trimming the oldest first, a bounded batch per call."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ..store import deadline
from ..store.scripts import admin
from .loops import STOP_WAIT, Component, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from redis.asyncio import Redis

    from ..core.keys import QueueKeys

logger = logging.getLogger(__name__)

TRIM_INTERVAL = 60.0
TRIM_LIMIT = 1000


class DeadLetterTrimmer(Component):
    """Trims the dead sets of a worker's queues every minute, and when it stops."""

    name = "dead-letter retention"

    def __init__(
        self, redis: Redis, queues: Sequence[QueueKeys], *, max_jobs: int, ttl_ms: int
    ) -> None:
        super().__init__()
        self._redis, self._queues = redis, queues
        self._max_jobs, self._ttl_ms = max_jobs, ttl_ms
        self._outages = {
            keys.name: Outage(logger, f"trimming the dead set of {keys.name}", self.stopping.is_set)
            for keys in queues
        }

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._run()]

    async def _run(self) -> None:
        if self._max_jobs <= 0 and self._ttl_ms <= 0:
            return
        while not await wait_event(self.stopping, TRIM_INTERVAL):
            await self.trim_once()
        with deadline.bound(STOP_WAIT):  # and once more on the way out
            await self.trim_once()

    async def trim_once(self) -> int:
        total = 0
        for keys in self._queues:
            try:
                trimmed = TRIM_LIMIT
                while trimmed == TRIM_LIMIT:  # a backlog is cleared in bounded steps
                    trimmed = await admin.trim_dead(
                        self._redis, keys, max_jobs=self._max_jobs, max_age_ms=self._ttl_ms,
                        limit=TRIM_LIMIT,
                    )  # fmt: skip
                    total += trimmed
            except RedisError as exc:
                self._outages[keys.name].failed(exc)
                continue
            self._outages[keys.name].ended()
        if total:
            logger.info("dead-letter retention deleted %d job(s)", total)
        return total
