"""Coalescing of concurrent enqueues into one script call per round trip.

A lone enqueue is sent at once, from the caller's own task (no extra task or future). While
one is in flight, further enqueues of the same queue wait in a list, and a flusher sends them
all in one write as soon as the wire is free: ``asyncio.gather`` of 500 enqueues costs a
couple of round trips, not 500, and the order of arrival is kept. The write holds script
calls of FLUSH_CHUNK jobs, so the first callers resume while Redis still runs the rest.

Since its calls never overlap, the batcher keeps one connection for them (``routing``:
``keep=True``), and skips the pool's per-call checkout (in redis-py 8: a lock, a readiness
poll and metrics hooks, tens of µs a call). Bulk enqueues, which may overlap, check one
out per call.

Each enqueue has its deadline (``deadline``: the App's ``enqueue_timeout``, set by its
caller, ``deadline.bound``: no timer per job); the batcher arms it: a lone enqueue is sent
under its own, a flush, on behalf of several callers, under the earliest of theirs, so
that no caller waits past its own (in a stall, a later caller of the flush may hear of
it a little early).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, NamedTuple

from . import deadline
from .coalescing import Coalescer
from .scripts import enqueues

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from redis.asyncio import Redis

    from ..core.keys import QueueKeys
    from ..core.lifecycle import Enqueued, NewJob


# Jobs per script call of a flush, all sent in one write: each caller resumes as its call's
# reply arrives, while Redis still runs the later calls (one call would keep every caller
# waiting for the last job).
FLUSH_CHUNK = 100


class _Waiting(NamedTuple):
    job: NewJob
    future: asyncio.Future[Enqueued]
    deadline: deadline.Deadline | None  # its caller's


Batch = list[_Waiting]


class EnqueueBatcher(Coalescer[_Waiting]):
    """Sends the enqueues of one queue, batching whatever arrives while one is in flight."""

    def __init__(
        self,
        client: Callable[[], Awaitable[Redis]],
        keys: QueueKeys,
        *,
        span_ms: int = 0,
        replica_timeout: float = 1.0,
    ) -> None:
        super().__init__()
        self._client, self._keys = client, keys
        self._replica_timeout = replica_timeout  # WAIT's, for jobs that ask for replicas
        self._span_ms = span_ms  # the idempotency window of jobs completed with no result

    async def submit(self, job: NewJob) -> Enqueued:
        if self._alone:
            self._busy = True
            try:
                async with deadline.keeping(deadline.current()):
                    [result] = await enqueues.enqueue_many(
                        await self._client(),
                        self._keys,
                        [job],
                        span_ms=self._span_ms,
                        keep=True,
                        replica_timeout=self._replica_timeout,
                    )
                return result
            finally:
                self._busy = False
                self._start_flusher()
        future: asyncio.Future[Enqueued] = asyncio.get_running_loop().create_future()
        # (its flush's deadline is no later than this caller's)
        return await self._wait_in_line(_Waiting(job, future, deadline.current()), future)

    async def submit_many(self, jobs: list[NewJob]) -> list[Enqueued]:
        """A bulk enqueue: sent at once, in script calls of up to MAX_ENQUEUE_BATCH jobs."""
        if not jobs:
            return []
        return await enqueues.enqueue_many(
            await self._client(),
            self._keys,
            jobs,
            span_ms=self._span_ms,
            replica_timeout=self._replica_timeout,
        )

    def _batch_size(self, pending: Sequence[_Waiting]) -> int:
        return _same_replicas(pending, enqueues.MAX_ENQUEUE_BATCH)

    async def _send_batch(self, batch: Batch) -> None:
        """One flush: its callers' futures get their results, or the error."""

        def settle(start: int, results: list[Enqueued]) -> None:
            chunk = batch[start : start + len(results)]
            for (_, future, _), result in zip(chunk, results, strict=True):
                if not future.done():  # its caller may have given up waiting
                    future.set_result(result)

        try:
            async with deadline.keeping(_earliest(batch)):
                await enqueues.enqueue_many(
                    await self._client(),
                    self._keys,
                    [job for job, _, _ in batch],
                    chunk=FLUSH_CHUNK,
                    on_chunk=settle,
                    span_ms=self._span_ms,
                    keep=True,
                    replica_timeout=self._replica_timeout,
                )
        except Exception as exc:
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(exc)


def _earliest(batch: Batch) -> deadline.Deadline | None:
    """The deadline a flush is sent under: its callers' earliest (None if none has one)."""
    earliest: deadline.Deadline | None = None
    for _, _, each in batch:
        if each is not None and (earliest is None or each.at < earliest.at):
            earliest = each
    return earliest


def _same_replicas(pending: Sequence[_Waiting], limit: int) -> int:
    """How many of the first jobs go in one flush: up to ``limit``, all asking for the
    same number of replicas (a flush waits for the most any of its jobs asks, and a job
    that asked for none must not wait, nor fail, for another's)."""
    wanted = pending[0][0].replicas
    for index, (job, _, _) in enumerate(pending[:limit]):
        if job.replicas != wanted:
            return index
    return min(limit, len(pending))
