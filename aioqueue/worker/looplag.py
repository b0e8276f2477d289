"""Logs when the event loop is blocked, naming the job whose code blocked it."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any

from .loops import Component, wait_event

if TYPE_CHECKING:
    from collections.abc import Coroutine, Mapping

    from .running import RunningJob

logger = logging.getLogger(__name__)


class LoopLagMonitor(Component):
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
        super().__init__()
        self._running = running
        self._threshold, self._interval = threshold, interval
        self._stamp = time.monotonic()
        self._done = threading.Event()

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._run()]

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        watcher = threading.Thread(
            target=self._watch, args=(loop, threading.get_ident()), daemon=True,
            name="aioqueue-loop-lag",
        )  # fmt: skip
        watcher.start()
        try:
            while not await wait_event(self.stopping, self._interval):
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
                f"job {job.taken.job_id} ({job.task_name})" if job
                else f"task {task!r}", where,
            )  # fmt: skip
