"""Queue: one named queue. This module is its write path, the hot one: ``EnqueueCall``
and the enqueues; ``QueueAdmin`` (``client/admin.py``), its base class, holds the reads
and the admin calls, so that ``aioqueue.Queue`` is one class in two modules.

An enqueue is checked and encoded here (``enqueue.prepare``: bad input raises, nothing is
written), shown to the observers (only when there are some), then written: plain jobs
through the queue's ``EnqueueBatcher`` (``store.batching``: concurrent enqueues share one
script call per round trip), a debounced call by ``debounce.lua``, jobs of a group and of
workflows (``client/workflows.py``), and of tenants, by ``enqueue_linked.lua``. A Redis
failure raises an
aioqueue error that says whether the jobs may have landed (``_failure``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from ..core.errors import ConfigError, UnknownTask
from ..core.lifecycle import LinkedJob
from ..store import deadline
from ..store.batching import EnqueueBatcher
from ..store.connection import CALL_FAILURES, failure
from ..store.scripts import admin, links
from . import enqueue
from .admin import QueueAdmin
from .enqueue import NO_OPTIONS, JobOptions
from .job import Job

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping, Sequence
    from datetime import datetime, timedelta

    from ..core.handlers import Handler
    from ..core.lifecycle import Enqueued, NewJob
    from .host import QueueHost

logger = logging.getLogger(__name__)

BULK_ROUND = 50_000  # jobs an enqueue_many sends a round trip (each within enqueue_timeout)

P = ParamSpec("P")
R = TypeVar("R")


class EnqueueCall(Generic[R]):
    """An enqueue waiting to be awaited: ``await queue.enqueue(task, x).options(delay=5)``."""

    __slots__ = ("_args", "_kwargs", "_options", "_queue", "_task")

    def __init__(
        self,
        queue: Queue,
        task: Handler[..., R] | str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: JobOptions,
    ) -> None:
        self._queue, self._task, self._args, self._kwargs = queue, task, args, kwargs
        self._options = options

    def options(
        self,
        *,
        id: str | None = None,
        priority: int | str | None = None,
        delay: float | timedelta | None = None,
        at: datetime | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        replicas: int | None = None,
        expires: float | timedelta | None = None,
        debounce: float | timedelta | None = None,
        group: str | None = None,
        tenant: str | None = None,
    ) -> EnqueueCall[R]:
        """Set per-call options: job id (deduplication), priority, delay or time, timeout,
        how many replicas must have the job before the enqueue returns (WAIT), and
        ``expires``: a job not started within that long of being due (its enqueue, or its
        delay or time) ends ``expired`` without running; ``debounce``: calls with the same
        ``id`` collapse into one run, that long after the last of them, with its arguments
        (the returned job's id is the run's, ``debounce:<id>:<n>``); ``group``: jobs of
        one group run one at a time, in enqueue order (a job waits, ``waiting``, while an
        earlier one of its group is queued, scheduled or running; the next one goes once
        it has finished for good: complete, dead, failed, cancelled or expired; a retry
        keeps its place), different groups in parallel; ``tenant``: the job waits in its
        tenant's own queue, and within a priority the tenants with ready jobs take turns
        (``set_weights``, ``set_tenant_limits``), FIFO within each."""
        current = self._options
        options = JobOptions(
            id=current.id if id is None else id,
            priority=current.priority if priority is None else priority,
            delay=current.delay if delay is None else delay,
            at=current.at if at is None else at,
            timeout=current.timeout if timeout is None else timeout,
            max_attempts=current.max_attempts if max_attempts is None else max_attempts,
            replicas=current.replicas if replicas is None else replicas,
            expires=current.expires if expires is None else expires,
            debounce=current.debounce if debounce is None else debounce,
            group=current.group if group is None else group,
            tenant=current.tenant if tenant is None else tenant,
        )
        return EnqueueCall(self._queue, self._task, self._args, self._kwargs, options)

    def _prepare_for(self, queue: Queue, stack: contextlib.ExitStack | None) -> NewJob:
        if self._queue is not queue:
            raise ConfigError(
                f"enqueue_many on queue {queue.name!r} got a job for {self._queue.name!r}"
            )
        headers = None if stack is None else queue._observe(stack, self._task)
        return queue._prepare(self._task, self._args, self._kwargs, self._options, headers)

    def __await__(self) -> Generator[Any, None, Job[R]]:
        return self._queue._submit(self._task, self._args, self._kwargs, self._options).__await__()


class Queue(QueueAdmin):
    """One named queue: enqueue jobs; look them up, cancel them, pause the queue, limit
    it, manage its dead letters (``QueueAdmin``)."""

    def __init__(self, host: QueueHost, name: str) -> None:
        super().__init__(host, name)
        span_ms = host.settings.idempotency_ttl_ms
        self._batcher = EnqueueBatcher(
            host.internal_client, self.keys, span_ms=span_ms,
            replica_timeout=host.settings.replica_timeout,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    # -- enqueue -----------------------------------------------------------------------

    @overload
    def enqueue(self, task: Handler[P, R], *args: P.args, **kwargs: P.kwargs) -> EnqueueCall[R]: ...
    @overload
    def enqueue(self, task: str, *args: Any, **kwargs: Any) -> EnqueueCall[Any]: ...

    def enqueue(self, task: Handler[..., Any] | str, *args: Any, **kwargs: Any) -> EnqueueCall[Any]:
        """Queue one job: a Task, or a task name (for producers that lack the code).

        Await the call for a Job handle. When it returns, the job is in Redis.
        """
        return EnqueueCall(self, task, args, kwargs, NO_OPTIONS)

    async def enqueue_many(self, calls: Iterable[EnqueueCall[Any]]) -> list[Job[Any]]:
        """Bulk enqueue: ``await queue.enqueue_many(task.enqueue(x) for x in xs)``.

        Every call is validated and encoded first (an error writes nothing); then they go
        to Redis in order, in script calls of up to 1,000 jobs, BULK_ROUND jobs a round
        trip, each round within ``enqueue_timeout``. If one fails, the rounds before it
        are in Redis and the error names the jobs from its round on.
        """
        calls = list(calls)
        if any(call._options.debounce is not None for call in calls):
            raise ConfigError("enqueue_many takes no debounced calls: await each one")
        with contextlib.ExitStack() as stack:
            observed = stack if self._host.registry.observers else None
            new = [call._prepare_for(self, observed) for call in calls]
            results: list[Enqueued] = []  # (the rounds confirmed so far)
            try:
                if any(call._options.linked for call in calls):
                    results = await self._write_linked(
                        [_linked(job, call._options) for job, call in zip(new, calls, strict=True)]
                    )
                else:
                    for start in range(0, len(new), BULK_ROUND):
                        async with self._deadline():
                            results += await self._batcher.submit_many(
                                new[start : start + BULK_ROUND]
                            )
            except CALL_FAILURES as exc:
                raise self._failure(exc, [job.id for job in new[len(results) :]]) from exc
        if self._host.eager_mode.on:
            await self._host.eager_mode.run()
        return [Job(self, job.id, created=r.created) for job, r in zip(new, results, strict=True)]

    def job(self, job_id: str) -> Job[Any]:
        """A handle on an existing job of this queue."""
        return Job(self, job_id)

    async def _submit(
        self,
        task: Handler[..., R] | str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: JobOptions,
    ) -> Job[R]:
        write: Callable[[NewJob], Coroutine[Any, Any, Job[Any]]]
        if options.debounce is not None:
            write = functools.partial(self._debounce, options)
        elif options.linked:
            write = functools.partial(self._write_grouped, options)
        else:
            write = self._write
        if self._host.registry.observers:
            with contextlib.ExitStack() as stack:
                headers = self._observe(stack, task)
                job = await write(self._prepare(task, args, kwargs, options, headers))
        else:
            job = await write(self._prepare(task, args, kwargs, options))
        if self._host.eager_mode.on:  # (tests: run it before returning, ``App.eager``)
            await self._host.eager_mode.run()
        return job

    async def _debounce(self, options: JobOptions, new: NewJob) -> Job[Any]:
        """A debounced call: the pending run of its key takes these arguments and starts
        a window from now, or a new run is scheduled (``debounce.lua``). Safe to repeat."""
        key, window_ms = options.id or "", options.debounce_ms() or 0
        try:
            async with self._deadline():
                redis = await self._host.internal_client()
                job_id, state = await admin.debounce(
                    redis, self.keys, key, new, window_ms=window_ms
                )
        except CALL_FAILURES as exc:
            raise self._failure(exc, [key]) from exc
        return Job(self, job_id, created=state == "scheduled")

    async def _write_grouped(self, options: JobOptions, new: NewJob) -> Job[Any]:
        try:
            [result] = await self._write_linked([_linked(new, options)])
        except CALL_FAILURES as exc:
            raise self._failure(exc, [new.id]) from exc
        return Job(self, new.id, created=result.created)

    async def _write_linked(
        self, jobs: Sequence[LinkedJob], seal: Sequence[str] = ()
    ) -> list[Enqueued]:
        """Write jobs of groups and workflows (``enqueue_linked.lua``); safe to repeat."""
        settings = self._host.settings
        async with self._deadline():
            return await links.enqueue_linked(
                await self._host.internal_client(), self.keys, jobs, seal=seal,
                span_ms=settings.idempotency_ttl_ms, result_ttl_ms=settings.result_ttl_ms,
            )  # fmt: skip

    async def _write(self, new: NewJob) -> Job[Any]:
        timeout = self._host.settings.enqueue_timeout
        try:  # (armed by the batcher: see store.batching)
            with deadline.bound(timeout, "enqueue_timeout", patient=True):
                result = await self._batcher.submit(new)
        except CALL_FAILURES as exc:
            raise self._failure(exc, [new.id]) from exc
        return Job(self, new.id, created=result.created)

    def _observe(
        self, stack: contextlib.ExitStack, task: Handler[..., Any] | str
    ) -> dict[str, str]:
        """Tell the observers of an enqueue; the headers they add go with the job, and
        the contexts they return stay open until the write is done."""
        headers: dict[str, str] = {}
        name = task if isinstance(task, str) else task.name
        for observer in self._host.registry.observers:
            try:
                context = observer.enqueuing(self.name, name, headers)
                if context is not None:
                    stack.enter_context(context)
            except Exception:
                logger.exception("observer %r failed in enqueuing", observer)
        return headers

    def _deadline(self) -> deadline.Scope:
        """An enqueue's one deadline, retries and waits (a failover, a slot move) included."""
        return deadline.within(self._host.settings.enqueue_timeout, "enqueue_timeout", patient=True)

    def _failure(self, exc: Exception, job_ids: list[str]) -> Exception:
        """What an enqueue that Redis failed raises: an aioqueue error saying why and
        whether the jobs may have landed (or the Redis error itself: a bug)."""
        return failure(exc, self._host.redis_url or "", job_ids) or exc

    def _prepare(
        self,
        task: Handler[..., Any] | str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: JobOptions,
        headers: Mapping[str, str] | None = None,
        inputs: str | None = None,
    ) -> NewJob:
        if isinstance(task, str) and (wrong := self._host.registry.unknown_task(task, self.name)):
            raise UnknownTask(task, wrong)  # (a typo: the workers would bury the job)
        return enqueue.prepare(
            task, args, kwargs, options,
            find_task=self._host.registry.find_task, headers=headers, inputs=inputs,
            max_payload_bytes=self._host.settings.max_payload_bytes,
            replicas=self._host.settings.replicas,
        )  # fmt: skip


def _linked(job: NewJob, options: JobOptions) -> LinkedJob:
    """A job of a group or of a tenant, for enqueue_linked.lua."""
    return LinkedJob(job, options.group or "", tenant=options.tenant or "")
