"""Worker heartbeats: each worker process says, per queue, that it is alive and what it runs.

Every few seconds a worker refreshes its heartbeat in each of its queues (``store.
heartbeats``: expiring after three missed beats); ``Queue.workers()`` and ``aioqueue
check`` (for container health probes) read them back.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

import orjson
from redis.exceptions import RedisError

from ..core.errors import describe
from ..store import deadline, heartbeats
from ..store.heartbeats import mixed_task_sets, mixed_windows
from ..store.server import warn_if_evicting
from .loops import STOP_WAIT, Component, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterable, Sequence, Sized

    from redis.asyncio import Redis

    from ..core.keys import QueueKeys

logger = logging.getLogger(__name__)

BEAT_INTERVAL = 5.0
BEAT_TTL_MS = int(BEAT_INTERVAL * 3 * 1000)


class Heartbeat(Component):
    """Refreshes one worker's heartbeat in each of its queues."""

    name = "the heartbeat"

    def __init__(
        self,
        redis: Redis,
        queues: Sequence[QueueKeys],
        *,
        worker_id: str,
        concurrency: int,
        running: Sized,
        tasks: Iterable[str] = (),
        idempotency_ms: int | None = None,
        quiet: Callable[[], bool] | None = None,
    ) -> None:
        """``quiet``: whether the worker is stopping (this component stops last, and a
        failure after the worker said "stopping" is logged at DEBUG only)."""
        super().__init__()
        self._redis, self._queues, self._worker_id = redis, queues, worker_id
        self._running = running  # the running jobs (only counted)
        self._static = {
            "id": worker_id, "host": socket.gethostname(), "pid": os.getpid(),
            "queues": [keys.name for keys in queues], "concurrency": concurrency,
            "started_at": time.time(), "tasks": sorted(tasks),
            "idempotency_ms": idempotency_ms,
        }  # fmt: skip
        self._mixed: dict[str, str | None] = {}  # per queue, the mix last warned about
        stopping = self.stopping.is_set if quiet is None else quiet
        self._beats = Outage(logger, f"worker {worker_id}: heartbeat", stopping)
        self._looks = Outage(logger, f"worker {worker_id}: looking at the server", stopping)

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._run()]

    async def _run(self) -> None:
        while True:
            await self.beat()
            await self.look_around()
            if await wait_event(self.stopping, BEAT_INTERVAL):
                break
        with deadline.bound(STOP_WAIT):
            await self.clear()

    async def look_around(self) -> None:
        """Warn (once per change) when the server may evict queue keys, or when the live
        workers of a queue serve different task sets."""
        try:
            await warn_if_evicting(self._redis)
            for keys in self._queues:
                beats = await heartbeats.live_workers(self._redis, keys)
                mixed = mixed_task_sets(beats) or mixed_windows(beats)
                if mixed is not None and mixed != self._mixed.get(keys.name):
                    logger.warning("queue %s: %s", keys.name, mixed)
                self._mixed[keys.name] = mixed
        except RedisError as exc:
            self._looks.failed(exc)
            return
        self._looks.ended()

    async def beat(self) -> None:
        info = orjson.dumps({**self._static, "running": len(self._running), "beat_at": time.time()})
        try:
            for keys in self._queues:
                await heartbeats.beat(self._redis, keys, self._worker_id, info, ttl_ms=BEAT_TTL_MS)
        except RedisError as exc:
            self._beats.failed(exc)
            return
        self._beats.ended()

    async def clear(self) -> None:
        try:
            for keys in self._queues:
                await heartbeats.clear(self._redis, keys, self._worker_id)
        except RedisError as exc:  # (it expires by itself)
            logger.debug("clearing the heartbeat failed: %s", describe(exc))
