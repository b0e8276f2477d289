"""Abort requests for running jobs, heard on each queue's pub/sub channel.

``cancel`` on a running job marks its record and publishes its id; the worker running it
cancels the job's asyncio task as soon as the message arrives. A worker that misses the
message (it was reconnecting) sees the mark at its next lease renewal instead.

A dead subscribed connection (a half-open cut) is found by PING (``store/pubsub.py``) and
replaced: aborts come back to pub/sub speed within seconds, not never. On a Redis Cluster
the channels are sharded (``pubsub.PubSubConnection``): each is heard on the node of its queue.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisClusterException, RedisError

from ..store.pubsub import PubSubConnection, wake
from .loops import RETRY_PAUSE, Component, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Sequence

    from redis.asyncio import Redis

    from ..core.keys import QueueKeys

logger = logging.getLogger(__name__)


class AbortListener(Component):
    """Subscribes to the abort channels of a worker's queues and reports (queue, job id)
    for each message: a job id names a job within its queue only."""

    name = "the abort listener"

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
        # A message on one of these ends a wait (on a Redis Cluster each node's connection
        # hears those of its queues: ``pubsub.wake`` sends one to each).
        self._wake_channels = [keys.abort_wake(worker_id) for keys in queues]
        self.listening = asyncio.Event()  # subscribed once: a cancel published now is heard
        self._outage = Outage(logger, "listening for aborts", self.stopping.is_set)

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._run()]

    async def unblock(self) -> None:
        """End the wait for a message now: one on this listener's own wake channels (if
        it fails, the wait ends at its poll timeout)."""
        await wake(self._redis, self._wake_channels)

    async def _run(self) -> None:
        again = False  # (a round after a failure reads the slot map again: PubSubConnection)
        while not self.stopping.is_set():
            try:
                await self._listen(again)
            except (RedisError, RedisClusterException, ConnectionError) as exc:  # leases cover it
                self._outage.failed(exc)  # (and subscribes again)
                await wait_event(self.stopping, RETRY_PAUSE)
            again = True

    async def _listen(self, again: bool) -> None:
        subscriber = PubSubConnection(self._redis, again=again)
        try:
            wakes = [channel.encode() for channel in self._wake_channels]  # see unblock()
            await subscriber.subscribe([*self._queue_of, *wakes])
            self.listening.set()
            await subscriber.listen(self._heard, self.stopping.is_set, poll=self._poll)
        finally:
            await subscriber.aclose()

    def _heard(self, message: dict[str, Any]) -> None:
        self._outage.ended()  # (the server answers: a confirmation, a message or a PONG)
        queue = self._queue_of.get(message["channel"])
        if queue is not None and message["type"] == "message":
            self._on_abort(queue, bytes(message["data"]))
