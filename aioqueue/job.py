"""Jobs: the wire format of a job's payload, its status, and the handle producers hold.

The payload is JSON (orjson), never pickle: a worker only ever runs registered handlers
with decoded JSON values. ``v`` versions the data format, separately from the Lua code.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import orjson

from .errors import (
    JobCancelled,
    JobFailed,
    JobNotFound,
    PayloadTooLarge,
    ResultTimeout,
    SerializationError,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime, timedelta

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

WIRE_VERSION = 1


class JobStatus(StrEnum):
    """Where a job is in its life."""

    QUEUED = "queued"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    COMPLETE = "complete"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({JobStatus.COMPLETE, JobStatus.FAILED, JobStatus.DEAD, JobStatus.CANCELLED})


class PayloadError(ValueError):
    """A payload read from Redis is not a valid aioqueue job (written by a third party?)."""


@dataclass(frozen=True, slots=True)
class Payload:
    """What a job asks a worker to do: a task name and JSON arguments."""

    task: str
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    timeout: float | None = None  # per-call override of the task's timeout

    def encode(self, max_bytes: int) -> bytes:
        """Encode for Redis; raise SerializationError or PayloadTooLarge, writing nothing."""
        return encode_payload(self.task, self.args, self.kwargs, self.timeout, max_bytes)

    @classmethod
    def decode(cls, raw: bytes) -> Payload:
        """Decode a payload from Redis; raise PayloadError on anything unexpected."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise PayloadError(f"payload is not valid JSON: {exc}") from exc
        if _LONG_NUMBER.search(raw):
            _check_integers(raw)
        if not isinstance(body, dict):
            raise PayloadError("payload is not a JSON object")
        task, args, kwargs = body.get("t"), body.get("a", []), body.get("k", {})
        timeout = body.get("to")
        if not isinstance(task, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise PayloadError("payload lacks a task name, an args list or a kwargs object")
        if timeout is not None and not isinstance(timeout, int | float):
            raise PayloadError("payload timeout is not a number")
        return cls(task, args, kwargs, timeout)


def encode_payload(
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    timeout: float | None,
    max_bytes: int,
) -> bytes:
    """A Payload's bytes, without building the Payload (the enqueue path calls this)."""
    body: dict[str, Any] = {
        "v": WIRE_VERSION,
        "t": task,
        "a": args if type(args) in _JSON_ARRAYS else list(args),
        "k": kwargs if type(kwargs) is dict else dict(kwargs),
    }
    if timeout is not None:
        body["to"] = timeout
    try:
        raw = orjson.dumps(body)
    except TypeError as exc:
        raise SerializationError(
            f"arguments of task {task!r} are not JSON-serializable: {exc}"
        ) from exc
    if len(raw) > max_bytes:
        raise PayloadTooLarge(len(raw), max_bytes)
    return raw


_JSON_ARRAYS = (list, tuple)  # what orjson writes as arrays itself (a subclass is copied)

# orjson reads an integer beyond 64 bits as a float, silently changing it. Such digits
# are rare, so a cheap scan decides whether to re-read the payload strictly.
_LONG_NUMBER = re.compile(rb"\d{20,}")
_INT_RANGE = range(-(2**63), 2**64)


def _check_integers(raw: bytes) -> None:
    def strict_int(text: str) -> int:
        value = int(text)
        if value not in _INT_RANGE:
            raise PayloadError(f"payload holds an integer beyond 64 bits: {text[:40]}")
        return value

    json.loads(raw, parse_int=strict_int)


def encode_result(value: object) -> bytes:
    """Encode a handler's return value; raise SerializationError if JSON cannot hold it."""
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise SerializationError(f"result is not JSON-serializable: {exc}") from exc


def encode_error(error_type: str, message: str, traceback: str) -> bytes:
    return orjson.dumps({"type": error_type, "message": message, "traceback": traceback})


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
    """A snapshot of one job record, for inspection (status pages, the dead-letter CLI)."""

    id: str
    queue: str
    status: JobStatus
    task: str | None
    args: Sequence[Any]
    kwargs: Mapping[str, Any]
    attempts: int
    max_attempts: int
    priority: int
    enqueued_at_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    error: ErrorInfo | None
    raw: bytes | None  # the undecodable bytes, for poison entries and bad payloads
    result_raw: bytes | None

    @classmethod
    def from_record(cls, job_id: str, queue: str, record: Mapping[bytes, bytes]) -> JobInfo:
        raw_payload = record.get(b"p", b"")
        try:
            payload: Payload | None = Payload.decode(raw_payload)
        except PayloadError:
            payload = None
        error = record.get(b"e")
        return cls(
            id=job_id,
            queue=queue,
            status=JobStatus(record[b"s"].decode()),
            task=payload.task if payload else None,
            args=payload.args if payload else (),
            kwargs=payload.kwargs if payload else {},
            attempts=_int(record.get(b"n")) or 0,
            max_attempts=_int(record.get(b"m")) or 0,
            priority=_int(record.get(b"pr")) or 0,
            enqueued_at_ms=_int(record.get(b"et")),
            started_at_ms=_int(record.get(b"st")),
            finished_at_ms=_int(record.get(b"ft")),
            error=ErrorInfo.decode(error) if error else None,
            raw=record.get(b"raw") or (raw_payload if payload is None else None),
            result_raw=record.get(b"r"),
        )

    def result(self) -> Any:
        """The decoded return value of a complete job (None before it completes)."""
        return orjson.loads(self.result_raw) if self.result_raw is not None else None


def _int(raw: bytes | None) -> int | None:
    return int(float(raw)) if raw else None


class JobSource(Protocol):
    """What a Job handle needs from its queue (kept abstract to avoid an import cycle)."""

    name: str

    async def info(self, job_id: str) -> JobInfo | None: ...

    async def status(self, job_id: str) -> JobStatus | None: ...

    async def cancel(self, job_id: str) -> bool: ...

    async def reschedule(
        self, job_id: str, *, delay: float | timedelta | None = None, at: datetime | None = None
    ) -> bool: ...


class Job(Generic[R_co]):
    """A handle on one enqueued job: ask its status, wait for its result, cancel it."""

    __slots__ = ("_source", "created", "id")

    def __init__(self, source: JobSource, job_id: str, *, created: bool = True) -> None:
        self._source = source
        self.id = job_id
        self.created = created  # False when enqueue found a job with this id already

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, queue={self._source.name!r})"

    @property
    def queue(self) -> str:
        return self._source.name

    async def info(self) -> JobInfo:
        """The job's full record; raise JobNotFound if it does not exist (or expired)."""
        info = await self._source.info(self.id)
        if info is None:
            raise JobNotFound(self.id)
        return info

    async def status(self) -> JobStatus:
        """queued / scheduled / active / complete / failed / dead / cancelled."""
        status = await self._source.status(self.id)
        if status is None:
            raise JobNotFound(self.id)
        return status

    async def cancel(self) -> bool:
        """Cancel the job, or abort it if it is running (see ``Queue.cancel``)."""
        return await self._source.cancel(self.id)

    async def reschedule(
        self, *, delay: float | timedelta | None = None, at: datetime | None = None
    ) -> bool:
        """Move the job to a new time if it is scheduled; False if it is not."""
        return await self._source.reschedule(self.id, delay=delay, at=at)

    async def result(self, timeout: float | None = None, *, poll_interval: float = 0.05) -> R_co:
        """Wait for the job to finish and return its result, or raise its error.

        Raises JobFailed (failed or dead), JobCancelled, JobNotFound, or ResultTimeout.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay = 0.002  # start fast: a no-op job finishes within a round trip or two
        while True:
            if (await self.status()).finished:  # one small field per poll, not the record
                return self._outcome(await self.info())  # type: ignore[no-any-return]
            if deadline is not None and loop.time() >= deadline:
                raise ResultTimeout(self.id, timeout or 0.0)
            pause = delay if deadline is None else min(delay, max(0.0, deadline - loop.time()))
            await asyncio.sleep(pause)
            delay = min(delay * 2, poll_interval)

    def _outcome(self, info: JobInfo) -> Any:
        if info.status is JobStatus.COMPLETE:
            return info.result()
        if info.status is JobStatus.CANCELLED:
            raise JobCancelled(self.id)
        error = info.error or ErrorInfo("Unknown", "no error recorded", "")
        raise JobFailed(self.id, error.type, error.message, error.traceback)
