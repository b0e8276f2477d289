"""The job record and the values the scripts take and return, as typed Python values.

Pure: no I/O and no Redis client, so the producer side and the worker's runner use these
types without importing the Redis layer; ``scripts`` turns redis-py's replies into them.

Job record fields (``job:<id>`` HASH; short, because every queued job carries them):
  p  payload (JSON)      s  state (JobStatus)    n  attempts (absent: 0)  m  max attempts
  pr priority (0..9)     w  lease owner (token)  et enqueued at (ms)   st started at (ms)
  ft finished at (ms)    r  result (JSON)        e  error (JSON)       raw foreign bytes
  ab abort requested (1)  qt made ready at (ms; absent: et)  pg progress (JSON)
  t  task name (a complete record that dropped its payload: ack.lua keeps the name)
  tn tenant (``.options(tenant=...)``: lua/include/fair.lua)
Linked jobs only (lua/include/links.lua): g group; du due (ms) once its turn comes; pa
  its parents' ids; pi its index among their children; and a parent's pd children
  pending, pt children in all, ok/ko children complete/failed, pk policy (f|i), pv keeps
  its children's results (1), pu not sealed yet (1); k (1) on every linked job: ack.lua
  reads these fields only then.
Times are epoch milliseconds by the Redis clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import orjson

from .errors import PayloadError
from .payload import Payload

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


class Field:
    """Names of the job record's fields (the Lua scripts spell them the same way)."""

    PAYLOAD = b"p"
    TASK = b"t"
    STATE = b"s"
    ATTEMPTS = b"n"
    MAX_ATTEMPTS = b"m"
    PRIORITY = b"pr"
    OWNER = b"w"
    ENQUEUED_AT = b"et"
    STARTED_AT = b"st"
    FINISHED_AT = b"ft"
    RESULT = b"r"
    ERROR = b"e"
    RAW = b"raw"
    ABORT = b"ab"
    READY_AT = b"qt"
    PROGRESS = b"pg"
    GROUP = b"g"
    PARENTS = b"pa"
    PARENT_QUEUE = b"pq"
    CHILDREN = b"pt"
    CHILDREN_PENDING = b"pd"
    CHILDREN_COMPLETE = b"ok"
    CHILDREN_FAILED = b"ko"
    UNSEALED = b"pu"
    TENANT = b"tn"


class JobStatus(StrEnum):
    """Where a job is in its life."""

    WAITING = "waiting"  # behind its group, or for its children (a workflow's parent)
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    COMPLETE = "complete"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # not started within its ``expires``: it never ran
    UNKNOWN = "unknown"  # a state this version does not know (another program's record)

    @classmethod
    def of(cls, raw: bytes) -> JobStatus:
        """A record's state field (``s``); one this version does not know is UNKNOWN."""
        try:
            return cls(raw.decode("utf-8", "replace"))
        except ValueError:
            return cls.UNKNOWN

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset(
    {JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED}
)


# -- reading records back ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """The error a job's last failed attempt recorded."""

    type: str
    message: str
    traceback: str

    @classmethod
    def decode(cls, raw: bytes) -> ErrorInfo:
        try:
            body = orjson.loads(raw)
            return cls(str(body["type"]), str(body["message"]), str(body.get("traceback", "")))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return cls("Unknown", raw.decode("utf-8", "replace"), "")


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A snapshot of one job record, for inspection (status pages, the dead-letter CLI).

    A finished job keeps less than a running one (``ack.lua``): a complete job with a
    result keeps its task's name, priority, attempts, times and result but not its
    arguments (``arguments_kept`` False, unless ``App(keep_payload=True)``); one that
    returned None keeps only its id, for the idempotency window (``record_kept`` False:
    nothing but its status and id is known). Fields not kept read None (``task``,
    ``priority``, the times) or empty (``args``, ``kwargs``): say so, never show them as
    values."""

    id: str
    queue: str
    status: JobStatus
    task: str | None  # None: not kept, or the payload is not an aioqueue job (see raw)
    args: Sequence[Any]
    kwargs: Mapping[str, Any]
    attempts: int
    max_attempts: int
    priority: int | None  # None: not kept
    enqueued_at_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    error: ErrorInfo | None
    raw: bytes | None  # the undecodable bytes, for poison entries and bad payloads
    result_raw: bytes | None
    progress_raw: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    group: str | None = None  # ``.options(group=...)``
    tenant: str | None = None  # ``.options(tenant=...)``
    parents: str | None = None  # a workflow's child: its parents' ids (space-separated)
    parent_queue: str | None = None  # their queue, if not the job's own
    children: ChildCounts | None = None  # a workflow's parent (or a batch)
    due_ms: float | None = None  # a scheduled job: when it is due (epoch ms, Redis clock)
    arguments_kept: bool = True  # False: its payload went when it completed
    record_kept: bool = True  # False: only its id is kept (it completed, returning None)

    @classmethod
    def from_record(
        cls,
        job_id: str,
        queue: str,
        record: Mapping[bytes, bytes],
        *,
        due_ms: float | None = None,
    ) -> JobInfo:
        """The job of ``record`` (a record's fields, ``Field``); ``due_ms``: its score on
        the schedule, if it is scheduled. Any bytes make some JobInfo: a field that does
        not parse reads as not there."""
        raw_payload = record.get(Field.PAYLOAD)  # a complete record may have dropped it
        try:
            payload = None if raw_payload is None else Payload.decode(raw_payload)
        except PayloadError:
            payload = None
        error = record.get(Field.ERROR)
        raw = record.get(Field.RAW)  # may be b"": an empty entry is foreign bytes too
        if raw is None and payload is None:
            raw = raw_payload
        return cls(
            id=job_id,
            queue=queue,
            status=JobStatus.of(record[Field.STATE]),
            task=payload.task if payload else _text(record.get(Field.TASK)),
            args=payload.args if payload else (),
            kwargs=payload.kwargs if payload else {},
            attempts=_int(record.get(Field.ATTEMPTS)) or 0,
            max_attempts=_int(record.get(Field.MAX_ATTEMPTS)) or 0,
            priority=_int(record.get(Field.PRIORITY)),
            enqueued_at_ms=_int(record.get(Field.ENQUEUED_AT)),
            started_at_ms=_int(record.get(Field.STARTED_AT)),
            finished_at_ms=_int(record.get(Field.FINISHED_AT)),
            error=ErrorInfo.decode(error) if error else None,
            raw=raw,
            result_raw=record.get(Field.RESULT),
            progress_raw=record.get(Field.PROGRESS),
            headers=payload.headers if payload else {},
            group=_text(record.get(Field.GROUP)),
            tenant=_text(record.get(Field.TENANT)),
            parents=_text(record.get(Field.PARENTS)),
            parent_queue=_text(record.get(Field.PARENT_QUEUE)),
            children=ChildCounts.from_record(record),
            due_ms=due_ms,
            arguments_kept=raw_payload is not None,
        )

    @classmethod
    def done(cls, job_id: str, queue: str) -> JobInfo:
        """A job that completed returning None: only its id's fingerprint is kept (a done set)."""
        return cls(
            id=job_id, queue=queue, status=JobStatus.COMPLETE, task=None, args=(), kwargs={},
            attempts=0, max_attempts=0, priority=None, enqueued_at_ms=None,
            started_at_ms=None, finished_at_ms=None, error=None, raw=None, result_raw=None,
            arguments_kept=False, record_kept=False,
        )  # fmt: skip

    def result(self) -> Any:
        """The decoded return value of a complete job (None before it completes)."""
        return orjson.loads(self.result_raw) if self.result_raw is not None else None

    @property
    def progress(self) -> Any:
        """What the job last reported with ``current_job().set_progress()`` (or None)."""
        return orjson.loads(self.progress_raw) if self.progress_raw is not None else None


def utc_moment(ms: float) -> datetime | None:
    """Epoch milliseconds as an aware UTC datetime; None when no datetime can hold them
    (past the year 9999, or not finite: a record another program wrote), for a view to
    show the number as it is."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _int(raw: bytes | None) -> int | None:
    """A record's number (written as an integer, or a float by an older version); None
    if it is missing or not a finite number (a record another program wrote)."""
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) else None


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class ChildCounts:
    """A workflow parent's children: how many in all, pending, complete and failed."""

    total: int
    pending: int
    complete: int
    failed: int

    @classmethod
    def from_record(cls, record: Mapping[bytes, bytes]) -> ChildCounts | None:
        if Field.CHILDREN not in record:
            return None
        fields = (Field.CHILDREN, Field.CHILDREN_PENDING, Field.CHILDREN_COMPLETE)
        counts = [_int(record.get(name)) or 0 for name in (*fields, Field.CHILDREN_FAILED)]
        return cls(*counts)


@dataclass(frozen=True, slots=True)
class ScheduledJob:
    """A delayed job: its id and when it is due."""

    id: str
    due_ms: float  # epoch ms, Redis clock: an int, unless another program wrote an absurd score


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """How many attempts of a queue ended in each outcome during one minute."""

    minute_ms: int  # start of the minute, epoch ms (Redis clock)
    complete: int = 0
    retried: int = 0  # failed, and retried
    failed: int = 0  # failed for good, not dead-lettered
    dead: int = 0  # failed for good (or bad input), dead-lettered
    cancelled: int = 0  # aborted while running

    @property
    def failures(self) -> int:
        """Attempts that failed, whatever came next."""
        return self.retried + self.failed + self.dead

    @property
    def failed_for_good(self) -> int:
        """Jobs that failed and will not run again: dead or failed (retries are not)."""
        return self.failed + self.dead


@dataclass(frozen=True, slots=True)
class RecentCounts:
    """What ended in the last 60 seconds, by outcome: the one definition ``aioqueue info``
    (per second) and the dashboard (per minute) show. Estimated from the per-minute
    counts: the current minute's, plus the previous minute's in proportion to how much
    of it the 60 seconds still cover."""

    complete: float
    failed: float  # failed for good: dead, or failed (retries are not failures for good)
    retried: float  # attempts that failed and will run again
    cancelled: float

    @classmethod
    def of(cls, history: Sequence[MinuteCounts], now_ms: int) -> RecentCounts:
        """From ``history`` (oldest first, the current minute last) at ``now_ms``."""
        if not history:
            return cls(0.0, 0.0, 0.0, 0.0)
        current = history[-1]
        into = min(max((now_ms - current.minute_ms) / 60_000, 0.0), 1.0)
        weighted = [(current, 1.0)]
        if len(history) > 1:
            weighted.append((history[-2], 1.0 - into))
        return cls(
            sum(m.complete * w for m, w in weighted),
            sum(m.failed_for_good * w for m, w in weighted),
            sum(m.retried * w for m, w in weighted),
            sum(m.cancelled * w for m, w in weighted),
        )


HISTORY_CODES = {b"c": "complete", b"r": "retried", b"f": "failed", b"d": "dead", b"x": "cancelled"}
"""The field codes of the history hashes (lua/include/history.lua)."""


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """How many jobs of a queue are in each place."""

    ready: int
    scheduled: int
    active: int
    dead: int
    # ready jobs per priority level (levels with none left out; like ``ready``, without
    # the entries of cancelled jobs that take has yet to skip)
    ready_by_priority: Mapping[int, int] = field(default_factory=dict, compare=False)
    paused: bool = False  # workers take nothing from it (``queue.pause()``)
    waiting: int = 0  # behind their group, or for their children (groups, workflows)
    # complete jobs listed: the newest that keep a record (a result), at most 1,000
    complete: int = field(default=0, compare=False)
    tenants: int = field(default=0, compare=False)  # tenants with ready jobs
    tenants_held: int = field(default=0, compare=False)  # of them, held back by their limits
    # those with the most ready jobs, most first (``Queue.counts(top_tenants=...)``)
    top_tenants: Sequence[TenantCount] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class TenantCount:
    """One tenant's jobs: ready (queued), running (leased), and whether its limits hold
    it back now (``Queue.set_tenant_limits``)."""

    name: str
    ready: int
    running: int = 0
    held: bool = False


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of jobs picked by what they are (``Queue.find_jobs``): found by walking a
    list in order, up to a number of its entries."""

    jobs: Sequence[JobInfo]
    scanned: int  # entries of the list read to find them
    exhausted: bool  # the list was read to its end (else a match may lie beyond the scan)
