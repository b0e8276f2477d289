"""Running an app's jobs to the end in one call, in this process: for tests
(``aioqueue.testing``: ``drain``, ``run_jobs``, ``advance``) and eager mode (``App.eager``).

A run is burst workers (``Worker(burst=True)``): each takes what is ready, runs it, and
everything that enqueues (a workflow's later steps and callbacks included), and stops when
nothing is ready, running, or about to be handed over. What each job's attempts ended as is
recorded through an observer, so a run answers "how did each job end" (``Ran``).

A job due later (a retry's backoff, ``Retry(delay=)``) is the one thing a burst worker
would wait for. When the backend's clock can move (``skip_to``: an in-process server's,
``store/memory.py``), the run does not wait: it moves the clock to when the next such job
is due and runs another burst, as a worker would see time pass; otherwise the burst
worker waits for the retries of the jobs it ran (``wait_retries``), in real time.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..core.keys import QueueKeys
from ..core.observers import Observer
from ..store import memory, reads
from .worker import Worker

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from ..core.observers import JobEvent
    from .worker import WorkerHost


class HasId(Protocol):
    """A job handle (``Job``), or anything with the job's id."""

    @property
    def id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How a job ended in a run: ``outcome`` is its last attempt's (complete, retry,
    bury: dead, fail: failed for good without a dead letter, abort: cancelled, expire,
    release: handed back), ``attempts`` how many it had in the run."""

    id: str
    queue: str
    task: str
    outcome: str
    attempts: int

    @property
    def ok(self) -> bool:
        """Whether it completed."""
        return self.outcome == "complete"


class Ran(Mapping["str | HasId", JobOutcome]):
    """The jobs a run ran, by id (or by ``Job``), in the order they first ran."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobOutcome] = {}

    def __getitem__(self, job: str | HasId) -> JobOutcome:
        return self._jobs[job if isinstance(job, str) else job.id]

    def __contains__(self, job: object) -> bool:
        return (job if isinstance(job, str) else getattr(job, "id", None)) in self._jobs

    def __iter__(self) -> Iterator[str | HasId]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __repr__(self) -> str:
        return f"Ran({dict(self.outcomes)})"

    @property
    def outcomes(self) -> Counter[str]:
        """How many jobs ended each way (each job counted once: by its last attempt)."""
        return Counter(job.outcome for job in self._jobs.values())

    def of(self, task: str | Any) -> list[JobOutcome]:
        """The jobs of one task (its name, or the task itself), in the order they ran."""
        name = task if isinstance(task, str) else task.name
        return [job for job in self._jobs.values() if job.task == name]

    def record(self, event: JobEvent, outcome: str) -> None:
        """An attempt ended (the observer's callback)."""
        before = self._jobs.get(event.id)
        attempts = 1 if before is None else before.attempts + 1
        self._jobs[event.id] = JobOutcome(event.id, event.queue, event.task, outcome, attempts)

    def retrying(self) -> dict[str, list[str]]:
        """The jobs whose last attempt asked for another, by queue."""
        found: dict[str, list[str]] = {}
        for job in self._jobs.values():
            if job.outcome == "retry":
                found.setdefault(job.queue, []).append(job.id)
        return found


class _Recorder(Observer):
    def __init__(self, ran: Ran) -> None:
        self.ran = ran

    def job_ended(self, job: JobEvent, outcome: str, seconds: float) -> None:
        self.ran.record(job, outcome)


async def run_burst(host: WorkerHost, ran: Ran, **options: Any) -> None:
    """One burst worker (``Worker`` options) until its queues are idle, recorded in ``ran``."""
    recorder = _Recorder(ran)
    registry = host.registry
    registry.observers = (*registry.observers, recorder)
    try:
        await Worker(host, burst=True, **options).run_until_idle()
    finally:
        registry.observers = tuple(each for each in registry.observers if each is not recorder)


async def run_to_end(
    host: WorkerHost,
    *,
    queues: Sequence[str] | None = None,
    skip_to: Callable[[int], Awaitable[None]] | None = None,
    every_scheduled: bool = False,
    ran: Ran | None = None,
    **options: Any,
) -> Ran:
    """Burst workers until nothing is left to run (see the module's docstring). With
    ``skip_to``, the retries of the jobs run (with ``every_scheduled``, every scheduled
    job) run without waiting: the clock moves to each one's due time."""
    ran = Ran() if ran is None else ran
    queues = list(queues or host.registry.queue_names())
    while True:
        await run_burst(host, ran, queues=queues, wait_retries=skip_to is None, **options)
        if skip_to is None:
            return ran
        due = await next_due(host, queues, None if every_scheduled else ran.retrying())
        if due is None:
            return ran
        await skip_to(due)


async def next_due(
    host: WorkerHost, queues: Sequence[str], only: Mapping[str, list[str]] | None
) -> int | None:
    """When the next scheduled job of ``queues`` is due (epoch ms, Redis clock), of those
    ``only`` names by queue if given; None if there is none."""
    redis = await host.internal_client()
    due: list[int] = []
    for name in queues:
        keys = QueueKeys.for_queue(host.settings.prefix, name)
        if only is None:
            head = await reads.scheduled(redis, keys, limit=1, offset=0)
            due += [int(job.due_ms) for job in head]
        elif only.get(name):
            found = await reads.due_times(redis, keys, (job.encode() for job in only[name]))
            due += found.values()
    return min(due, default=None)


async def run_eagerly(host: WorkerHost, url: str) -> Ran:
    """Eager mode's run: everything on the in-process server ``url``, scheduled jobs
    included, its clock moved to each one's due time."""
    skip_to = functools.partial(_move_memory_clock, url)
    return await run_to_end(host, skip_to=skip_to, every_scheduled=True)


async def _move_memory_clock(url: str, due_ms: int) -> None:
    memory.advance_clock_to(url, due_ms)
