"""The watchdog: settles jobs whose handler will not stop at its timeout.

``asyncio.timeout`` cancels a handler once. A handler that swallows that cancellation and
keeps waiting would otherwise hold its slot and lease forever. Checking once a second
costs nothing per job (no extra task or timer), and a handler gets a second cancellation
and a grace period before its job is settled as timed out and the handler abandoned.
"""

from __future__ import annotations

import asyncio
import logging
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
