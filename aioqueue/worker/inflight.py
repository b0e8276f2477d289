"""The jobs a worker holds, from take to settlement: one owner for each job's whole life.

``InFlight`` is the only writer of a held job's state (``running.RunningJob``). A taken
job waits for a slot (``slots``), runs in an asyncio task of its own (``runner.run_job``,
a function from the job to its Settlement, reports what it learns here), and is settled
exactly once, here: its Settlement goes straight to its queue's ack batcher. Whatever cuts
a run short reports its reason here (``Deadlines`` calls ``time_out``; the abort listener
and lease renewal call ``abort``; the worker's stop calls ``cancel_all``; the watchdog
finds overdue handlers): each cancels the job's task (again, if it was already) and records
its reason, and the strongest reason recorded decides how the run is settled (``running``).

A handler still running a second after the watchdog's cancellation is abandoned: the job is settled
by its reason without it, and its slot is freed. A plain ``def`` handler runs in a thread, which
nothing can stop (``threads``): its job keeps its slot and its lease until the thread returns, and
is settled then, by what the thread did (past its timeout: a HandlerTimeout). At shutdown such a
job is neither released nor abandoned: it stays leased to this process, renewed, until its thread
returns (then acked), or until the process exits (its lease then expires and it goes back to its
queue): never run twice at once. A job that waits for a slot and never starts is handed back: to
ready (release, attempt not counted) or, on an abort, cancelled.
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
    from ..core.settings import WorkerSettings
    from .acks import Batcher
    from .runner import RunEnv

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 0.5  # seconds between checks for overdue handlers and stale waiting jobs
OVERDUE_GRACE = 1.0  # after a deadline, before the next step against a handler that won't stop
ENDED = {"retry": "failed (retried)", "bury": "dead", "fail": "failed", "abort": "aborted",
         "expire": "expired", "release": "put back"}  # fmt: skip


class InFlight(Component):
    """The running (and waiting) jobs of one worker, and the ones it had to abandon: the
    one writer of each job's state (``RunningJob``)."""

    def __init__(self, env: RunEnv, *, concurrency: int, log_jobs: bool = False) -> None:
        super().__init__()
        self.slots: Slots[RunningJob] = Slots(concurrency, self._start)
        self.running: dict[asyncio.Task[None], RunningJob] = {}
        self.outcomes: Counter[str] = Counter()  # settlements by outcome, for logs and tests
        self._env = env  # what jobs run with
        # A line per finished job: at INFO if asked, else at DEBUG if that is on at start
        # (off, it costs a truth test per job).
        debug = logger.isEnabledFor(logging.DEBUG)
        self._job_log = logging.INFO if log_jobs else logging.DEBUG if debug else 0
        self._timed = bool(env.watchers.ended or self._job_log)  # jobs' start times wanted
        self._deadlines: Deadlines[RunningJob] = Deadlines(self.time_out)
        self._abandoned: set[asyncio.Task[None]] = set()
        self._hooks: set[asyncio.Task[None]] = set()  # hooks run outside a job's own task
        self.outliving: asyncio.Task[None] | None = None  # _hold_leases, after shutdown
        self._cut_short = asyncio.Event()  # set by cancel_all: the grace is over

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
        if self._timed:
            job.started_at = time.monotonic()
        job.handle = task = loop.create_task(self._run(job))
        self.running[task] = job

    async def _run(self, job: RunningJob) -> None:
        job.begun = True  # from here a cancel runs its code
        try:
            try:
                if job.interrupt is not None:  # (recorded before it began)
                    raise asyncio.CancelledError
                settlement = await run_job(job, self._env, self)
            except asyncio.CancelledError:
                if job.settled:  # abandoned: settled, hooks and all, when it was
                    return
                if self._in_thread(job):  # the process is exiting: its lease will expire
                    return
                settlement = interrupted_settlement(job)
                await interrupted_hooks(job, settlement)
            except Exception:  # a bug in aioqueue itself: keep the job, keep the worker
                logger.exception(
                    "job %s: internal error; releasing it", job.taken.job_id, extra=job.fields()
                )
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
        if self._job_log:
            self._log_ended(job, settlement)
        if job.observed_as is not None and self._env.watchers.ended:
            ran = time.monotonic() - job.started_at
            notify(self._env.watchers.ended, job.event(), settlement.outcome, ran)
        if started:
            self.slots.end()
        job.acks.settle(settlement)

    def _log_ended(self, job: RunningJob, settlement: Settlement) -> None:
        ran = time.monotonic() - job.started_at if job.started_at else 0.0
        outcome = settlement.outcome
        fields = {"outcome": outcome, "attempt": job.taken.attempts, "seconds": round(ran, 6)}
        logger.log(
            self._job_log, "job %s (%s) %s in %.3fs", job.taken.job_id, job.task_name,
            ENDED.get(outcome, outcome), ran, extra=job.fields() | fields,
        )  # fmt: skip

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
            why = (
                "it swallowed the cancellation or blocked the event loop"
                if task.is_async
                else "a plain def runs in a thread, which cannot be stopped"
            )
            raise HandlerTimeout(
                f"{task.name} ran {elapsed:.3f}s, over its {timeout}s timeout ({why})"
            )
        return result

    def _in_thread(self, job: RunningJob) -> bool:
        """Its handler runs in a thread now (which nothing can stop)."""
        return self._env.threads.busy(job)

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
        """Record ``reason`` (unless a stronger one is) and cancel the job's task, once it
        began (before, a cancel would skip its code: it settles by the reason as it begins).
        A job in its thread is not cancelled: the reason settles it when it returns."""
        if job.settled:
            return
        if job.interrupt is None or reason > job.interrupt:
            job.interrupt = reason
        if job.begun and job.handle is not None and not self._in_thread(job):
            job.handle.cancel()

    def time_out(self, job: RunningJob) -> None:
        """Its deadline passed (reported by ``Deadlines``)."""
        if self._in_thread(job):
            logger.warning(
                "job %s (%s) passed its %ss timeout in a thread, which cannot be stopped: it "
                "keeps its slot and lease until the thread returns, then fails as timed out",
                job.taken.job_id, job.task_name, job.timeout, extra=job.fields(),
            )  # fmt: skip
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
                how = " (in a thread, which cannot be stopped)" if self._in_thread(job) else ""
                fields = job.fields()
                logger.info("job %s: aborting on request%s", job.taken.job_id, how, extra=fields)
                self.interrupt(job, Interrupt.ABORT)

    def stop_taking(self) -> None:
        """Shutdown: jobs waiting for a slot stay waiting (``finish`` hands them back);
        wakes whoever waits for room in the slots."""
        self.slots.stop_starting()

    def cancel_all(self) -> None:
        """Shutdown past its grace (or a second signal): cancel every running job."""
        self._cut_short.set()
        for job in list(self.running.values()):
            self.interrupt(job, Interrupt.SHUTDOWN)

    async def finish(self, settings: WorkerSettings, *, force: bool) -> None:
        """Shutdown: jobs that never started go back to ready; running ones get the grace,
        then are cancelled (back to ready); a handler that ignores even that is settled
        without it and left behind. A job whose handler runs in a thread is left running,
        its lease renewed until the thread returns or the process exits (see the module
        docstring)."""
        grace = settings.grace
        for job in self.slots.take_waiting():
            self._hand_back(job)
        if self.running and not force:
            await self._grace(grace)
        if self.running:
            await self._cancel_the_rest(max(1.0, grace))
        for job in self.slots.take_waiting():  # admitted meanwhile: a take's late reply
            self._hand_back(job)
        self._env.threads.let_go()  # from now on a cancellation ends their wait
        self._env.threads.close()
        if self.running:
            hold = self._hold_leases(settings.lease_ms)
            self.outliving = asyncio.get_running_loop().create_task(hold)
        for task in self._abandoned:
            task.cancel()
        if self._hooks:
            await asyncio.wait(set(self._hooks), timeout=max(1.0, grace))

    async def _cancel_the_rest(self, timeout: float) -> None:
        """Past the grace: cancel the running jobs (back to ready), wait ``timeout`` at most
        for them, then abandon those that ignored it; a job in its thread is left running
        (a cancellation does nothing to a thread: waiting for it would only delay the exit)."""
        stoppable = {task for task, job in self.running.items() if not self._in_thread(job)}
        if stoppable:
            logger.warning("cancelling %d job(s) still running, to put them back", len(stoppable))
        self.cancel_all()
        if stoppable:
            await asyncio.wait(stoppable, timeout=timeout)
        for task, job in list(self.running.items()):
            if not self._in_thread(job):
                self._abandon(task, job)
                continue
            logger.warning(
                "job %s (%s) still runs in a thread, which cannot be stopped: it stays "
                "leased to this process until the thread returns; if the process exits "
                "first, its lease expires and it goes back to its queue",
                job.taken.job_id, job.task_name, extra=job.fields(),
            )  # fmt: skip

    async def _grace(self, grace: float) -> None:
        """Give the running jobs ``grace`` seconds to end; ``cancel_all`` (a second signal)
        cuts it short. (No job starts meanwhile: the slots stopped starting them.)"""
        ended = asyncio.ensure_future(asyncio.wait(set(self.running)))
        cut = asyncio.ensure_future(self._cut_short.wait())
        try:
            await asyncio.wait({ended, cut}, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ended.cancel()
            cut.cancel()

    async def _hold_leases(self, lease_ms: int) -> None:
        """After shutdown: renew the leases of the jobs left running in threads until the
        threads return, then ack how the jobs ended. Cancelled if the process exits first."""
        batchers = {job.acks for job in self.running.values()}
        while self.running:  # at once first: a topic's leases were last renewed before the grace
            for acks in batchers:
                await acks.renew(lease_ms)
            await asyncio.wait(set(self.running), timeout=lease_ms / 3000)
        for acks in batchers:
            await acks.flush()

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
            if self._in_thread(job):  # settled when its thread returns (see time_out)
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
