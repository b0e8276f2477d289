"""The jobs a worker holds, from take to settlement: one owner for each job's whole life.

A taken job waits for a slot (``slots``), runs in an asyncio task of its own (the runner
decides what it runs and what the outcome means), and is settled exactly once: its
Settlement goes straight to its queue's ack batcher. Everything that can cut a run short
lives here. Each cancels the job's task (again, if it was already) and records its
reason; the strongest reason recorded decides how the interrupted run is settled:

  TIMEOUT   its deadline passed (``deadlines``): a failed attempt, retried by policy
  SHUTDOWN  the worker is stopping past its grace period: back to ready, attempt not counted
  OVERDUE   still running a second past its deadline (it swallowed the cancellation): the
            watchdog cancels it again; a HandlerTimeout failure
  ABORT     ``cancel()`` of a running job: it ends cancelled, not retried

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
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from ..core.errors import HandlerTimeout, LeaseExpired
from ..core.lifecycle import Settlement
from ..core.observers import JobEvent, notify
from ..core.payload import encode_error
from .deadlines import Deadlines
from .loops import Component, wait_event
from .runner import expired_hooks, failed, run_hooks, run_job
from .slots import Slots

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from ..core.lifecycle import Taken
    from ..core.middleware import CallNext, JobContext
    from ..core.tasks import Handler
    from .acks import Batcher
    from .runner import RunEnv

logger = logging.getLogger(__name__)

CHECK_INTERVAL = 0.5  # seconds between checks for overdue handlers and stale waiting jobs
OVERDUE_GRACE = 1.0  # after a deadline, before the next step against a handler that won't stop

_ABORTED = encode_error("JobCancelled", "aborted while running", "")


class Interrupt(IntEnum):
    """Why a running job's task was cancelled; a stronger reason replaces a weaker one."""

    TIMEOUT = 1
    SHUTDOWN = 2
    OVERDUE = 3
    ABORT = 4


@dataclass(slots=True, eq=False)
class RunningJob:
    """One job this worker holds, from take to settlement."""

    taken: Taken
    acks: Batcher  # where its Settlement goes
    deadlines: Deadlines
    handle: asyncio.Task[None] | None = None  # the asyncio task running it, once started
    task: Handler[..., Any] | None = None  # known once its payload is decoded
    context: JobContext | None = None  # likewise
    timeout: float | None = None
    deadline: float | None = None  # event-loop time; None unless its handler runs timed
    interrupt: Interrupt | None = None
    overdue_since: float | None = None  # when the watchdog cancelled it again
    settled: bool = False
    started_at: float = 0.0  # time.monotonic() when its task started (if observed)
    observed_as: str | None = None  # the task name observers were told it started as

    def event(self) -> JobEvent:
        """What observers see of it: built for each callback rather than kept, so that it
        dies young (an object kept for the whole run survives collections, and each one
        that survives makes the garbage collector's next passes longer)."""
        return JobEvent(self.taken, self.acks.name, self.observed_as or "?")

    @property
    def queue(self) -> str:
        return self.acks.name

    @property
    def task_name(self) -> str:
        return self.task.name if self.task is not None else "?"

    @property
    def interrupted(self) -> bool:
        """Cancelled from outside its handler: by this module, or by someone else."""
        return self.interrupt is not None or (
            self.handle is not None and self.handle.cancelling() > 0
        )

    def cancel(self, reason: Interrupt) -> None:
        """Cancel the job's task (again, if it was already) and record ``reason``, unless
        a stronger reason is recorded already."""
        if self.settled or self.handle is None:
            return
        if self.interrupt is None or reason > self.interrupt:
            self.interrupt = reason
        self.handle.cancel()

    def time_out(self) -> None:
        """Its deadline passed (called by ``Deadlines``)."""
        self.cancel(Interrupt.TIMEOUT)

    async def call_handler(self, call: CallNext) -> Any:
        """Await the handler under the job's timeout. Raises what the handler raised;
        TimeoutError or HandlerTimeout when it ran out of time (cancelled at its deadline,
        or it swallowed that cancellation, or it blocked the event loop past it); and
        CancelledError when the job is interrupted otherwise."""
        if self.timeout is None:
            return await call()
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.deadlines.watch(self, started + self.timeout)
        try:
            result = await call()
        except asyncio.CancelledError:
            if self._handler_ended():
                raise TimeoutError(f"{self.task_name} timed out after {self.timeout}s") from None
            raise
        except BaseException:
            self._handler_ended()
            raise
        elapsed = loop.time() - started
        if self._handler_ended() or elapsed > self.timeout:
            raise HandlerTimeout(
                f"{self.task_name} ran {elapsed:.3f}s, over its {self.timeout}s timeout "
                "(it swallowed the cancellation or blocked the event loop)"
            )
        return result

    def _handler_ended(self) -> bool:
        """The handler returned or raised: its deadline no longer applies. If the timeout
        had cancelled it, take that cancellation back; True when no other is pending."""
        self.deadlines.unwatch(self)
        if self.interrupt is not Interrupt.TIMEOUT or self.handle is None:
            return False
        self.interrupt = None
        return self.handle.uncancel() == 0

    def interrupted_settlement(self) -> Settlement:
        """How the job is settled when an interrupt ends (or abandons) it."""
        taken = self.taken
        if self.interrupt is Interrupt.ABORT:
            return Settlement(taken.id, taken.lease, "abort", _ABORTED)
        if self.interrupt is Interrupt.OVERDUE and self.task is not None:
            return failed(taken, self.task, self._overdue_error())
        return Settlement(taken.id, taken.lease, "release")

    async def interrupted_hooks(self, settlement: Settlement) -> None:
        """The hooks of a run an interrupt ended: a timed-out failure runs on_failure and
        on_retry or on_dead (abort and release are no attempt's outcome: none)."""
        if self.interrupt is Interrupt.OVERDUE and self.task and self.context:
            await run_hooks(self.task, self.context, settlement, self._overdue_error())

    def _overdue_error(self) -> HandlerTimeout:
        return HandlerTimeout(
            f"{self.task_name} ignored the cancellation at its {self.timeout}s timeout; "
            "abandoned (it may still be running in this process)"
        )


class InFlight(Component):
    """The running (and waiting) jobs of one worker, and the ones it had to abandon."""

    def __init__(self, env: RunEnv, *, concurrency: int) -> None:
        super().__init__()
        self.slots: Slots[RunningJob] = Slots(concurrency, self._start)
        self.running: dict[asyncio.Task[None], RunningJob] = {}
        self.outcomes: Counter[str] = Counter()  # settlements by outcome, for logs and tests
        self._deadlines = Deadlines()
        self.env = env  # what jobs run with (set again when the worker starts)
        self._abandoned: set[asyncio.Task[None]] = set()
        self._hooks: set[asyncio.Task[None]] = set()  # hooks run outside a job's own task

    def admit(self, taken: Taken, acks: Batcher, *, reserved: bool = True) -> None:
        """A take call leased ``taken`` (into room it reserved in the slots, unless not
        ``reserved``): it starts now if a slot is free, else it waits."""
        acks.hold(taken)
        job = RunningJob(taken, acks, self._deadlines)
        if reserved:
            self.slots.admit(job)
        else:
            self.slots.admit_unreserved(job)

    def refuse(self, taken: Taken, acks: Batcher, *, aborted: bool = False) -> None:
        """A leased job this worker will not start (an offer's, see consumer.py): back to
        the front of ready, attempt not counted; or, its cancellation asked before this
        worker held it (``aborted``), ended as cancelled."""
        acks.hold(taken)
        self._hand_back(RunningJob(taken, acks, self._deadlines), aborted=aborted)

    def _start(self, job: RunningJob) -> None:
        loop = asyncio.get_running_loop()
        if self.env.watchers.ended:  # (tuple tests: this runs for every job)
            job.started_at = time.monotonic()
        task = loop.create_task(self._run(job))
        job.handle = task
        self.running[task] = job

    async def _run(self, job: RunningJob) -> None:
        try:
            try:
                settlement = await run_job(job, self.env)
            except asyncio.CancelledError:
                if job.settled:  # abandoned: settled, hooks and all, when it was
                    return
                settlement = job.interrupted_settlement()
                await job.interrupted_hooks(settlement)
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
        if job.observed_as is not None and self.env.watchers.ended:
            ran = time.monotonic() - job.started_at
            notify(self.env.watchers.ended, job.event(), settlement.outcome, ran)
        if started:
            self.slots.end()
        job.acks.settle(settlement)

    def _hand_back(self, job: RunningJob, *, aborted: bool = False) -> None:
        """Settle a job that waited for a slot and never started: back to ready, attempt
        not counted (or cancelled, on an abort request)."""
        taken = job.taken
        if aborted:
            settlement = Settlement(taken.id, taken.lease, "abort", _ABORTED)
        else:
            settlement = Settlement(taken.id, taken.lease, "release")
        self._settle(job, settlement, started=False)

    def _abandon(self, task: asyncio.Task[None], job: RunningJob) -> None:
        """Settle a job whose handler will not stop; the handler is left to itself (its
        hooks run in a task of their own)."""
        del self.running[task]
        self._abandoned.add(task)
        settlement = job.interrupted_settlement()
        self._settle(job, settlement)
        self._spawn_hooks(job.interrupted_hooks(settlement))

    def lease_expired(self, queue: str, job: Taken) -> None:
        """A job of ``queue`` that this worker's lease reclaim buried: run its hooks, in a
        task of their own (a slow hook must not hold up the reclaim loop)."""
        error = LeaseExpired(f"lease expired {job.attempts} time(s): the worker died or stalled")
        self._spawn_hooks(expired_hooks(self.env, queue, job, error))

    def _spawn_hooks(self, hooks: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(hooks)
        self._hooks.add(task)
        task.add_done_callback(self._hooks.discard)

    # -- requests from outside: abort, shutdown --------------------------------------------

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
                job.cancel(Interrupt.ABORT)

    def stop_taking(self) -> None:
        """Shutdown: jobs waiting for a slot stay waiting (``finish`` hands them back);
        wakes whoever waits for room in the slots."""
        self.slots.stop_starting()

    def cancel_all(self) -> None:
        for job in list(self.running.values()):
            job.cancel(Interrupt.SHUTDOWN)

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
                job.cancel(Interrupt.OVERDUE)
            elif now >= job.overdue_since + OVERDUE_GRACE:
                logger.error(
                    "job %s (%s) ignored cancellation at its %ss timeout: settled as timed "
                    "out, handler abandoned", job.taken.job_id, job.task_name, job.timeout,
                )  # fmt: skip
                self._abandon(task, job)
