"""Leases: renew the leases of the jobs this worker holds, and reclaim jobs whose lease
expired (their worker died).

A lease is short (seconds) and renewed every third of its length in one script call per
queue, so a job may run for hours while a dead worker's jobs come back within a lease.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..store.scripts import leasing
from .loops import CLIENT_FAILURES, Component, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence

    from ..core.lifecycle import Taken
    from .acks import AckBatcher

logger = logging.getLogger(__name__)

RECLAIM_LIMIT = 1000


class LeaseKeeper(Component):
    """Renews this worker's leases and reclaims expired ones for all its queues."""

    name = "lease renewal"

    def __init__(
        self,
        queues: Sequence[AckBatcher],
        *,
        lease_ms: int,
        reclaim_interval: float,
        default_max_attempts: int,
        result_ttl_ms: int,
        on_abort: Callable[[str, bytes], None],
        on_expired: Callable[[str, Taken], None],
    ) -> None:
        super().__init__()
        self._queues = queues
        self._lease_ms = lease_ms
        self._reclaim_interval = reclaim_interval
        self._default_max_attempts = default_max_attempts
        self._result_ttl_ms = result_ttl_ms
        self._on_abort = on_abort
        self._on_expired = on_expired
        self._reclaims = {
            queue.keys.name: Outage(
                logger, f"reclaiming leases on {queue.keys.name}", self.stopping.is_set
            )
            for queue in queues
        }

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._renew_loop(), self._reclaim_loop()]

    async def _renew_loop(self) -> None:
        """Extend every held lease each third of a lease, until the worker is done."""
        while not await wait_event(self.stopping, self._lease_ms / 3000):
            await self.renew_once()

    async def renew_once(self) -> None:
        for queue in self._queues:
            for job_id in await queue.renew(self._lease_ms):
                self._on_abort(queue.keys.name, job_id)

    async def _reclaim_loop(self) -> None:
        """Return expired leases (from workers that died) to ready, every interval."""
        while not await wait_event(self.stopping, self._reclaim_interval):
            await self.reclaim_once()

    async def reclaim_once(self) -> int:
        total = 0
        for queue in self._queues:
            try:
                result = await leasing.reclaim(
                    queue.redis, queue.keys, limit=RECLAIM_LIMIT,
                    default_max_attempts=self._default_max_attempts,
                    result_ttl_ms=self._result_ttl_ms, history_ms=queue.history_ms,
                )  # fmt: skip
            except CLIENT_FAILURES as exc:
                self._reclaims[queue.keys.name].failed(exc)
                continue
            self._reclaims[queue.keys.name].ended()
            if result.requeued or result.buried:
                logger.warning(
                    "queue %s: reclaimed %d job(s) with expired leases, buried %d",
                    queue.keys.name, result.requeued, result.buried,
                )  # fmt: skip
            total += result.requeued + result.buried
            for job in result.dead:  # buried by this call alone: their hooks run here
                self._on_expired(queue.keys.name, job)
        return total
