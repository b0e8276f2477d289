"""QueueAdmin: looking into one queue and steering it; everything a Queue does but enqueue.

``Queue`` (``client/queue.py``, the write path) subclasses it, so ``aioqueue.Queue`` is
one class whose reads and admin calls live here, apart from the hot path. Each call is one
script (``store.scripts``) or one typed read (``store.reads``, ``store.heartbeats``,
``store.specs``, ``store.server``); a Redis failure reaches the caller as an aioqueue
error naming the server (``host.clear_errors``). The dashboard (``web/``) and the command
line (``ops/``) see a queue through these methods only, never ``store/`` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ..core.errors import ConfigError
from ..core.keys import QueueKeys
from ..core.limits import QueueLimits, make_limits
from ..store import heartbeats, listing, reads, server, specs, stored_limits
from ..store.listing import LISTED_STATES
from ..store.scripts import admin as admin_scripts
from .enqueue import JobOptions
from .host import clear_errors
from .tenants import TenantAdmin

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable, Sequence
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime, timedelta

    from redis.asyncio import Redis

    from ..core.periodic import Periodic
    from ..core.records import (
        JobInfo,
        JobPage,
        JobStatus,
        MinuteCounts,
        QueueCounts,
        ScheduledJob,
    )
    from ..store.listing import ListedState
    from ..store.server import Eviction
    from .host import QueueHost


class QueueAdmin(TenantAdmin):
    """One named queue, seen from outside: its jobs, counts, history, limits, pause,
    periodic specs, workers and dead letters, and its tenants (``TenantAdmin``); ``Queue``
    adds enqueueing."""

    def __init__(self, host: QueueHost, name: str) -> None:
        self._host = host
        self.name = name
        self.keys = QueueKeys.for_queue(host.settings.prefix, name)

    # -- one job -----------------------------------------------------------------------

    @clear_errors
    async def info(self, job_id: str) -> JobInfo | None:
        """The job's record, or None if there is none (never enqueued, or expired)."""
        redis, span_ms = await self._host.client(), self._host.settings.idempotency_ttl_ms
        return await reads.job_info(redis, self.keys, job_id, span_ms=span_ms)

    @clear_errors
    async def status(self, job_id: str) -> JobStatus | None:
        """The job's status, or None if there is no record (one small read)."""
        redis, span_ms = await self._host.client(), self._host.settings.idempotency_ttl_ms
        return await reads.job_status(redis, self.keys, job_id, span_ms=span_ms)

    @clear_errors
    async def progress(self, job_id: str) -> Any:
        """What the job last reported with ``current_job().set_progress()`` (or None)."""
        raw = await reads.progress(await self._host.client(), self.keys, job_id)
        return None if raw is None else orjson.loads(raw)

    def settled(self, job_id: str) -> AbstractAsyncContextManager[asyncio.Event]:
        """An event set whenever the job may have finished (see ``Job.result``)."""
        return self._host.settled_listener().waiting(self.keys.settled_channel, job_id)

    @clear_errors
    async def cancel(self, job_id: str) -> bool:
        """Cancel a job: a queued or scheduled one never runs; a running one is aborted
        (its asyncio task is cancelled on whichever worker runs it, and it ends as
        cancelled, not retried). True if the job was cancelled or its abort requested;
        False if it had finished already (or does not exist)."""
        outcome, _ = await admin_scripts.cancel(
            await self._host.client(),
            self.keys,
            job_id,
            result_ttl_ms=self._host.settings.result_ttl_ms,
        )
        return outcome in ("cancelled", "aborting")

    @clear_errors
    async def reschedule(
        self, job_id: str, *, delay: float | timedelta | None = None, at: datetime | None = None
    ) -> bool:
        """Move a scheduled job to a new time (O(log n)); False if it is not scheduled."""
        when = JobOptions(delay=delay, at=at)
        outcome, _ = await admin_scripts.reschedule(
            await self._host.client(), self.keys, job_id,
            delay_ms=when.delay_ms(), due_ms=when.due_ms(),
        )  # fmt: skip
        return outcome == "rescheduled"

    # -- the queue as a whole -----------------------------------------------------------

    @clear_errors
    async def scheduled(self, *, limit: int = 100, offset: int = 0) -> list[ScheduledJob]:
        """Scheduled jobs in due order (O(log n + limit), no scan of the schedule)."""
        redis = await self._host.client()
        return await reads.scheduled(redis, self.keys, limit=limit, offset=offset)

    @clear_errors
    async def jobs(
        self,
        state: ListedState = "ready",
        *,
        limit: int = 100,
        offset: int = 0,
        task: str | None = None,
    ) -> list[JobInfo]:
        """A page of the jobs that are ``ready`` (in the order they will run: highest
        priority first), ``scheduled`` (by due time), ``active`` (by lease deadline),
        ``dead`` (oldest first), ``complete`` (newest first: the last 1,000 that kept a
        record, i.e. returned a value) or ``retrying`` (scheduled again after a failed
        attempt, by due time), with their records; of one ``task`` if given. A few round
        trips; a page picked by what its jobs are walks its list (``find_jobs``)."""
        return list((await self.find_jobs(state, limit=limit, offset=offset, task=task)).jobs)

    @clear_errors
    async def find_jobs(
        self,
        state: ListedState = "ready",
        *,
        task: str | None = None,
        limit: int = 100,
        offset: int = 0,
        scan: int = 10_000,
    ) -> JobPage:
        """``jobs()``, saying how far it looked: a page of a task's jobs, or of the
        retrying or complete ones, walks its list in order and reads at most ``scan``
        entries of it (``JobPage.exhausted``: it read the list to its end, so no match is
        missing). Offsets count matches."""
        if limit < 0 or offset < 0 or scan < 1:
            raise ConfigError("limit and offset must not be negative, and scan at least 1")
        if state not in LISTED_STATES:
            raise ConfigError(f"state must be one of {', '.join(LISTED_STATES)}, not {state!r}")
        redis = await self._host.client()
        return await listing.find(
            redis, self.keys, state, task=task, limit=limit, offset=offset, scan=scan
        )

    @clear_errors
    async def history(self, *, minutes: int = 60) -> list[MinuteCounts]:
        """How many attempts ended in each outcome, per minute, for the last ``minutes``
        (kept for ``App(history=...)`` seconds, a day by default), oldest first."""
        if minutes < 1:
            raise ConfigError("minutes must be at least 1")
        return await reads.history(await self._host.client(), self.keys, minutes=minutes)

    @clear_errors
    async def pause(self) -> bool:
        """Stop every worker taking jobs of this queue (the state lives in Redis, so all
        obey it, and workers started later too). Running jobs finish; enqueues go on
        and wait; delayed jobs still fall due (into ready). False if it was paused."""
        return bool(await (await self._host.client()).set(self.keys.paused, 1, nx=True))

    @clear_errors
    async def resume(self) -> bool:
        """End a pause: workers take again at once. False if it was not paused."""
        return await admin_scripts.resume(await self._host.client(), self.keys)

    @clear_errors
    async def paused(self) -> bool:
        """Whether the queue is paused."""
        return bool(await (await self._host.client()).exists(self.keys.paused))

    @clear_errors
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

    @clear_errors
    async def limits(self) -> QueueLimits:
        """The queue's limits (``set_limits``); fields are None where there is none."""
        return await stored_limits.read(await self._host.client(), self.keys)

    @clear_errors
    async def counts(self, *, top_tenants: int = 10) -> QueueCounts:
        """How many jobs are ready, scheduled, active and dead, and whether the queue is
        paused (one round trip); how many tenants have jobs ready, and the ``top_tenants``
        with the most (one more round trip, if any has)."""
        if top_tenants < 0:
            raise ConfigError("top_tenants must not be negative")
        return await reads.counts(await self._host.client(), self.keys, top_tenants=top_tenants)

    @clear_errors
    async def reconcile(self, *, batch: int = 500) -> int:
        """Put back jobs whose entry vanished while their record stayed (a server that
        evicted keys: see ``aioqueue check``): a queued job missing from its ready list is
        made ready again, and so on. Scans every job record of the queue, and each queued
        one's ready list (LPOS: O(backlog) per queued job), then recounts the tenants'
        leases (a tenant's count kept for a vanished job held it at its cap for good): run
        it after an eviction, not routinely. Returns how many were repaired; concurrent
        runs do no harm."""
        redis = await self._host.client()
        repaired = 0
        async for ids in reads.job_ids(redis, self.keys, batch=batch):
            repaired += await admin_scripts.reconcile(redis, self.keys, ids)
        return repaired + await admin_scripts.recount_tenants(redis, self.keys)

    # -- the workers and the server -----------------------------------------------------

    @clear_errors
    async def workers(self) -> list[dict[str, Any]]:
        """Workers serving this queue whose heartbeat is fresh (id, host, pid, queues,
        concurrency, running, started_at, beat_at); expired ids are pruned."""
        return await heartbeats.live_workers(await self._host.client(), self.keys)

    @staticmethod
    def worker_warnings(workers: list[dict[str, Any]]) -> list[str]:
        """What is wrong with a queue's live workers taken together (``workers()``), one
        line each: they serve different task sets (a worker buries a job whose task it
        lacks), or keep completed ids for different idempotency windows. No I/O."""
        found = (heartbeats.mixed_task_sets(workers), heartbeats.mixed_windows(workers))
        return [warning for warning in found if warning is not None]

    @clear_errors
    async def eviction(self) -> Eviction:
        """The Redis server's eviction policy, how many keys it has evicted and its memory
        (through the app's client): ``.unsafe`` if a full server may delete queue keys,
        ``.full`` if it is full (it refuses writes), ``.problem()`` says what is wrong. A
        refused CONFIG (ACLs, managed services) reads as an unknown policy, never an
        error."""
        return await server.eviction(await self._host.client())

    # -- periodic jobs -----------------------------------------------------------------

    @clear_errors
    async def periodic_specs(self) -> list[Periodic]:
        """The periodic jobs of this queue, as the workers see them."""
        return await specs.load(await self._host.client(), self.keys)

    @clear_errors
    async def add_periodic(self, spec: Periodic) -> None:
        """Store a periodic spec and wake a scheduler to look at it."""
        await specs.add(await self._host.client(), self.keys, spec)

    @clear_errors
    async def remove_periodic(self, name: str) -> bool:
        """Remove a periodic spec; True if there was one."""
        return await specs.remove(await self._host.client(), self.keys, name)

    # -- dead letters ----------------------------------------------------------------

    @clear_errors
    async def dead_jobs(self, *, limit: int = 100, offset: int = 0) -> list[JobInfo]:
        """Dead jobs, oldest first, with their errors and raw bytes."""
        redis = await self._host.client()
        return await listing.dead_jobs(redis, self.keys, limit=limit, offset=offset)

    async def find_dead(
        self, *, task: str | None = None, error_type: str | None = None, limit: int = 1000
    ) -> list[JobInfo]:
        """Among the oldest ``limit`` dead jobs, those of ``task`` and/or that died of
        ``error_type`` (either left out: any): what ``requeue_dead`` and ``purge_dead``
        act on when given these filters and no ids."""
        return [
            info
            for info in await self.dead_jobs(limit=limit)
            if (task is None or info.task == task)
            and (error_type is None or (info.error is not None and info.error.type == error_type))
        ]

    @clear_errors
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

        async def requeue(redis: Redis, ids: Sequence[str]) -> int:
            return (await admin_scripts.requeue(redis, self.keys, ids, limit=limit)).requeued

        return await self._on_dead(requeue, job_ids, task, error_type, limit)

    @clear_errors
    async def purge_dead(
        self,
        job_ids: Sequence[str] = (),
        *,
        task: str | None = None,
        error_type: str | None = None,
        limit: int = 1000,
    ) -> int:
        """Delete dead jobs, chosen as for ``requeue_dead``. Returns how many."""

        async def purge(redis: Redis, ids: Sequence[str]) -> int:
            return await admin_scripts.purge(redis, self.keys, ids, limit=limit)

        return await self._on_dead(purge, job_ids, task, error_type, limit)

    async def _on_dead(
        self,
        act: Callable[[Redis, Sequence[str]], Awaitable[int]],
        job_ids: Sequence[str],
        task: str | None,
        error_type: str | None,
        limit: int,
    ) -> int:
        """Run ``act`` on the dead jobs chosen: ``job_ids``; else with no filter, no ids
        (the script takes the oldest ``limit``); else those ``find_dead`` matches (0 if
        none: no ids would mean "the oldest")."""
        ids = tuple(job_ids)
        if not ids and (task is not None or error_type is not None):
            ids = tuple(
                info.id
                for info in await self.find_dead(task=task, error_type=error_type, limit=limit)
            )
            if not ids:
                return 0
        return await act(await self._host.client(), ids)
