"""QueueDepths: the queue depths a metrics scrape exports, read from Redis when scraped.

Depths are read at scrape time, one ``queue.counts()`` per queue, concurrently, on the
event loop the app's Redis client belongs to (reading on another loop would replace the
app's client). The scrape, in the server's thread, waits at most ``depth_timeout``; then
it exports no depths and counts an error. A read still under way is joined by the next
scrape, never repeated, so a hung Redis cannot pile reads up. There are no depths while
the app is not connected. A scrape on that loop's own thread (``generate_latest()`` called
from async code) cannot wait for the loop it blocks: it exports the depths of the last
``await metrics.refresh()``; call that just before.

``ops/metrics.py``'s ``Metrics`` is a ``QueueDepths``: what it collects includes these.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from ..core.errors import describe

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..app import App
    from ..core.records import QueueCounts

logger = logging.getLogger(__name__)


class QueueDepths:
    """Reads the counts of an app's queues (``queues``, default ``app.queue_names()``)
    for scrapes made on any thread; counts the reads that failed."""

    def __init__(
        self, app: App, queues: Sequence[str] | None, depth_timeout: float, tenants: int = 0
    ) -> None:
        self.depth_timeout = depth_timeout
        self.tenants = tenants  # the tenants with the most ready jobs to read, per queue
        self._app = app
        self._depth_queues = None if queues is None else tuple(queues)
        self._lock = threading.Lock()  # also the collector's: scrapes read the count
        self._scrape_errors = 0
        self._reading: asyncio.Task[dict[str, QueueCounts]] | None = None
        self._last_depths: dict[str, QueueCounts] | None = None  # of the last refresh()
        self._failing = False  # log a failing Redis once, not at every scrape

    async def refresh(self) -> bool:
        """Read the queue depths now, for scrapes made on this loop's thread (see the
        module's docstring). Returns whether Redis answered within ``depth_timeout``;
        a failure counts as a scrape error and is never raised."""
        try:
            self._last_depths = await self._shared_read()
        except Exception as exc:
            self._read_failed(exc)
            return False
        self._failing = False
        return True

    async def _shared_read(self) -> dict[str, QueueCounts]:
        """One read per queue; a read still under way is joined. The shield: a timeout
        never cancels a redis-py call (the read ends by the client's socket timeout)."""
        task = self._reading
        if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
            task = self._reading = asyncio.create_task(self._read_counts())
            task.add_done_callback(_retrieve)
        return await asyncio.wait_for(asyncio.shield(task), self.depth_timeout)

    async def _read_counts(self) -> dict[str, QueueCounts]:
        names = self._depth_queues or tuple(self._app.queue_names())
        counts = await asyncio.gather(
            *(self._app.queue(name).counts(top_tenants=self.tenants) for name in names)
        )
        return dict(zip(names, counts, strict=True))

    def _scrape_depths(self) -> dict[str, QueueCounts] | None:
        """The depths for this scrape, or None."""
        loop = self._app.loop  # the app's client is bound to it; None: not connected
        if loop is None or not loop.is_running():
            return None
        with contextlib.suppress(RuntimeError):  # RuntimeError: no loop on this thread
            if asyncio.get_running_loop() is loop:  # waiting would block the loop: deadlock
                return self._last_depths
        try:
            future = asyncio.run_coroutine_threadsafe(self._shared_read(), loop)
        except RuntimeError:  # the loop closed meanwhile
            return None
        try:
            depths = future.result(self.depth_timeout)
        except Exception as exc:  # TimeoutError (a hung Redis, a busy loop), a Redis error
            future.cancel()  # only this waiter: the shielded read goes on
            self._read_failed(exc)
            return None
        self._failing = False
        return depths

    def _read_failed(self, exc: Exception) -> None:
        self._last_depths = None  # stale depths would hide the outage
        with self._lock:
            self._scrape_errors += 1
        reason = describe(exc)
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {self.depth_timeout}s"
        log = logger.debug if self._failing else logger.warning
        self._failing = True
        log("metrics: cannot read the queue depths: %s", reason)


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a read's failure as seen: its waiters may all have timed out."""
    if not task.cancelled():
        task.exception()
