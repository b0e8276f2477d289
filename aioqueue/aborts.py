"""Abort requests for running jobs, heard on each queue's pub/sub channel.

``cancel`` on a running job marks its record and publishes its id; the worker running it
cancels the job's asyncio task as soon as the message arrives. A worker that misses the
message (it was reconnecting) sees the mark at its next lease renewal instead.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from ._aio import wait_event

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from redis.asyncio import Redis

logger = logging.getLogger(__name__)

RETRY_PAUSE = 0.5


class AbortListener:
    """Subscribes to the abort channels of a worker's queues and reports job ids heard."""

    def __init__(
        self,
        redis: Redis,
        channels: list[str],
        on_abort: Callable[[bytes], None],
        *,
        wake_channel: str,
        poll: float,
        stopping: asyncio.Event,
    ) -> None:
        self._redis, self._channels, self._on_abort = redis, channels, on_abort
        self.wake_channel = wake_channel  # a message here just ends a wait (shutdown)
        self._poll = poll
        self._stopping = stopping

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._listen()
            except RedisError as exc:  # resubscribe; the lease renewal covers the gap
                logger.warning("abort channel lost: %r", exc)
                await wait_event(self._stopping, RETRY_PAUSE)

    async def _listen(self) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(*self._channels, self.wake_channel)
            wake = self.wake_channel.encode()
            while not self._stopping.is_set():
                message = await pubsub.get_message(timeout=self._poll)
                if message is not None and message.get("channel") != wake:
                    self._on_abort(bytes(message["data"]))
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
