"""The jobs a worker holds, from take to settlement: one owner for each job's whole life.

``InFlight`` is the only writer of a held job's state (``running.RunningJob``). A taken
job waits for a slot (``slots``), runs in an asyncio task of its own (``runner.run_job``,
a function from the job to its Settlement, reports what it learns here), and is settled
exactly once, here: its Settlement goes straight to its queue's ack batcher. Whatever cuts
a run short reports its reason here (``Deadlines`` calls ``time_out``; the abort listener
and lease renewal call ``abort``; the worker's stop calls ``cancel_all``; the watchdog
finds overdue handlers): each cancels the job's task (again, if it was already) and records
its reason, and the strongest reason recorded decides how the run is settled (``running``).

A handler still running a second after the watchdog's cancellation is abandoned: the job
is settled by its reason without it, and its slot is freed. A job that waits for a slot
and never starts is handed back: to ready (release, attempt not counted) or, on an abort,
cancelled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..core.errors import HandlerTimeout, LeaseExpired
from ..core.lifecycle import Settlement
from ..core.observers import notify
from .deadlines import Deadlines
from .loops import Component, wait_event
from .runner import expired_hooks, run_job
from .running import ABORTED, Interrupt, RunningJob, interrupted_hooks, interrupted_settlement
from .slots import Slots

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from ..core.handlers import Handler
    from ..core.lifecycle import Taken
    from ..core.middleware import CallNext, JobContext
    from .acks import Batcher
    from .runner import RunEnv

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 0.5  # seconds between checks for overdue handlers and stale waiting jobs
OVERDUE_GRACE = 1.0  # after a deadline, before the next step against a handler that won't stop


class InFlight(Component):
    """The running (and waiting) jobs of one worker, and the ones it had to abandon: the
    one writer of each job's state (``RunningJob``)."""

    def __init__(self, env: RunEnv, *, concurrency: int) -> None:
        super().__init__()
        self.slots: Slots[RunningJob] = Slots(concurrency, self._start)
        self.running: dict[asyncio.Task[None], RunningJob] = {}
        self.outcomes: Counter[str] = Counter()  # settlements by outcome, for logs and tests
        self._env = env  # what jobs run with
        self._deadlines: Deadlines[RunningJob] = Deadlines(self.time_out)
        self._abandoned: set[asyncio.Task[None]] = set()
        self._hooks: set[asyncio.Task[None]] = set()  # hooks run outside a job's own task

    def admit(self, taken: Taken, acks: Batcher, *, reserved: bool = True) -> None:
        """A take call leased ``taken`` (into room it reserved in the slots, unless not
        ``reserved``): it starts now if a slot is free, else it waits."""
        acks.hold(taken)
        job = RunningJob(taken, acks)
        if reserved:
            self.slots.admit(job)
        else:
            self.slots.admit_unreserved(job)

    def refuse(self, taken: Taken, acks: Batcher, *, aborted: bool = False) -> None:
        """A leased job this worker will not start (an offer's, see idle.py): back to
        the front of ready, attempt not counted; or, its cancellation asked before this
        worker held it (``aborted``), ended as cancelled."""
        acks.hold(taken)
        self._hand_back(RunningJob(taken, acks), aborted=aborted)

    def reject(self, taken: Taken, acks: Batcher, error: bytes) -> None:
        """A leased entry that is no job at all (a topic entry aioqueue did not write):
        dead-lettered with ``error`` without running; not one of the ``outcomes``, which
        count the jobs this worker held."""
        acks.hold(taken)
        acks.settle(Settlement(taken.id, taken.lease, "bury", error))

    def _start(self, job: RunningJob) -> None:
        loop = asyncio.get_running_loop()
        if self._env.watchers.ended:  # (tuple tests: this runs for every job)
            job.started_at = time.monotonic()
        task = loop.create_task(self._run(job))
        job.handle = task
        self.running[task] = job

    async def _run(self, job: RunningJob) -> None:
        try:
            try:
                settlement = await run_job(job, self._env, self)
            except asyncio.CancelledError:
                if job.settled:  # abandoned: settled, hooks and all, when it was
                    return
                settlement = interrupted_settlement(job)
                await interrupted_hooks(job, settlement)
            except Exception:  # a bug in aioqueue itself: keep the job, keep the worker
                logger.exception("job %s: internal error; releasing it", job.taken.job_id)
                settlement = Settlement(job.taken.id, job.taken.lease, "release")
            self._settle(job, settlement)
        finally:  # forget it here: a done callback would cost a loop callback per job
            if job.handle is not None:
                self.running.pop(job.handle, None)
                self._abandoned.discard(job.handle)

    def _settle(self, job: RunningJob, settlement: Settlement, *, started: bool = True) -> None:
        """Settle a job once: free its slot (if it had one), send its ack."""
        if job.settled:
            return  # abandoned, and its handler ended after all
        job.settled = True
        self.outcomes[settlement.outcome] += 1
        if job.observed_as is not None and self._env.watchers.ended:
            ran = time.monotonic() - job.started_at
            notify(self._env.watchers.ended, job.event(), settlement.outcome, ran)
        if started:
            self.slots.end()
        job.acks.settle(settlement)

    def _hand_back(self, job: RunningJob, *, aborted: bool = False) -> None:
        """Settle a job that waited for a slot and never started: back to ready, attempt
        not counted (or cancelled, on an abort request)."""
        taken = job.taken
        if aborted:
            settlement = Settlement(taken.id, taken.lease, "abort", ABORTED)
        else:
            settlement = Settlement(taken.id, taken.lease, "release")
        self._settle(job, settlement, started=False)

    def _abandon(self, task: asyncio.Task[None], job: RunningJob) -> None:
        """Settle a job whose handler will not stop; the handler is left to itself (its
        hooks run in a task of their own)."""
        del self.running[task]
        self._abandoned.add(task)
        settlement = interrupted_settlement(job)
        self._settle(job, settlement)
        self._spawn_hooks(interrupted_hooks(job, settlement))

    def lease_expired(self, queue: str, job: Taken) -> None:
        """A job of ``queue`` that this worker's lease reclaim buried: run its hooks, in a
        task of their own (a slow hook must not hold up the reclaim loop)."""
        error = LeaseExpired(f"lease expired {job.attempts} time(s): the worker died or stalled")
        self._spawn_hooks(expired_hooks(self._env, queue, job, error))

    def _spawn_hooks(self, hooks: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(hooks)
        self._hooks.add(task)
        task.add_done_callback(self._hooks.discard)

    # -- what the runner reports (runner.Owner) --------------------------------------------

    def observe(self, job: RunningJob, task: str) -> None:
        """The job starts as ``task``: tell the observers that watch starts."""
        job.observed_as = task
        if self._env.watchers.started:
            notify(self._env.watchers.started, job.event())

    async def call_handler(
        self,
        job: RunningJob,
        call: CallNext,
        task: Handler[..., Any],
        timeout: float | None,
        context: JobContext,
    ) -> Any:
        """Await the handler under the job's timeout (see ``runner.Owner``): TimeoutError
        when cancelled at its deadline, HandlerTimeout when it swallowed that cancellation
        or blocked the event loop past it."""
        job.task, job.timeout, job.context = task, timeout, context
        if timeout is None:
            return await call()
        loop = asyncio.get_running_loop()
        started = loop.time()
        job.deadline = started + timeout
        self._deadlines.watch(job, job.deadline)
        try:
            result = await call()
        except asyncio.CancelledError:
            if self._handler_ended(job):
                raise TimeoutError(f"{task.name} timed out after {timeout}s") from None
            raise
        except BaseException:
            self._handler_ended(job)
            raise
        elapsed = loop.time() - started
        if self._handler_ended(job) or elapsed > timeout:
            raise HandlerTimeout(
                f"{task.name} ran {elapsed:.3f}s, over its {timeout}s timeout "
                "(it swallowed the cancellation or blocked the event loop)"
            )
        return result

    def _handler_ended(self, job: RunningJob) -> bool:
        """The handler returned or raised: its deadline no longer applies. If the timeout
        had cancelled it, take that cancellation back; True when no other is pending."""
        if job.deadline is not None:
            job.deadline = None
            self._deadlines.unwatch(job)
        if job.interrupt is not Interrupt.TIMEOUT or job.handle is None:
            return False
        job.interrupt = None
        return job.handle.uncancel() == 0

    # -- reasons to cut a run short: timeout, abort, shutdown, overdue ----------------------

    def interrupt(self, job: RunningJob, reason: Interrupt) -> None:
        """Cancel the job's task (again, if it was already) and record ``reason``, unless
        a stronger reason is recorded already."""
        if job.settled or job.handle is None:
            return
        if job.interrupt is None or reason > job.interrupt:
            job.interrupt = reason
        job.handle.cancel()

    def time_out(self, job: RunningJob) -> None:
        """Its deadline passed (reported by ``Deadlines``)."""
        self.interrupt(job, Interrupt.TIMEOUT)

    def abort(self, queue: str, job_id: bytes) -> None:
        """An abort request for job ``job_id`` of ``queue``: waiting for a slot, it ends at
        once; running, it is cancelled. (An id names a job within its queue only.)"""
        waiting = self.slots.take_waiting(lambda job: job.taken.id == job_id and job.queue == queue)
        for job in waiting:
            logger.info("job %s: cancelled on request before it started", job.taken.job_id)
            self._hand_back(job, aborted=True)
        if waiting:
            return
        for job in list(self.running.values()):
            if (
                job.taken.id == job_id
                and job.queue == queue
                and job.interrupt is not Interrupt.ABORT
            ):
                logger.info("job %s: aborting on request", job.taken.job_id)
                self.interrupt(job, Interrupt.ABORT)

    def stop_taking(self) -> None:
        """Shutdown: jobs waiting for a slot stay waiting (``finish`` hands them back);
        wakes whoever waits for room in the slots."""
        self.slots.stop_starting()

    def cancel_all(self) -> None:
        for job in list(self.running.values()):
            self.interrupt(job, Interrupt.SHUTDOWN)

    async def finish(self, *, grace: float, force: bool) -> None:
        """Shutdown: jobs that never started go back to ready; running ones get ``grace``
        seconds, then are cancelled (back to ready); a handler that ignores even that is
        settled without it and left behind."""
        for job in self.slots.take_waiting():
            self._hand_back(job)
        if self.running and not force:
            await asyncio.wait(set(self.running), timeout=grace)
        if self.running:
            logger.warning("cancelling %d job(s) still running; back to ready", len(self.running))
            self.cancel_all()
            await asyncio.wait(set(self.running), timeout=max(1.0, grace))
        for task, job in list(self.running.items()):
            self._abandon(task, job)
        for task in self._abandoned:
            task.cancel()
        if self._hooks:
            await asyncio.wait(set(self._hooks), timeout=max(1.0, grace))

    # -- the watch loop: handlers past their deadline, jobs waiting too long ---------------

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        return [self._watch()]

    async def _watch(self) -> None:
        while not await wait_event(self.stopping, CHECK_INTERVAL):
            self.check_overdue()
            for job in self.slots.take_stale():  # back to ready, for other workers
                self._hand_back(job)

    def check_overdue(self) -> None:
        """Cancel again a handler still running past its deadline (it swallowed the
        timeout's cancellation); abandon it if even that does not stop it."""
        now = asyncio.get_running_loop().time()
        for task, job in list(self.running.items()):
            if job.deadline is None or now < job.deadline + OVERDUE_GRACE:
                continue
            if job.overdue_since is None:
                job.overdue_since = now
                self.interrupt(job, Interrupt.OVERDUE)
            elif now >= job.overdue_since + OVERDUE_GRACE:
                logger.error(
                    "job %s (%s) ignored cancellation at its %ss timeout: settled as timed "
                    "out, handler abandoned", job.taken.job_id, job.task_name, job.timeout,
                )  # fmt: skip
                self._abandon(task, job)
