"""Hand-offs: a workflow child's outcome travels to parents on another queue.

A script may touch one Cluster slot only, so the ack that settles a child cannot count it
in a parent on another queue: it leaves the outcome in the child's queue's handoff ZSET
(``lua/include/links.lua``). This component delivers those to the parents' queues
(``deliver.lua``), then removes them. At once when an ack says it handed one off, and
every few seconds for those left by a worker that died in between, or by a cancel or a
lease reclaim. Delivering twice is harmless: a parent counts each child index once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from ..core.keys import QueueKeys
from ..store import deadline, handoffs
from ..store.scripts import links
from .loops import CLIENT_FAILURES, STOP_WAIT, Component, wait_event
from .outages import Outage

if TYPE_CHECKING:
    from collections.abc import Coroutine, Sequence

    from redis.asyncio import Redis

    from ..core.lifecycle import HandedOff

logger = logging.getLogger(__name__)

SWEEP_INTERVAL = 2.0  # seconds between looks at the handoff ZSETs when nothing wakes it
BATCH = 200  # outcomes read per call


class HandOff(Component):
    """Delivers the handed-off outcomes of a worker's queues to their parents' queues."""

    name = "hand-offs"

    def __init__(
        self, redis: Redis, prefix: str, queues: Sequence[QueueKeys], *, result_ttl_ms: int
    ) -> None:
        super().__init__()
        self._redis, self._prefix, self._queues = redis, prefix, queues
        self._result_ttl_ms = result_ttl_ms
        self.wake = asyncio.Event()
        self._outages = {
            keys.name: Outage(logger, f"handing off outcomes of {keys.name}", self.stopping.is_set)
            for keys in queues
        }

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._run()]

    def stop(self) -> None:
        super().stop()
        self.wake.set()

    async def _run(self) -> None:
        while True:
            await wait_event(self.wake, SWEEP_INTERVAL)
            self.wake.clear()
            if self.stopping.is_set():
                with deadline.bound(STOP_WAIT):  # (what the last acks handed off)
                    await self.deliver_once()
                return
            await self.deliver_once()

    async def pending(self) -> bool:
        """Whether any outcome waits to be handed off from this worker's queues."""
        for keys in self._queues:
            if await handoffs.count(self._redis, keys):
                return True
        return False

    async def deliver_once(self) -> int:
        """Deliver what waits in every queue's handoff ZSET; how many outcomes."""
        total = 0
        for keys in self._queues:
            try:
                while outcomes := await handoffs.pending(self._redis, keys, BATCH):
                    await self._deliver(outcomes)
                    await handoffs.remove(self._redis, keys, outcomes)
                    total += len(outcomes)
                    if len(outcomes) < BATCH:
                        break
            except CLIENT_FAILURES as exc:
                self._outages[keys.name].failed(exc)
                continue
            self._outages[keys.name].ended()
        return total

    async def _deliver(self, outcomes: Sequence[HandedOff]) -> None:
        by_queue: dict[str, list[HandedOff]] = defaultdict(list)
        for outcome in outcomes:
            by_queue[outcome.parent_queue].append(outcome)
        for queue, batch in by_queue.items():
            keys = QueueKeys.for_queue(self._prefix, queue)
            await links.deliver(self._redis, keys, batch, result_ttl_ms=self._result_ttl_ms)
