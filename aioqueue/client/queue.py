"""Queue: the producer and admin API of one queue, a thin layer over the Redis layer.

Enqueues are checked and encoded here (``enqueue.prepare``) and coalesced per round trip
(``store.batching``); everything else is one call of a script (``store.scripts``) or a
typed read (``store.reads``, ``store.heartbeats``, ``store.specs``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

import orjson
from redis.exceptions import RedisError

from ..core.errors import ConfigError
from ..core.keys import QueueKeys
from ..core.lifecycle import LinkedJob
from ..core.limits import QueueLimits, make_limits
from ..store import heartbeats, reads, specs, stored_limits
from ..store.batching import EnqueueBatcher
from ..store.connection import failure
from ..store.scripts import admin, links
from . import enqueue
from .enqueue import NO_OPTIONS, JobOptions
from .job import Job

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime, timedelta

    from redis.asyncio import Redis

    from ..core.lifecycle import Enqueued, NewJob
    from ..core.periodic import Periodic
    from ..core.records import JobInfo, JobStatus, MinuteCounts, QueueCounts, ScheduledJob
    from ..core.registry import Registry
    from ..core.settings import AppSettings
    from ..core.tasks import Handler
    from ..store.reads import ListedState
    from ..store.settled import SettledListener

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class QueueHost(Protocol):
    """What a Queue needs from its App."""

    @property
    def settings(self) -> AppSettings: ...

    @property
    def redis_url(self) -> str | None: ...

    async def client(self) -> Redis: ...

    async def internal_client(self) -> Redis: ...

    def settled_listener(self) -> SettledListener: ...

    @property
    def registry(self) -> Registry: ...


def _clear_errors(
    method: Callable[Concatenate[Queue, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Queue, P], Coroutine[Any, Any, R]]:
    """A Redis failure of a queue's read or admin call raised as an aioqueue error that
    names the server and the cause (ServerUnavailable, AuthenticationFailed, ...)."""

    @functools.wraps(method)
    async def call(self: Queue, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(self, *args, **kwargs)
        except RedisError as exc:
            raise failure(exc, self._host.redis_url or "") or exc from exc

    return call


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
        keeps its place), different groups in parallel."""
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


class Queue:
    """One named queue: enqueue jobs, look them up, cancel them, manage its dead letters."""

    def __init__(self, host: QueueHost, name: str) -> None:
        self._host = host
        self.name = name
        self.keys = QueueKeys.for_queue(host.settings.prefix, name)
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

        Every call is validated and encoded first (an error writes nothing); then all go
        to Redis in one round trip, in script calls of up to 1,000 jobs, in order.
        """
        calls = list(calls)
        if any(call._options.debounce is not None for call in calls):
            raise ConfigError("enqueue_many takes no debounced calls: await each one")
        with contextlib.ExitStack() as stack:
            observed = stack if self._host.registry.observers else None
            new = [call._prepare_for(self, observed) for call in calls]
            try:
                if any(call._options.group is not None for call in calls):
                    groups = [call._options.group or "" for call in calls]
                    results = await self._write_linked(
                        [LinkedJob(job, group) for job, group in zip(new, groups, strict=True)]
                    )
                else:
                    results = await self._batcher.submit_many(new)
            except RedisError as exc:
                raise self._failure(exc, [job.id for job in new]) from exc
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
        elif options.group is not None:
            write = functools.partial(self._write_grouped, options.group)
        else:
            write = self._write
        if self._host.registry.observers:
            with contextlib.ExitStack() as stack:
                headers = self._observe(stack, task)
                return await write(self._prepare(task, args, kwargs, options, headers))
        return await write(self._prepare(task, args, kwargs, options))

    async def _debounce(self, options: JobOptions, new: NewJob) -> Job[Any]:
        """A debounced call: the pending run of its key takes these arguments and starts
        a window from now, or a new run is scheduled (``debounce.lua``). Safe to repeat."""
        key, window_ms = options.id or "", options.debounce_ms() or 0
        try:
            redis = await self._host.internal_client()
            job_id, state = await admin.debounce(redis, self.keys, key, new, window_ms=window_ms)
        except RedisError as exc:
            raise self._failure(exc, [key]) from exc
        return Job(self, job_id, created=state == "scheduled")

    async def _write_grouped(self, group: str, new: NewJob) -> Job[Any]:
        try:
            [result] = await self._write_linked([LinkedJob(new, group)])
        except RedisError as exc:
            raise self._failure(exc, [new.id]) from exc
        return Job(self, new.id, created=result.created)

    async def _write_linked(
        self, jobs: Sequence[LinkedJob], seal: Sequence[str] = ()
    ) -> list[Enqueued]:
        """Write jobs of groups and workflows (``enqueue_linked.lua``); safe to repeat."""
        settings = self._host.settings
        return await links.enqueue_linked(
            await self._host.internal_client(), self.keys, jobs, seal=seal,
            span_ms=settings.idempotency_ttl_ms, result_ttl_ms=settings.result_ttl_ms,
        )  # fmt: skip

    async def _write(self, new: NewJob) -> Job[Any]:
        try:
            result = await self._batcher.submit(new)
        except RedisError as exc:
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

    def _failure(self, exc: RedisError, job_ids: list[str]) -> Exception:
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
        return enqueue.prepare(
            task, args, kwargs, options,
            find_task=self._host.registry.find_task, headers=headers, inputs=inputs,
            max_payload_bytes=self._host.settings.max_payload_bytes,
            replicas=self._host.settings.replicas,
        )  # fmt: skip

    # -- one job -----------------------------------------------------------------------

    @_clear_errors
    async def info(self, job_id: str) -> JobInfo | None:
        """The job's record, or None if there is none (never enqueued, or expired)."""
        redis, span_ms = await self._host.client(), self._host.settings.idempotency_ttl_ms
        return await reads.job_info(redis, self.keys, job_id, span_ms=span_ms)

    @_clear_errors
    async def status(self, job_id: str) -> JobStatus | None:
        """The job's status, or None if there is no record (one small read)."""
        redis, span_ms = await self._host.client(), self._host.settings.idempotency_ttl_ms
        return await reads.job_status(redis, self.keys, job_id, span_ms=span_ms)

    @_clear_errors
    async def progress(self, job_id: str) -> Any:
        """What the job last reported with ``current_job().set_progress()`` (or None)."""
        raw = await reads.progress(await self._host.client(), self.keys, job_id)
        return None if raw is None else orjson.loads(raw)

    def settled(self, job_id: str) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set whenever the job may have finished (see ``Job.result``)."""
        return self._host.settled_listener().waiting(self.keys.settled_channel, job_id)

    @_clear_errors
    async def cancel(self, job_id: str) -> bool:
        """Cancel a job: a queued or scheduled one never runs; a running one is aborted
        (its asyncio task is cancelled on whichever worker runs it, and it ends as
        cancelled, not retried). True if the job was cancelled or its abort requested;
        False if it had finished already (or does not exist)."""
        outcome, _ = await admin.cancel(
            await self._host.client(),
            self.keys,
            job_id,
            result_ttl_ms=self._host.settings.result_ttl_ms,
        )
        return outcome in ("cancelled", "aborting")

    @_clear_errors
    async def reschedule(
        self, job_id: str, *, delay: float | timedelta | None = None, at: datetime | None = None
    ) -> bool:
        """Move a scheduled job to a new time (O(log n)); False if it is not scheduled."""
        when = JobOptions(delay=delay, at=at)
        outcome, _ = await admin.reschedule(
            await self._host.client(), self.keys, job_id,
            delay_ms=when.delay_ms(), due_ms=when.due_ms(),
        )  # fmt: skip
        return outcome == "rescheduled"

    # -- the queue as a whole -----------------------------------------------------------

    @_clear_errors
    async def scheduled(self, *, limit: int = 100, offset: int = 0) -> list[ScheduledJob]:
        """Scheduled jobs in due order (O(log n + limit), no scan of the schedule)."""
        redis = await self._host.client()
        return await reads.scheduled(redis, self.keys, limit=limit, offset=offset)

    @_clear_errors
    async def jobs(
        self, state: ListedState = "ready", *, limit: int = 100, offset: int = 0
    ) -> list[JobInfo]:
        """A page of the jobs that are ``ready`` (in the order they will run: highest
        priority first), ``scheduled`` (by due time), ``active`` (by lease deadline) or
        ``dead`` (oldest first), with their records. A few round trips, no scan."""
        if limit < 0 or offset < 0:
            raise ConfigError("limit and offset must not be negative")
        redis = await self._host.client()
        return await reads.jobs(redis, self.keys, state, limit=limit, offset=offset)

    @_clear_errors
    async def history(self, *, minutes: int = 60) -> list[MinuteCounts]:
        """How many attempts ended in each outcome, per minute, for the last ``minutes``
        (kept for ``App(history=...)`` seconds, a day by default), oldest first."""
        if minutes < 1:
            raise ConfigError("minutes must be at least 1")
        return await reads.history(await self._host.client(), self.keys, minutes=minutes)

    @_clear_errors
    async def pause(self) -> bool:
        """Stop every worker taking jobs of this queue (the state lives in Redis, so all
        obey it, and workers started later too). Running jobs finish; enqueues go on
        and wait; delayed jobs still fall due (into ready). False if it was paused."""
        return bool(await (await self._host.client()).set(self.keys.paused, 1, nx=True))

    @_clear_errors
    async def resume(self) -> bool:
        """End a pause: workers take again at once. False if it was not paused."""
        return await admin.resume(await self._host.client(), self.keys)

    @_clear_errors
    async def paused(self) -> bool:
        """Whether the queue is paused."""
        return bool(await (await self._host.client()).exists(self.keys.paused))

    @_clear_errors
    async def set_limits(
        self, *, rate: str | None = None, burst: int = 1, concurrency: int | None = None
    ) -> QueueLimits:
        """Limit this queue across every worker (the limits live in Redis; workers obey
        them at their next take): at most ``concurrency`` of its jobs running at once (a
        dead worker's count until their leases expire), and starts no faster than
        ``rate`` (``"100/s"``, ``"20/m"``, ``"500/h"``, ``"5/10s"``), ``burst`` at once
        after a quiet spell. Jobs held back wait in ready, in order; none is dropped or
        retried for it. Replaces the queue's limits; no arguments lifts them all. Workers
        held back by the old limits see the new ones within a second."""
        limits = make_limits(rate=rate, burst=burst, concurrency=concurrency)
        await stored_limits.write(await self._host.client(), self.keys, limits)
        return limits

    @_clear_errors
    async def limits(self) -> QueueLimits:
        """The queue's limits (``set_limits``); fields are None where there is none."""
        return await stored_limits.read(await self._host.client(), self.keys)

    @_clear_errors
    async def counts(self) -> QueueCounts:
        """How many jobs are ready, scheduled, active and dead, and whether the queue is
        paused (one round trip)."""
        return await reads.counts(await self._host.client(), self.keys)

    @_clear_errors
    async def workers(self) -> list[dict[str, Any]]:
        """Workers serving this queue whose heartbeat is fresh (id, host, pid, queues,
        concurrency, running, started_at, beat_at); expired ids are pruned."""
        return await heartbeats.live_workers(await self._host.client(), self.keys)

    @_clear_errors
    async def reconcile(self, *, batch: int = 500) -> int:
        """Put back jobs whose entry vanished while their record stayed (a server that
        evicted keys: see ``aioqueue check``): a queued job missing from its ready list is
        made ready again, and so on. Scans every job record of the queue, and each queued
        one's ready list (LPOS: O(backlog) per queued job): run it after an eviction, not
        routinely. Returns how many were repaired; concurrent runs do no harm."""
        redis = await self._host.client()
        repaired = 0
        async for ids in reads.job_ids(redis, self.keys, batch=batch):
            repaired += await admin.reconcile(redis, self.keys, ids)
        return repaired

    # -- periodic jobs -----------------------------------------------------------------

    @_clear_errors
    async def periodic_specs(self) -> list[Periodic]:
        """The periodic jobs of this queue, as the workers see them."""
        return await specs.load(await self._host.client(), self.keys)

    @_clear_errors
    async def add_periodic(self, spec: Periodic) -> None:
        """Store a periodic spec and wake a scheduler to look at it."""
        await specs.add(await self._host.client(), self.keys, spec)

    @_clear_errors
    async def remove_periodic(self, name: str) -> bool:
        """Remove a periodic spec; True if there was one."""
        return await specs.remove(await self._host.client(), self.keys, name)

    # -- dead letters ----------------------------------------------------------------

    @_clear_errors
    async def dead_jobs(self, *, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        """Dead jobs, oldest first, with their errors and raw bytes."""
        redis = await self._host.client()
        return await reads.dead_jobs(redis, self.keys, limit=limit, offset=offset)

    @_clear_errors
    async def requeue_dead(
        self,
        job_ids: Sequence[str] = (),
        *,
        task: str | None = None,
        error_type: str | None = None,
        limit: int = 1000,
    ) -> int:
        """Requeue dead jobs: these ids, or the oldest ``limit`` (those of ``task`` and/or
        with ``error_type`` only, if given). Returns how many were requeued."""
        ids = await self._select_dead(job_ids, task, error_type, limit)
        if ids is None:
            return 0  # a filter matched nothing
        result = await admin.requeue(await self._host.client(), self.keys, ids, limit=limit)
        return result.requeued

    @_clear_errors
    async def purge_dead(
        self,
        job_ids: Sequence[str] = (),
        *,
        task: str | None = None,
        error_type: str | None = None,
        limit: int = 1000,
    ) -> int:
        """Delete dead jobs, chosen as for ``requeue_dead``. Returns how many."""
        ids = await self._select_dead(job_ids, task, error_type, limit)
        if ids is None:
            return 0  # a filter matched nothing
        return await admin.purge(await self._host.client(), self.keys, ids, limit=limit)

    async def _select_dead(
        self, job_ids: Sequence[str], task: str | None, error_type: str | None, limit: int
    ) -> Sequence[str] | None:
        """The ids to act on: () means "the oldest ``limit``" (the script picks them);
        None means a filter matched nothing."""
        if job_ids or (task is None and error_type is None):
            return tuple(job_ids)
        matching = [
            info.id
            for info in await self.dead_jobs(limit=limit)
            if (task is None or info.task == task)
            and (error_type is None or (info.error is not None and info.error.type == error_type))
        ]
        return matching or None
