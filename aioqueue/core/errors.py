"""Exceptions raised by aioqueue.

AioqueueError
├── ConfigError              bad settings or names; raised at construction
├── EnqueueError             nothing was written to Redis
│   ├── SerializationError   args (or a result) are not JSON-serializable
│   ├── PayloadTooLarge      encoded job (or message) exceeds max_payload_bytes
│   └── InvalidArguments     the task's handler cannot take these arguments
├── JobError                 about one job; has .job_id
│   ├── JobNotFound
│   ├── JobFailed            from job.result(); has .error_type, .error and .traceback
│   ├── JobCancelled
│   ├── JobExpired           not started within its ``expires``: it never ran
│   └── ResultTimeout        job.result(timeout=...) ran out of time
├── NotAMember               a group call names a member who has not joined it
├── UnknownTask              a worker has no handler for a job's task: the job goes dead;
│                            or an enqueue names a task its queue's tasks in this app lack
├── PayloadError             bytes in a queue are not an aioqueue job: the job goes dead
├── HandlerTimeout           a handler ran past its timeout: uncancellable, or blocked the loop
├── DependencyFailed         a provider of a handler's Depends() raised; has .provider
├── LeaseExpired             a job's worker died or stalled past its lease, its attempts used
├── LeaseLost                a worker's ack found the job's lease passed to another worker
├── ServerUnavailable        no Redis server to talk to (none configured, none reachable)
│   ├── TlsFailed            the TLS handshake failed (rediss://): certificates, versions
│   └── EnqueueUnconfirmed   Redis failed mid-enqueue; has .job_id: retry with that id
│       └── NotReplicated    on the master, but fewer replicas than asked confirmed it
└── ServerRefused            Redis answered no: has the server's message
    ├── AuthenticationFailed wrong user or password
    ├── PermissionDenied     the ACL user may not run a command or touch a key
    └── ServerOutOfMemory    maxmemory reached (noeviction): the command wrote nothing

UnknownTask, PayloadError, HandlerTimeout, DependencyFailed and LeaseExpired are raised
inside a worker and recorded as the failed attempt's or dead job's error
(``JobFailed.error_type`` names them; hooks get the error); LeaseLost is what a worker
logs when Redis refuses its ack.

Retry is deliberately not an AioqueueError: handlers raise it to ask for another
attempt, and a broad ``except AioqueueError`` must not swallow it.
"""

from __future__ import annotations


def describe(exc: BaseException) -> str:
    """An exception as a log line shows it: its type and its message. (redis-py 8's
    exceptions repr as a bare ``server:ResponseError``: the message is what says why.)"""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class AioqueueError(Exception):
    """Base class of every error aioqueue raises."""


class ConfigError(AioqueueError, ValueError):
    """A setting, task or queue name is invalid."""


class EnqueueError(AioqueueError):
    """The job could not be enqueued; nothing was written to Redis."""


class SerializationError(EnqueueError, TypeError):
    """Arguments (or a result) cannot be encoded as JSON."""


class PayloadTooLarge(EnqueueError):
    """The encoded job (or message) is larger than the app's ``max_payload_bytes``."""

    def __init__(self, size: int, limit: int, what: str = "job") -> None:
        super().__init__(f"encoded {what} is {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class InvalidArguments(EnqueueError, TypeError):
    """The task's handler cannot take the given arguments."""


class JobError(AioqueueError):
    """An error about one job."""

    def __init__(self, job_id: str, message: str) -> None:
        super().__init__(f"job {job_id}: {message}")
        self.job_id = job_id


class JobNotFound(JobError):
    """No record of this job exists (never enqueued, or its result expired)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id, "not found")


class JobFailed(JobError):
    """The job ended in error; raised by ``Job.result()``."""

    def __init__(self, job_id: str, error_type: str, error: str, traceback: str) -> None:
        super().__init__(job_id, f"{error_type}: {error}")
        self.error_type = error_type
        self.error = error
        self.traceback = traceback


class JobCancelled(JobError):
    """The job was cancelled before it ran, or aborted while running."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id, "cancelled")


class JobExpired(JobError):
    """The job was not started within its ``expires`` (``.options(expires=...)``) after
    it was due, so it never ran."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id, "expired before it started")


class ChildFailed(AioqueueError):
    """A workflow's child failed for good (dead, failed, cancelled or expired). A parent
    that runs anyway (``on_child_failure="ignore"``) finds one in its inputs in place of
    that child's result; a parent failed by a child ends with this error type."""

    def __init__(self, index: int, error_type: str, error: str) -> None:
        super().__init__(f"child {index} failed: {error_type}: {error}")
        self.index = index
        self.error_type = error_type
        self.error = error


class ResultTimeout(JobError, TimeoutError):
    """``Job.result(timeout=...)`` gave up waiting; the job may still finish."""

    def __init__(self, job_id: str, timeout: float) -> None:
        super().__init__(job_id, f"no result within {timeout}s")


class NotAMember(AioqueueError, LookupError):
    """A group call names a member who has not joined the group (or has left it)."""

    def __init__(self, group: str, member: str) -> None:
        super().__init__(f"{member!r} is not a member of group {group!r}")
        self.group = group
        self.member = member


class UnknownTask(AioqueueError, LookupError):
    """No task with this name is registered on the worker's app (the job goes dead); or,
    raised by an enqueue that wrote nothing, none on the queue of the producer's app."""

    def __init__(self, name: str, message: str | None = None) -> None:
        super().__init__(message or f"unknown task {name!r}: no handler registered")
        self.name = name


class PayloadError(AioqueueError, ValueError):
    """A payload read from Redis is not a valid aioqueue job (written by a third party?)."""


class HandlerTimeout(AioqueueError, TimeoutError):
    """A handler ran past its timeout: it swallowed the cancellation, blocked the loop, or
    ran in a thread (a plain def), which cannot be stopped."""


class DependencyFailed(AioqueueError):
    """A provider of a handler's ``Depends()`` raised (the cause is its error): the attempt
    failed, retried by the task's policy; or, for a worker-scoped one, the worker did not
    start. ``provider`` names it."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(message)
        self.provider = provider


class LeaseExpired(AioqueueError):
    """A job's lease expired (its worker died or stalled) once too often: the job is dead.
    The worker whose lease reclaim buried it runs its on_failure and on_dead hooks with
    this error."""


class LeaseLost(AioqueueError):
    """A worker's ack found the job's lease held by another worker (or expired): this
    worker stalled past its lease, the job was reclaimed, and it runs (or ran) elsewhere."""

    def __init__(self, job_id: str, queue: str, outcome: str) -> None:
        super().__init__(
            f"job {job_id} of {queue}: lease lost before its {outcome} was recorded "
            "(it ran elsewhere too)"
        )
        self.job_id = job_id


class ServerUnavailable(AioqueueError):
    """No Redis server to talk to: none configured, none startable, or none reachable."""


class TlsFailed(ServerUnavailable):
    """The TLS handshake with Redis failed (``rediss://``): nothing was sent."""


class ServerRefused(AioqueueError):
    """Redis answered, and refused: the message is the server's."""


class AuthenticationFailed(ServerRefused):
    """Redis refused the user name or password."""


class PermissionDenied(ServerRefused):
    """The ACL user may not run a command aioqueue needs, or touch one of its keys."""


class ServerOutOfMemory(ServerRefused):
    """Redis is at ``maxmemory`` (under noeviction) and refused the write: nothing was
    written."""


class EnqueueUnconfirmed(ServerUnavailable):
    """Redis could not be reached (or did not answer) while enqueueing: the job may or
    may not be in Redis. An id is an idempotency key while its record exists (until its
    result expires), so retrying with ``.options(id=error.job_id)`` cannot run it twice."""

    def __init__(self, job_ids: list[str], cause: BaseException, where: str = "") -> None:
        one = len(job_ids) == 1
        what = f"job {job_ids[0]} was" if one else f"{len(job_ids):,} jobs were"
        at = f" at Redis {where}" if where else ""
        super().__init__(
            f"could not confirm that {what} enqueued{at} ({describe(cause)}); "
            f"retry with .options(id={job_ids[0]!r})" + ("" if one else " (and so on)")
        )
        self.job_id = job_ids[0]
        self.job_ids = job_ids


class NotReplicated(EnqueueUnconfirmed):
    """The job is on the master, but fewer replicas than asked for (``replicas``)
    confirmed it in time: a failover now could lose it. Retrying with the same id is safe
    (and waits again)."""

    def __init__(self, job_ids: list[str], replicas: int, wanted: int, timeout: float) -> None:
        cause = ReplicationTimeout(
            f"{replicas} of {wanted} replica(s) confirmed it within {timeout:g}s"
        )
        super().__init__(job_ids, cause)
        self.replicas, self.wanted = replicas, wanted


class ReplicationTimeout(Exception):
    """WAIT returned fewer replicas than asked for (the cause of NotReplicated)."""


class Retry(Exception):
    """Raise from a handler to ask for another attempt.

    ``delay`` (seconds) overrides the task's backoff for this attempt. The attempt
    still counts towards the task's maximum.
    """

    def __init__(self, delay: float | None = None) -> None:
        super().__init__(f"retry requested (delay={delay})")
        self.delay = delay
