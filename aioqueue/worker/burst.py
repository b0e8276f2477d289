"""Burst mode: when a worker that drains its queues, then stops, has nothing left to wait for.

A burst worker's consumer that finds its queue dry asks ``Burst.busy`` before it ends: work
still to come may make jobs ready there (a job taken, running or unacked; one ready on
another of the worker's queues, a workflow's child whose parent may be here; an outcome
still to hand off). Once every consumer has ended, ``stop_when_drained`` stops the worker.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .consumer import any_ready, any_taking

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .acks import AckBatcher
    from .consumer import QueueConsumer
    from .delivery import HandOff
    from .inflight import InFlight
    from .subscriptions import TopicConsumer


class Burst:
    """What a burst worker holds and may still be given. ``acks`` and ``consumers`` are the
    worker's own lists, filled as its queues are added."""

    def __init__(
        self,
        inflight: InFlight,
        handoff: HandOff,
        acks: Sequence[AckBatcher],
        consumers: Sequence[QueueConsumer | TopicConsumer],
    ) -> None:
        self._inflight, self._handoff = inflight, handoff
        self._acks, self._consumers = acks, consumers

    async def busy(self) -> bool:
        """May work still to come make jobs ready on a queue found dry?"""
        landed = self._landed()
        if self._holding_work():
            return True
        if await self._handoff.pending() or await any_ready(self._consumers):
            return True
        # Jobs may have been taken, run and acked during those reads (handing outcomes off
        # after the look at the handoffs): then look again.
        return self._holding_work() or self._landed() != landed

    async def stop_when_drained(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` once every consumer has ended."""
        await asyncio.gather(*(consumer.join() for consumer in self._consumers))
        stop()

    def _holding_work(self) -> bool:
        acked = all(acks.idle for acks in self._acks)
        return bool(self._inflight.running) or not acked or any_taking(self._consumers)

    def _landed(self) -> int:
        return sum(acks.landed for acks in self._acks)
