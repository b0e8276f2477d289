"""A job the worker holds, as a record: what its owner knows of it (``RunningJob``), why
its run was cut short (``Interrupt``), and how a run cut short is settled.

The record is written by one owner, ``inflight.InFlight``; everything here only reads it.
When several reasons cut a run short, the strongest recorded one decides its settlement:

  TIMEOUT   its deadline passed (``deadlines``): a failed attempt, retried by policy (the
            runner settles it: its handler's cancellation is taken back, a TimeoutError)
  SHUTDOWN  the worker is stopping past its grace period: back to ready, attempt not counted
  OVERDUE   still running a second past its deadline (it swallowed the cancellation): the
            watchdog cancels it again; a HandlerTimeout failure
  ABORT     ``cancel()`` of a running job: it ends cancelled, not retried
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from ..core.errors import HandlerTimeout
from ..core.lifecycle import Settlement
from ..core.observers import JobEvent
from ..core.payload import encode_error
from .runner import failed, job_fields, run_hooks

if TYPE_CHECKING:
    import asyncio

    from ..core.handlers import Handler
    from ..core.lifecycle import Taken
    from ..core.middleware import JobContext
    from .acks import Batcher

ABORTED = encode_error("JobCancelled", "aborted while running", "")


class Interrupt(IntEnum):
    """Why a running job's task was cancelled; a stronger reason replaces a weaker one."""

    TIMEOUT = 1
    SHUTDOWN = 2
    OVERDUE = 3
    ABORT = 4


@dataclass(slots=True, eq=False)
class RunningJob:
    """One job this worker holds, from take to settlement: a record that only ``InFlight``
    writes (the runner reads it through ``runner.Run``)."""

    taken: Taken
    acks: Batcher  # where its Settlement goes
    handle: asyncio.Task[None] | None = None  # the asyncio task running it, once started
    begun: bool = False  # its task runs its code (a cancel before would skip it all)
    task: Handler[..., Any] | None = None  # known once its handler is called
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

    def fields(self) -> dict[str, object]:
        """What a log line about it carries as fields (``extra=``; JSON logs show them)."""
        return job_fields(self.taken, self.task_name, self.queue)

    @property
    def task_name(self) -> str:
        if self.task is not None:
            return self.task.name
        return self.observed_as or "?"

    @property
    def interrupted(self) -> bool:
        """Cancelled from outside its handler: by its owner, or by someone else."""
        return self.interrupt is not None or (
            self.handle is not None and self.handle.cancelling() > 0
        )


def interrupted_settlement(job: RunningJob) -> Settlement:
    """How a job is settled when an interrupt ends (or abandons) its run."""
    taken = job.taken
    if job.interrupt is Interrupt.ABORT:
        return Settlement(taken.id, taken.lease, "abort", ABORTED)
    if job.interrupt is Interrupt.OVERDUE and job.task is not None:
        return failed(taken, job.task, _overdue_error(job), job.queue)
    return Settlement(taken.id, taken.lease, "release")


async def interrupted_hooks(job: RunningJob, settlement: Settlement) -> None:
    """The hooks of a run an interrupt ended: a timed-out failure runs on_failure and
    on_retry or on_dead (abort and release are no attempt's outcome: none)."""
    if job.interrupt is Interrupt.OVERDUE and job.task and job.context:
        await run_hooks(job.task, job.context, settlement, _overdue_error(job))


def _overdue_error(job: RunningJob) -> HandlerTimeout:
    return HandlerTimeout(
        f"{job.task_name} ignored the cancellation at its {job.timeout}s timeout; "
        "abandoned (it may still be running in this process)"
    )
