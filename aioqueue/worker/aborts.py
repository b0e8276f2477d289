"""Abort requests for running jobs, heard on each queue's pub/sub channel.

``cancel`` on a running job marks its record and publishes its id; the worker running it
cancels the job's asyncio task as soon as the message arrives. A worker that misses the
message (it was reconnecting) sees the mark at its next lease renewal instead.

A subscribed connection only listens, so a dead one (a half-open cut: a NAT or firewall
forgot it, no FIN or RST ever comes) looks exactly like a quiet one. The listener PINGs
after a second of silence and subscribes again on a new connection when no reply comes
within SILENCE_LIMIT: aborts come back to pub/sub speed within seconds, not never.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from ..errors import describe
from .loops import RETRY_PAUSE, Component, wait_event

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence

    from redis.asyncio import Redis

    from ..store.keys import QueueKeys

logger = logging.getLogger(__name__)

PING_AFTER = 1.0  # seconds of silence before the listener PINGs its connection
SILENCE_LIMIT = 3.0  # seconds of silence (no message, no pong) before it reconnects


class ChannelSilent(ConnectionError):
    """The subscribed connection answers nothing, not even PING: reconnect."""


class AbortListener(Component):
    """Subscribes to the abort channels of a worker's queues and reports (queue, job id)
    for each message: a job id names a job within its queue only."""

    def __init__(
        self,
        redis: Redis,
        queues: Sequence[QueueKeys],
        on_abort: Callable[[str, bytes], None],
        *,
        worker_id: str,
        poll: float,
    ) -> None:
        super().__init__()
        self._redis, self._on_abort, self._poll = redis, on_abort, poll
        self._queue_of = {keys.abort_channel.encode(): keys.name for keys in queues}
        self._wake_channel = queues[0].abort_wake(worker_id)  # a message here ends a wait

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._run()]

    async def unblock(self) -> None:
        """End the wait for a message now (one on this listener's own wake channel)."""
        try:
            await self._redis.publish(self._wake_channel, b"stop")
        except RedisError as exc:  # it then returns at its poll timeout
            logger.warning("could not wake the abort listener: %s", describe(exc))

    async def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                await self._listen()
            except (RedisError, ChannelSilent) as exc:  # lease renewal covers the gap
                logger.warning("abort channel lost (%s); subscribing again", describe(exc))
                await wait_event(self.stopping, RETRY_PAUSE)

    async def _listen(self) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        loop = asyncio.get_running_loop()
        try:
            await pubsub.subscribe(*self._queue_of, self._wake_channel)
            heard = pinged = loop.time()
            while not self.stopping.is_set():
                message = await pubsub.get_message(timeout=min(self._poll, PING_AFTER))
                now = loop.time()
                if message is not None:
                    heard = now
                    self._heard(message)
                elif now - heard > SILENCE_LIMIT:
                    raise ChannelSilent(f"no reply to PING for {now - heard:.1f}s")
                elif now - max(heard, pinged) >= PING_AFTER:
                    await pubsub.ping()
                    pinged = now
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _heard(self, message: dict[str, Any]) -> None:
        queue = self._queue_of.get(message["channel"])
        if queue is not None and message["type"] == "message":
            self._on_abort(queue, bytes(message["data"]))
