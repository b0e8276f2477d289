"""Strict priority between a worker's queues (``queue_order="strict"``): in the order they
were listed, a queue takes only while every queue before it is dry (ran out of work, as
its consumer knows it) or stopping. Running jobs are never preempted; this orders the
takes. Each consumer owns its ``dry`` flag and calls ``changed()`` when it flips.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from .loops import wait_first


class Ordered(Protocol):
    """A consumer in the order, as the order reads it."""

    @property
    def dry(self) -> bool: ...

    @property
    def stopping(self) -> asyncio.Event: ...


class StrictOrder:
    """The queues of one worker, first to last; each consumer joins when it is made."""

    def __init__(self) -> None:
        self._queues: list[Ordered] = []
        self._changed = asyncio.Event()

    def append(self, consumer: Ordered) -> None:
        self._queues.append(consumer)

    def first(self) -> Ordered | None:
        """The queue that goes before every other."""
        return self._queues[0] if self._queues else None

    def ahead_busy(self, consumer: Ordered) -> bool:
        """Whether a queue before ``consumer`` may have work (neither dry nor stopping)."""
        for other in self._queues:
            if other is consumer:
                return False
            if not (other.dry or other.stopping.is_set()):
                return True
        return False

    def changed(self) -> None:
        """A queue went dry, or got work: whoever waits behind it looks again."""
        self._changed.set()

    async def wait(self, stopping: asyncio.Event) -> None:
        self._changed.clear()
        await wait_first(self._changed, stopping)
