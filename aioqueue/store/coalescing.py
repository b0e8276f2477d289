"""Calls to one Redis key coalesced while the wire is busy: the machinery the enqueue
batcher (``batching``) and the posting batcher (``posting``) share.

A lone call goes at once, from its caller's own task (no extra task or future: the
subclass sends it while ``_busy``). A call arriving while one is in flight waits in a list,
behind those already waiting (a caller that calls again as soon as its call returns would
otherwise go alone every time, ahead of them), and a flusher sends what waits as soon as
the wire is free: a prefix of it per call (``_batch_size``), in arrival order. A caller
that gave up waiting (cancelled) before its flush has its entry left out.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from collections.abc import Sequence


class Waiting(Protocol):
    """An entry waiting for a flush: its caller's future."""

    @property
    def future(self) -> asyncio.Future[Any]: ...


E = TypeVar("E", bound=Waiting)
R = TypeVar("R")


class Coalescer(Generic[E]):
    """The waiting list and its flusher; a subclass sends a lone call itself (marking
    ``_busy`` around it, then ``_start_flusher``), and a flush's batch (``_send_batch``)."""

    def __init__(self) -> None:
        self._pending: list[E] = []
        self._busy = False  # a call (lone or flushed) is in flight
        self._flusher: asyncio.Task[None] | None = None

    @property
    def _alone(self) -> bool:
        """Nothing in flight, nothing waiting: a call may go at once, from its caller."""
        return not self._busy and not self._pending

    async def _wait_in_line(self, entry: E, future: asyncio.Future[R]) -> R:
        """Queue ``entry`` behind the others; its flush settles ``future``."""
        self._pending.append(entry)
        if not self._busy:
            self._start_flusher()
        return await future

    def _batch_size(self, pending: Sequence[E]) -> int:
        """How many of the first waiting entries one flush sends (at least one)."""
        raise NotImplementedError

    async def _send_batch(self, batch: list[E]) -> None:
        """Send one flush; settle each entry's future (with its result, or the error)."""
        raise NotImplementedError

    def _start_flusher(self) -> None:
        if self._pending and self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._pending and not self._busy:
                self._pending = [entry for entry in self._pending if not entry.future.done()]
                if not self._pending:
                    break
                size = self._batch_size(self._pending)
                batch = self._pending[:size]
                del self._pending[:size]
                self._busy = True
                try:
                    await self._send_batch(batch)
                finally:
                    self._busy = False
        finally:
            self._flusher = None
            if self._pending and not self._busy:
                self._start_flusher()
