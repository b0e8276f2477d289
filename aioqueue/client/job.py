"""Job: the handle a producer holds on one enqueued job (status, result, cancel)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..core.errors import JobCancelled, JobExpired, JobFailed, JobNotFound, ResultTimeout
from ..core.records import ErrorInfo, JobInfo, JobStatus

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime, timedelta

R_co = TypeVar("R_co", covariant=True)


class JobSource(Protocol):
    """What a Job handle needs from its queue (kept abstract to avoid an import cycle)."""

    name: str

    async def info(self, job_id: str) -> JobInfo | None: ...

    async def status(self, job_id: str) -> JobStatus | None: ...

    async def cancel(self, job_id: str) -> bool: ...

    async def progress(self, job_id: str) -> Any: ...

    def settled(self, job_id: str) -> AbstractAsyncContextManager[asyncio.Event]: ...

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
        """Where the job is: ``JobStatus`` (waiting, queued, ..., complete, expired)."""
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

    async def progress(self) -> Any:
        """What the job last reported with ``current_job().set_progress()`` (or None)."""
        return await self._source.progress(self.id)

    async def result(self, timeout: float | None = None, *, poll_interval: float = 5.0) -> R_co:
        """Wait for the job to finish and return its result, or raise its error.

        Returns as soon as the job settles: the worker's ack announces it (pub/sub), so
        a waiter reads the job twice (its status on entry, its record when announced),
        however long it waits.
        ``poll_interval`` is a safety net: how often to look anyway, in case an
        announcement was lost with a connection.

        Raises JobFailed (failed or dead), JobCancelled, JobExpired, JobNotFound, or
        ResultTimeout.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        async with self._source.settled(self.id) as settled:
            finished = (await self.status()).finished  # one small field, before any wait
            while True:
                if finished:
                    return self._outcome(await self.info())  # type: ignore[no-any-return]
                pause = poll_interval
                if deadline is not None:
                    pause = min(pause, deadline - loop.time())
                    if pause <= 0:
                        raise ResultTimeout(self.id, timeout or 0.0)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(settled.wait(), pause)
                settled.clear()  # set from here on: look again
                info = await self.info()  # announced (or time to look): the record at once
                if info.status.finished:
                    return self._outcome(info)  # type: ignore[no-any-return]

    def _outcome(self, info: JobInfo) -> Any:
        if info.status is JobStatus.COMPLETE:
            return info.result()
        if info.status is JobStatus.CANCELLED:
            raise JobCancelled(self.id)
        if info.status is JobStatus.EXPIRED:
            raise JobExpired(self.id)
        error = info.error or ErrorInfo("Unknown", "no error recorded", "")
        raise JobFailed(self.id, error.type, error.message, error.traceback)
