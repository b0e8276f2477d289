"""Leases: renew the leases of running jobs, and reclaim jobs whose lease expired.

A lease is short (seconds) and renewed every third of its length in one script call per
queue, so a job may run for hours while a dead worker's jobs come back within a lease.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from . import scripts
from ._aio import wait_event

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Sequence

    from .consumer import QueueConsumer

logger = logging.getLogger(__name__)

MAX_EXTEND_BATCH = 1000
RECLAIM_LIMIT = 1000


class LeaseKeeper:
    """Renews this worker's leases and reclaims expired ones for all its queues."""

    def __init__(
        self,
        consumers: Sequence[QueueConsumer],
        *,
        lease_ms: int,
        reclaim_interval: float,
        default_max_attempts: int,
        result_ttl_ms: int,
        on_abort: Callable[[bytes], None],
        stopping: asyncio.Event,
    ) -> None:
        self._consumers = consumers
        self._lease_ms = lease_ms
        self._reclaim_interval = reclaim_interval
        self._default_max_attempts = default_max_attempts
        self._result_ttl_ms = result_ttl_ms
        self._on_abort = on_abort
        self._stopping = stopping

    async def renew_loop(self) -> None:
        """Extend every held lease each third of a lease, until the worker is done."""
        while not await wait_event(self._stopping, self._lease_ms / 3000):
            await self.renew_once()

    async def renew_once(self) -> None:
        for consumer in self._consumers:
            held = [(job.id, job.lease) for job in consumer.held.values()]
            for start in range(0, len(held), MAX_EXTEND_BATCH):
                batch = held[start : start + MAX_EXTEND_BATCH]
                try:
                    extended = await scripts.extend(
                        consumer.redis, consumer.keys, batch, lease_ms=self._lease_ms
                    )
                except RedisError as exc:
                    logger.warning("renewing leases on %s failed: %r", consumer.keys.name, exc)
                    continue
                for job_id in extended.aborted:
                    self._on_abort(job_id)
                for job_id in extended.lost:
                    logger.warning(
                        "job %s of %s: lease lost while running (stalled past its lease?)",
                        job_id.decode("utf-8", "backslashreplace"),
                        consumer.keys.name,
                    )

    async def reclaim_loop(self) -> None:
        """Return expired leases (from workers that died) to ready, every interval."""
        while not await wait_event(self._stopping, self._reclaim_interval):
            await self.reclaim_once()

    async def reclaim_once(self) -> int:
        total = 0
        for consumer in self._consumers:
            try:
                result = await scripts.reclaim(
                    consumer.redis,
                    consumer.keys,
                    limit=RECLAIM_LIMIT,
                    default_max_attempts=self._default_max_attempts,
                    result_ttl_ms=self._result_ttl_ms,
                )
            except RedisError as exc:
                logger.warning("reclaiming leases on %s failed: %r", consumer.keys.name, exc)
                continue
            if result.requeued or result.buried:
                logger.warning(
                    "queue %s: reclaimed %d job(s) with expired leases, buried %d",
                    consumer.keys.name,
                    result.requeued,
                    result.buried,
                )
            total += result.requeued + result.buried
        return total
