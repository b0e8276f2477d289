"""Watchdogs: one settles jobs whose handler will not stop at its timeout; the other
logs which job blocks the event loop.

``asyncio.timeout`` cancels a handler once. A handler that swallows that cancellation and
keeps waiting would otherwise hold its slot and lease forever. Checking once a second
costs nothing per job (no extra task or timer), and a handler gets a second cancellation
and a grace period before its job is settled as timed out and the handler abandoned.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING

from ._aio import wait_event

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .runner import RunningJob

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 0.5
OVERDUE_GRACE = 1.0  # after the second cancellation, before the job is settled without it


class Watchdog:
    """Re-cancels, then abandons, handlers running past their timeout."""

    def __init__(
        self,
        running: Mapping[asyncio.Task[None], RunningJob],
        abandon: Callable[[asyncio.Task[None]], None],
        stopping: asyncio.Event,
    ) -> None:
        self._running = running
        self._abandon = abandon
        self._stopping = stopping

    async def run(self) -> None:
        while not await wait_event(self._stopping, CHECK_INTERVAL):
            self.check()

    def check(self) -> None:
        now = asyncio.get_running_loop().time()
        for task, job in list(self._running.items()):
            if job.deadline is None or now < job.deadline + OVERDUE_GRACE:
                continue
            if not job.recancelled:
                job.recancelled = True
                job.deadline = now
                task.cancel()  # the timeout's own cancellation was swallowed: once more
                continue
            logger.error(
                "job %s (%s) ignored cancellation at its %ss timeout: settled as timed out, "
                "handler abandoned", job.taken.job_id, job.task.name if job.task else "?",
                job.timeout,
            )  # fmt: skip
            self._abandon(task)


class LoopLagMonitor:
    """Logs when the event loop is blocked, naming the job whose code blocked it.

    A coroutine stamps the time every ``interval``; a daemon thread notices when the stamp
    goes stale (the loop is stuck in somebody's synchronous code), reads which task the loop
    is running and where the main thread is, and logs it once per stall.
    """

    def __init__(
        self,
        running: Mapping[asyncio.Task[None], RunningJob],
        *,
        threshold: float = 1.0,
        interval: float = 0.1,
    ) -> None:
        self._running = running
        self._threshold, self._interval = threshold, interval
        self._stamp = time.monotonic()
        self._done = threading.Event()

    async def run(self, stopping: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        watcher = threading.Thread(
            target=self._watch, args=(loop, threading.get_ident()), daemon=True,
            name="aioqueue-loop-lag",
        )  # fmt: skip
        watcher.start()
        try:
            while not await wait_event(stopping, self._interval):
                self._stamp = time.monotonic()
        finally:
            self._done.set()

    def _watch(self, loop: asyncio.AbstractEventLoop, loop_thread: int) -> None:
        reported = 0.0
        while not self._done.wait(self._interval):
            stamp = self._stamp
            lag = time.monotonic() - stamp
            if lag < self._threshold or stamp == reported:
                continue
            reported = stamp
            task = asyncio.current_task(loop)
            job = self._running.get(task) if task is not None else None
            frame = sys._current_frames().get(loop_thread)
            where = "".join(traceback.format_stack(frame, limit=4)) if frame else "?"
            logger.warning(
                "event loop blocked for %.1fs so far by %s; it is at:\n%s", lag,
                f"job {job.taken.job_id} ({job.task.name if job.task else '?'})" if job
                else f"task {task!r}", where,
            )  # fmt: skip
