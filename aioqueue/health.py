"""Worker heartbeats: each worker process says, per queue, that it is alive and what it runs.

Every few seconds a worker refreshes ``<queue>:worker:<id>`` (expiring after three missed
beats) and lists its id in ``<queue>:workers``. ``Queue.workers()`` and ``aioqueue check``
(for container health probes) read them back.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import TYPE_CHECKING

import orjson
from redis.exceptions import RedisError

from ._aio import wait_event

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Sequence

    from redis.asyncio import Redis

    from .keys import QueueKeys

logger = logging.getLogger(__name__)

BEAT_INTERVAL = 5.0
BEAT_TTL_MS = int(BEAT_INTERVAL * 3 * 1000)


class Heartbeat:
    """Refreshes one worker's heartbeat in each of its queues."""

    def __init__(
        self,
        redis: Redis,
        queues: Sequence[QueueKeys],
        *,
        worker_id: str,
        concurrency: int,
        running: Callable[[], int],
        stopping: asyncio.Event,
    ) -> None:
        self._redis, self._queues, self._worker_id = redis, queues, worker_id
        self._stopping = stopping
        self._running = running
        self._static = {
            "id": worker_id, "host": socket.gethostname(), "pid": os.getpid(),
            "queues": [keys.name for keys in queues], "concurrency": concurrency,
            "started_at": time.time(),
        }  # fmt: skip

    async def run(self) -> None:
        while True:
            await self.beat()
            if await wait_event(self._stopping, BEAT_INTERVAL):
                break
        await self.clear()

    async def beat(self) -> None:
        info = orjson.dumps({**self._static, "running": self._running(), "beat_at": time.time()})
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for keys in self._queues:
                    pipe.set(keys.worker(self._worker_id), info, px=BEAT_TTL_MS)
                    pipe.sadd(keys.workers, self._worker_id)
                await pipe.execute()
        except RedisError as exc:
            logger.warning("worker %s: heartbeat failed: %r", self._worker_id, exc)

    async def clear(self) -> None:
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for keys in self._queues:
                    pipe.delete(keys.worker(self._worker_id))
                    pipe.srem(keys.workers, self._worker_id)
                await pipe.execute()
        except RedisError as exc:
            logger.warning("worker %s: clearing its heartbeat failed: %r", self._worker_id, exc)
