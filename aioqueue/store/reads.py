"""Typed reads of a queue's state: job records, counts and listings.

redis-py types its replies loosely (a command may return an awaitable or a value, of
``Any``); each read here says what Redis sends back, in one place, so nothing above the
Redis layer handles an untyped reply. Replies stay bytes: ids and payloads need not be
UTF-8.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, cast

from .keys import done_slot
from .records import Field, JobInfo, JobStatus, QueueCounts, ScheduledJob

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from redis.asyncio import Redis

    from .keys import QueueKeys


async def job_info(
    redis: Redis, keys: QueueKeys, job_id: str, *, span_ms: int = 0
) -> JobInfo | None:
    """The job's record, or None if there is none (never enqueued, or expired). A job
    that completed with no result has no record, only its id in a done hash: its info is
    its status."""
    record = cast("dict[bytes, bytes]", await redis.hgetall(keys.job(job_id)))
    if Field.STATE not in record:
        if await _is_done(redis, keys, job_id, span_ms):
            return JobInfo.from_record(job_id, keys.name, {Field.STATE: b"complete"})
        return None
    return JobInfo.from_record(job_id, keys.name, record)


async def job_status(
    redis: Redis, keys: QueueKeys, job_id: str, *, span_ms: int = 0
) -> JobStatus | None:
    """The job's status (one small field), or None if there is no record."""
    raw = cast("bytes | None", await redis.hget(keys.job(job_id), Field.STATE.decode()))
    if raw:
        return JobStatus(raw.decode())
    return JobStatus.COMPLETE if await _is_done(redis, keys, job_id, span_ms) else None


async def _is_done(redis: Redis, keys: QueueKeys, job_id: str, span_ms: int) -> bool:
    """Is the id in a done hash? Generations by this host's clock, one either side for
    skew (include/done.lua names the hashes by the Redis clock)."""
    if span_ms <= 0:
        return False
    generation, slot = int(time.time() * 1000) // span_ms, done_slot(job_id.encode())
    async with redis.pipeline(transaction=False) as pipe:
        for g in (generation + 1, generation, generation - 1, generation - 2):
            pipe.hexists(keys.done(span_ms, g, slot), job_id)
        found = await pipe.execute()
    return any(found)


async def due_times(redis: Redis, keys: QueueKeys, job_ids: Iterable[bytes]) -> dict[bytes, int]:
    """When the ones of ``job_ids`` still on the schedule are due (epoch ms; one round
    trip)."""
    ids = list(job_ids)
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.zscore(keys.schedule, job_id)
        scores = cast("list[float | None]", await pipe.execute())
    return {job_id: int(due) for job_id, due in zip(ids, scores, strict=True) if due is not None}


async def scheduled(
    redis: Redis, keys: QueueKeys, *, limit: int, offset: int
) -> list[ScheduledJob]:
    """Scheduled jobs in due order (O(log n + limit))."""
    entries = cast(
        "list[tuple[bytes, float]]",
        await redis.zrange(keys.schedule, offset, offset + limit - 1, withscores=True),
    )
    return [ScheduledJob(raw.decode("utf-8", "replace"), int(due)) for raw, due in entries]


async def counts(redis: Redis, keys: QueueKeys) -> QueueCounts:
    """Ready, scheduled, active and dead jobs (one round trip, one snapshot). Ready is
    what the ready lists hold less the entries of cancelled jobs that take will skip."""
    async with redis.pipeline(transaction=True) as pipe:
        for key in keys.ready_lists():
            pipe.llen(key)
        pipe.get(keys.skips)
        pipe.zcard(keys.schedule)
        pipe.zcard(keys.active)
        pipe.zcard(keys.dead)
        replies = await pipe.execute()
    *ready, skips, scheduled, active, dead = replies
    listed = sum(int(n) for n in ready)
    return QueueCounts(max(0, listed - int(skips or 0)), int(scheduled), int(active), int(dead))


async def job_ids(redis: Redis, keys: QueueKeys, *, batch: int) -> AsyncIterator[list[bytes]]:
    """Every job id of the queue, by SCAN over its job records, ``batch`` at a time (an
    id may come twice, as SCAN allows; none present throughout is missed)."""
    prefix = keys.job_prefix.encode()
    pattern = _glob_escape(prefix) + b"*"
    found: list[bytes] = []
    async for key in redis.scan_iter(match=pattern, count=batch):
        found.append(bytes(key)[len(prefix) :])
        if len(found) >= batch:
            yield found
            found = []
    if found:
        yield found


def _glob_escape(text: bytes) -> bytes:
    return re.sub(rb"([*?\[\]\\])", rb"\\\1", text)


async def dead_jobs(redis: Redis, keys: QueueKeys, *, limit: int, offset: int) -> list[JobInfo]:
    """Dead jobs, oldest first, with their records (two round trips)."""
    raw_ids = cast("list[bytes]", await redis.zrange(keys.dead, offset, offset + limit - 1))
    ids = [raw.decode("utf-8", "replace") for raw in raw_ids]
    async with redis.pipeline(transaction=False) as pipe:  # one round trip for all
        for job_id in ids:
            pipe.hgetall(keys.job(job_id))
        records = cast("list[dict[bytes, bytes]]", await pipe.execute())
    return [
        JobInfo.from_record(job_id, keys.name, record)
        for job_id, record in zip(ids, records, strict=True)
        if Field.STATE in record
    ]
