"""The jobs in flight inside a worker: one asyncio task each, from take to settlement.

JobTasks starts a task per taken job, turns how it ended into a Settlement (its result,
an abort on request, a timeout the watchdog enforced, or a release at shutdown), and hands
the Settlement to the job's queue consumer, which frees the slot and batches the ack.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING

from .job import encode_error
from .runner import RunEnv, RunningJob, run_job
from .scripts import Settlement

if TYPE_CHECKING:
    from .consumer import QueueConsumer
    from .scripts import Taken

logger = logging.getLogger(__name__)

_ABORTED = encode_error("JobCancelled", "aborted while running", "")


class JobTasks:
    """The running jobs of one worker, and the ones it had to abandon."""

    def __init__(self, env: RunEnv) -> None:
        self.env = env
        self.running: dict[asyncio.Task[None], RunningJob] = {}
        self.outcomes: Counter[str] = Counter()  # settlements by outcome, for logs and tests
        self._consumer_of: dict[RunningJob, QueueConsumer] = {}
        self._abandoned: set[asyncio.Task[None]] = set()

    def start(self, consumer: QueueConsumer, taken: Taken) -> None:
        job = RunningJob(taken, consumer.keys.name)
        task = asyncio.get_running_loop().create_task(self._execute(consumer, job))
        job.handle = task
        self.running[task] = job

    def hand_back(self, consumer: QueueConsumer, taken: Taken, *, aborted: bool = False) -> None:
        """Settle a job that waited for a slot and never started: back to ready, attempt
        not counted (or cancelled, on an abort request)."""
        if aborted:
            settlement = Settlement(taken.id, taken.lease, "abort", _ABORTED)
        else:
            settlement = Settlement(taken.id, taken.lease, "release")
        self.outcomes[settlement.outcome] += 1
        consumer.handed_back(settlement)

    def abort(self, job_id: bytes) -> None:
        """Cancel the running job with this id, if it runs here (an abort request)."""
        for task, job in self.running.items():
            if job.taken.id == job_id and not job.aborted:
                logger.info("job %s: aborting on request", job.taken.job_id)
                job.aborted = True
                task.cancel()

    def abandon(self, task: asyncio.Task[None], settlement: Settlement | None = None) -> None:
        """Settle a job whose handler will not stop; the handler is left to itself."""
        job = self.running.pop(task)
        job.abandoned = True
        self._abandoned.add(task)
        self._settle(self._consumer_of.pop(job), settlement or job.overdue_settlement())

    def cancel_all(self) -> None:
        for task in self.running:
            task.cancel()

    async def finish(self, *, grace: float, force: bool) -> None:
        """Shutdown: let jobs run ``grace`` seconds, cancel the rest (they go back to
        ready); a handler that ignores even that is released and left behind."""
        if self.running and not force:
            await asyncio.wait(set(self.running), timeout=grace)
        if self.running:
            logger.warning("cancelling %d job(s) still running; back to ready", len(self.running))
            self.cancel_all()
            await asyncio.wait(set(self.running), timeout=max(1.0, grace))
        for task, job in list(self.running.items()):
            self.abandon(task, Settlement(job.taken.id, job.taken.lease, "release"))
        for task in self._abandoned:
            task.cancel()

    async def _execute(self, consumer: QueueConsumer, job: RunningJob) -> None:
        taken = job.taken
        self._consumer_of[job] = consumer
        try:
            try:
                settlement = await run_job(job, self.env)
            except asyncio.CancelledError:
                if job.aborted:  # cancel() of a running job: it ends cancelled, not retried
                    settlement = Settlement(taken.id, taken.lease, "abort", _ABORTED)
                elif job.recancelled:  # the watchdog's second cancellation after the timeout
                    settlement = job.overdue_settlement()
                else:  # shutdown: back to ready, attempt not counted
                    settlement = Settlement(taken.id, taken.lease, "release")
            except Exception:  # a bug in aioqueue itself: keep the job, keep the worker
                logger.exception("job %s: internal error; releasing it", taken.job_id)
                settlement = Settlement(taken.id, taken.lease, "release")
            if not job.abandoned:
                self._settle(consumer, settlement)
        finally:  # forget it here: a done callback would cost a loop callback per job
            self._consumer_of.pop(job, None)
            if job.handle is not None:
                self.running.pop(job.handle, None)
                self._abandoned.discard(job.handle)

    def _settle(self, consumer: QueueConsumer, settlement: Settlement) -> None:
        self.outcomes[settlement.outcome] += 1
        consumer.finished(settlement)
