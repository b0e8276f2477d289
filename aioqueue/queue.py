"""Queue: the producer and admin API of one queue, a thin layer over the scripts."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, overload

import orjson
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import scripts
from .batching import EnqueueBatcher
from .errors import ConfigError, EnqueueUnconfirmed, InvalidArguments
from .job import Job, JobInfo, JobStatus, encode_payload
from .keys import QueueKeys
from .periodic import Periodic
from .priorities import DEFAULT_PRIORITY, resolve_priority
from .task import Task

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Mapping, Sequence

    from redis.asyncio import Redis

    from .settings import AppSettings

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class QueueHost(Protocol):
    """What a Queue needs from its App."""

    @property
    def settings(self) -> AppSettings: ...

    async def client(self) -> Redis: ...

    async def internal_client(self) -> Redis: ...

    def find_task(self, name: str) -> Task[..., Any] | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """Per-call options. They never share a namespace with the task's own arguments."""

    id: str | None = None
    priority: int | str | None = None
    delay: float | timedelta | None = None
    at: datetime | None = None
    timeout: float | None = None
    max_attempts: int | None = None

    def due_ms(self) -> int:
        if self.at is None:
            return 0
        if self.at.tzinfo is None:
            raise ConfigError("at= needs an aware datetime (with tzinfo), e.g. datetime.now(UTC)")
        return int(self.at.timestamp() * 1000)

    def delay_ms(self) -> int:
        delay = self.delay.total_seconds() if isinstance(self.delay, timedelta) else self.delay
        if delay is None:
            return 0
        if delay < 0:
            raise ConfigError("delay must not be negative")
        return int(delay * 1000)


NO_OPTIONS = JobOptions()  # shared by every call that sets none (it is frozen)


class EnqueueCall(Generic[R]):
    """An enqueue waiting to be awaited: ``await queue.enqueue(task, x).options(delay=5)``."""

    __slots__ = ("_args", "_kwargs", "_options", "_queue", "_task")

    def __init__(
        self,
        queue: Queue,
        task: Task[..., R] | str,
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
    ) -> EnqueueCall[R]:
        """Set per-call options: job id (deduplication), priority, delay or time, timeout."""
        current = self._options
        options = JobOptions(
            id=current.id if id is None else id,
            priority=current.priority if priority is None else priority,
            delay=current.delay if delay is None else delay,
            at=current.at if at is None else at,
            timeout=current.timeout if timeout is None else timeout,
            max_attempts=current.max_attempts if max_attempts is None else max_attempts,
        )
        return EnqueueCall(self._queue, self._task, self._args, self._kwargs, options)

    def _prepare_for(self, queue: Queue) -> scripts.NewJob:
        if self._queue is not queue:
            raise ConfigError(
                f"enqueue_many on queue {queue.name!r} got a job for {self._queue.name!r}"
            )
        return queue._prepare(self._task, self._args, self._kwargs, self._options)

    def __await__(self) -> Generator[Any, None, Job[R]]:
        return self._queue._submit(self._task, self._args, self._kwargs, self._options).__await__()


class Queue:
    """One named queue: enqueue jobs, look them up, cancel them, manage its dead letters."""

    def __init__(self, host: QueueHost, name: str) -> None:
        self._host = host
        self.name = name
        self.keys = QueueKeys.for_queue(host.settings.prefix, name)
        self._batcher = EnqueueBatcher(host.internal_client, self.keys)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"

    @overload
    def enqueue(self, task: Task[P, R], *args: P.args, **kwargs: P.kwargs) -> EnqueueCall[R]: ...
    @overload
    def enqueue(self, task: str, *args: Any, **kwargs: Any) -> EnqueueCall[Any]: ...

    def enqueue(self, task: Task[..., Any] | str, *args: Any, **kwargs: Any) -> EnqueueCall[Any]:
        """Queue one job: a Task, or a task name (for producers that lack the code).

        Await the call for a Job handle. When it returns, the job is in Redis.
        """
        return EnqueueCall(self, task, args, kwargs, NO_OPTIONS)

    def job(self, job_id: str) -> Job[Any]:
        """A handle on an existing job of this queue."""
        return Job(self, job_id)

    async def _submit(
        self,
        task: Task[..., R] | str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: JobOptions,
    ) -> Job[R]:
        new = self._prepare(task, args, kwargs, options)
        try:
            result = await self._batcher.submit(new)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise EnqueueUnconfirmed([new.id], exc) from exc
        return Job(self, new.id, created=result.created)

    async def enqueue_many(self, calls: Iterable[EnqueueCall[Any]]) -> list[Job[Any]]:
        """Bulk enqueue: ``await queue.enqueue_many(task.enqueue(x) for x in xs)``.

        Every call is validated and encoded first (an error writes nothing); then all go
        to Redis in one round trip, in script calls of up to 1,000 jobs, in order.
        """
        new = [call._prepare_for(self) for call in calls]
        try:
            results = await self._batcher.submit_many(new)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise EnqueueUnconfirmed([job.id for job in new], exc) from exc
        return [Job(self, job.id, created=r.created) for job, r in zip(new, results, strict=True)]

    def _prepare(
        self,
        task: Task[..., Any] | str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: JobOptions,
    ) -> scripts.NewJob:
        """Validate and encode one job; raise (writing nothing) on bad input."""
        known: Task[..., Any] | None
        if isinstance(task, Task):
            name, known = task.name, task
        else:
            name, known = task, self._host.find_task(task)
        if known is not None:
            try:
                known.check_arguments(args, kwargs)
            except TypeError as exc:
                raise InvalidArguments(f"task {name!r} cannot take these arguments: {exc}") from exc
        payload = encode_payload(
            name, args, kwargs, options.timeout, self._host.settings.max_payload_bytes
        )
        job_id = options.id or os.urandom(16).hex()
        if not isinstance(job_id, str):
            raise ConfigError(f"id must be a str, got {type(job_id).__name__}")
        if options is NO_OPTIONS:  # most enqueues: the task's defaults, nothing to resolve
            if known is None:
                return scripts.NewJob(job_id, payload, DEFAULT_PRIORITY)
            return scripts.NewJob(job_id, payload, known.priority, known.options.max_attempts)
        default_priority = known.priority if known else DEFAULT_PRIORITY
        priority = (
            default_priority if options.priority is None else resolve_priority(options.priority)
        )
        max_attempts = options.max_attempts or (known.options.max_attempts if known else 0)
        return scripts.NewJob(
            job_id, payload, priority, max_attempts, options.delay_ms(), options.due_ms()
        )

    async def info(self, job_id: str) -> JobInfo | None:
        """The job's record, or None if there is none (never enqueued, or expired)."""
        redis = await self._host.client()
        record: dict[bytes, bytes] = await redis.hgetall(self.keys.job(job_id))  # type: ignore[assignment]
        if not record or b"s" not in record:
            return None
        return JobInfo.from_record(job_id, self.name, record)

    async def status(self, job_id: str) -> JobStatus | None:
        """The job's status, or None if there is no record (one small read)."""
        redis = await self._host.client()
        raw: bytes | None = await redis.hget(self.keys.job(job_id), "s")  # type: ignore[assignment]
        return JobStatus(raw.decode()) if raw else None

    async def cancel(self, job_id: str) -> bool:
        """Cancel a job: a queued or scheduled one never runs; a running one is aborted
        (its asyncio task is cancelled on whichever worker runs it, and it ends as
        cancelled, not retried). True if the job was cancelled or its abort requested;
        False if it had finished already (or does not exist)."""
        outcome, _ = await scripts.cancel(
            await self._host.client(),
            self.keys,
            job_id,
            result_ttl_ms=self._host.settings.result_ttl_ms,
        )
        return outcome in ("cancelled", "aborting")

    async def reschedule(
        self, job_id: str, *, delay: float | timedelta | None = None, at: datetime | None = None
    ) -> bool:
        """Move a scheduled job to a new time (O(log n)); False if it is not scheduled."""
        when = JobOptions(delay=delay, at=at)
        outcome, _ = await scripts.reschedule(
            await self._host.client(), self.keys, job_id,
            delay_ms=when.delay_ms(), due_ms=when.due_ms(),
        )  # fmt: skip
        return outcome == "rescheduled"

    async def scheduled(self, *, limit: int = 100, offset: int = 0) -> list[ScheduledJob]:
        """Scheduled jobs in due order (O(log n + limit), no scan of the schedule)."""
        redis = await self._host.client()
        entries: list[tuple[bytes, float]] = await redis.zrange(  # type: ignore[assignment]
            self.keys.schedule, offset, offset + limit - 1, withscores=True
        )
        return [ScheduledJob(raw.decode("utf-8", "replace"), int(due)) for raw, due in entries]

    async def counts(self) -> QueueCounts:
        """How many jobs are ready, scheduled, active and dead (one round trip)."""
        redis = await self._host.client()
        async with redis.pipeline(transaction=False) as pipe:
            for key in self.keys.ready_lists():
                pipe.llen(key)
            pipe.zcard(self.keys.schedule)
            pipe.zcard(self.keys.active)
            pipe.zcard(self.keys.dead)
            replies = await pipe.execute()
        *ready, scheduled, active, dead = (int(n) for n in replies)
        return QueueCounts(sum(ready), scheduled, active, dead)

    async def workers(self) -> list[dict[str, Any]]:
        """Workers serving this queue whose heartbeat is fresh (id, host, pid, queues,
        concurrency, running, started_at, beat_at); expired ids are pruned."""
        redis = await self._host.client()
        members: set[bytes] = await redis.smembers(self.keys.workers)  # type: ignore[assignment]
        ids = sorted(raw.decode("utf-8", "replace") for raw in members)
        if not ids:
            return []
        beats = await redis.mget([self.keys.worker(worker_id) for worker_id in ids])
        dead = [worker_id for worker_id, beat in zip(ids, beats, strict=True) if beat is None]
        if dead:
            await redis.srem(self.keys.workers, *dead)
        return [orjson.loads(beat) for beat in beats if beat is not None]

    # -- periodic jobs -----------------------------------------------------------------

    async def periodic_specs(self) -> list[Periodic]:
        """The periodic jobs of this queue, as the workers see them."""
        return await load_specs(await self._host.client(), self.keys)

    async def add_periodic(self, spec: Periodic) -> None:
        """Store a periodic spec and wake a scheduler to look at it."""
        redis = await self._host.client()
        async with redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.periodic, spec.name, spec.encode())
            pipe.rpush(self.keys.schedule_wake, 0)
            pipe.ltrim(self.keys.schedule_wake, -1, -1)
            await pipe.execute()

    async def remove_periodic(self, name: str) -> bool:
        """Remove a periodic spec; True if there was one."""
        redis = await self._host.client()
        return int(await redis.hdel(self.keys.periodic, name)) > 0

    # -- dead letters ----------------------------------------------------------------

    async def dead_jobs(self, *, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        """Dead jobs, oldest first, with their errors and raw bytes."""
        redis = await self._host.client()
        raw_ids: list[bytes] = await redis.zrange(self.keys.dead, offset, offset + limit - 1)  # type: ignore[assignment]
        ids = [raw.decode("utf-8", "replace") for raw in raw_ids]
        async with redis.pipeline(transaction=False) as pipe:  # one round trip for all
            for job_id in ids:
                pipe.hgetall(self.keys.job(job_id))
            records: list[dict[bytes, bytes]] = await pipe.execute()
        return [
            JobInfo.from_record(job_id, self.name, record)
            for job_id, record in zip(ids, records, strict=True)
            if record and b"s" in record
        ]

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
        result = await scripts.requeue(await self._host.client(), self.keys, ids, limit=limit)
        return result.requeued

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
        return await scripts.purge(await self._host.client(), self.keys, ids, limit=limit)

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


@dataclass(frozen=True, slots=True)
class ScheduledJob:
    id: str
    due_ms: int  # epoch ms, Redis clock


@dataclass(frozen=True, slots=True)
class QueueCounts:
    ready: int
    scheduled: int
    active: int
    dead: int


async def load_specs(redis: Redis, keys: QueueKeys) -> list[Periodic]:
    """The queue's periodic specs from Redis; unusable ones are logged and skipped."""
    raw: dict[bytes, bytes] = await redis.hgetall(keys.periodic)  # type: ignore[assignment]
    specs = []
    for name, body in raw.items():
        try:
            specs.append(Periodic.decode(body))
        except (ValueError, TypeError) as exc:
            logger.error("periodic spec %r of %s is unusable: %s", name, keys.name, exc)
    return specs


async def sync_declared(redis: Redis, keys: QueueKeys, declared: Sequence[Periodic]) -> None:
    """Store the specs declared in code; drop declared ones the code no longer has.
    Specs added at run time are left alone."""
    names = {spec.name for spec in declared}
    stale = [spec.name for spec in await load_specs(redis, keys)
             if spec.declared and spec.name not in names]  # fmt: skip
    async with redis.pipeline(transaction=True) as pipe:
        for spec in declared:
            pipe.hset(keys.periodic, spec.name, spec.encode())
        if stale:
            pipe.hdel(keys.periodic, *stale)
        await pipe.execute()
