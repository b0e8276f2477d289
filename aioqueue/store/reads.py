"""Typed reads of a queue's state: job records, counts and listings.

redis-py types its replies loosely (a command may return an awaitable or a value, of
``Any``); each read here says what Redis sends back, in one place, so nothing above the
Redis layer handles an untyped reply. Replies stay bytes: ids and payloads need not be
UTF-8.
"""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING, Any, cast

from ..core.ids import done_slot, fingerprint
from ..core.keys import ChannelKeys, QueueKeys, TopicKeys, channels_registry
from ..core.records import (
    HISTORY_CODES,
    Field,
    JobInfo,
    JobStatus,
    MinuteCounts,
    QueueCounts,
    ScheduledJob,
)
from .routing import server_time
from .scripts import admin
from .slots import snapshot

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from redis.asyncio import Redis
    from redis.asyncio.client import Pipeline


async def job_info(
    redis: Redis, keys: QueueKeys, job_id: str, *, span_ms: int = 0
) -> JobInfo | None:
    """The job's record (and, if it is scheduled, its due time), or None if there is none
    (never enqueued, or expired). A job that completed with no result has no record, only
    its id in a done set: its info is its status."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.job(job_id))
        pipe.zscore(keys.schedule, job_id)
        record, due = await pipe.execute()
    if Field.STATE not in record:
        if await _is_done(redis, keys, job_id, span_ms):
            return JobInfo.done(job_id, keys.name)
        return None
    return JobInfo.from_record(job_id, keys.name, record, due_ms=score_ms(due))


def score_ms(score: float | None) -> float | None:
    """A schedule score as epoch ms: an int as aioqueue writes it, or the score itself if
    no int can hold it (another program's ``inf``), for a view to show as it is."""
    if score is None:
        return None
    return int(score) if math.isfinite(score) else score


async def job_status(
    redis: Redis, keys: QueueKeys, job_id: str, *, span_ms: int = 0
) -> JobStatus | None:
    """The job's status (one small field), or None if there is no record."""
    raw = cast("bytes | None", await redis.hget(keys.job(job_id), Field.STATE.decode()))
    if raw:
        return JobStatus.of(raw)
    return JobStatus.COMPLETE if await _is_done(redis, keys, job_id, span_ms) else None


async def inputs(redis: Redis, prefix: str, queue: str, job_id: bytes) -> dict[bytes, bytes]:
    """A workflow parent's inputs: its children's outcomes by index (include/links.lua)."""
    key = QueueKeys.for_queue(prefix, queue).inputs_prefix.encode() + job_id
    return cast("dict[bytes, bytes]", await redis.hgetall(key))


async def unsealed(redis: Redis, keys: QueueKeys, job_id: str) -> bool:
    """Whether a workflow's parent still waits for children to be written (field pu)."""
    return bool(await redis.hexists(keys.job(job_id), Field.UNSEALED.decode()))


async def flow_counts(redis: Redis, keys: QueueKeys, job_id: str) -> list[bytes | None]:
    """A parent's state and child counts: s, pt, pd, ok, ko (records.Field)."""
    fields = (Field.STATE, Field.CHILDREN, Field.CHILDREN_PENDING, Field.CHILDREN_COMPLETE)
    names = [name.decode() for name in (*fields, Field.CHILDREN_FAILED)]
    return cast("list[bytes | None]", await redis.hmget(keys.job(job_id), names))


async def _is_done(redis: Redis, keys: QueueKeys, job_id: str, span_ms: int) -> bool:
    """Is the id's fingerprint in a done set? Generations by this host's clock, one either
    side for skew (include/done.lua names the sets by the Redis clock)."""
    if span_ms <= 0:
        return False
    raw_id = job_id.encode()
    generation, slot = int(time.time() * 1000) // span_ms, done_slot(raw_id)
    member = fingerprint(raw_id)
    async with redis.pipeline(transaction=False) as pipe:
        for g in (generation + 1, generation, generation - 1, generation - 2):
            pipe.sismember(keys.done(span_ms, g, slot), str(member))
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
    return [
        ScheduledJob(raw.decode("utf-8", "replace"), score_ms(due) or 0) for raw, due in entries
    ]


async def counts(redis: Redis, keys: QueueKeys, *, top_tenants: int = 10) -> QueueCounts:
    """Ready, scheduled, active, dead and waiting jobs (one round trip, one snapshot; a
    second for the ``top_tenants`` with the most ready jobs, if any tenant has some).
    Ready is what the ready lists (the tenants' too) hold less the entries of cancelled
    jobs that take will skip, per priority level too."""
    replies = await snapshot(redis, keys.base, lambda pipe: _count(pipe, keys))
    *lengths, skipped, scheduled, active, dead, paused, waiting, complete = replies[:-3]
    tenant_entries, held, tenants = replies[-3:]
    top = await admin.top_tenants(redis, keys, top_tenants) if int(tenants) else []
    for level, entries in tenant_entries.items():
        if level.isdigit() and 0 <= int(level) < len(lengths):
            lengths[int(level)] += int(entries)
    by_priority = _live(lengths, skipped)
    return QueueCounts(
        sum(by_priority.values()), int(scheduled), int(active), int(dead), by_priority,
        paused=bool(paused), waiting=max(0, int(waiting or 0)), complete=int(complete),
        tenants=int(tenants), tenants_held=int(held),
        top_tenants=tuple(top),
    )  # fmt: skip


def _count(pipe: Pipeline, keys: QueueKeys) -> None:
    """Queue the reads of ``counts``."""
    for key in keys.ready_lists():
        pipe.llen(key)
    pipe.hgetall(keys.skipped)
    pipe.zcard(keys.schedule)
    pipe.zcard(keys.active)
    pipe.zcard(keys.dead)
    pipe.exists(keys.paused)
    pipe.get(keys.waiting)
    pipe.zcard(keys.completed)
    pipe.hgetall(keys.tenant_key("ready"))
    pipe.hlen(keys.tenant_key("held"))
    pipe.zcard(keys.tenants)


def _live(lengths: list[int], skipped: dict[bytes, bytes]) -> dict[int, int]:
    """Ready jobs per priority level (levels with none left out): each list's length less
    the entries of cancelled jobs in it (the ``skipped`` hash: level -> entries)."""
    stale = stale_entries(skipped)
    live = {level: int(n) - stale.get(level, 0) for level, n in enumerate(lengths)}
    return {level: n for level, n in live.items() if n > 0}


def stale_entries(skipped: dict[bytes, bytes]) -> dict[int, int]:
    stale: dict[int, int] = {}
    for level, n in skipped.items():
        if level.isdigit() and n.lstrip(b"-").isdigit() and int(n) > 0:
            stale[int(level)] = int(n)
    return stale


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


async def records(
    redis: Redis,
    keys: QueueKeys,
    raw_ids: list[bytes],
    due: dict[bytes, float | None] | None = None,
) -> list[JobInfo]:
    """The records of these ids (one round trip), with their due times from ``due``;
    ids without a record are left out."""
    prefix = keys.job_prefix.encode()
    async with redis.pipeline(transaction=False) as pipe:
        for raw in raw_ids:
            pipe.hgetall(prefix + raw)
        records = cast("list[dict[bytes, bytes]]", await pipe.execute())
    return [
        JobInfo.from_record(
            raw.decode("utf-8", "replace"), keys.name, record, due_ms=(due or {}).get(raw)
        )
        for raw, record in zip(raw_ids, records, strict=True)
        if Field.STATE in record
    ]


async def progress(redis: Redis, keys: QueueKeys, job_id: str) -> bytes | None:
    """The progress a running job last reported (JSON), or None."""
    return cast("bytes | None", await redis.hget(keys.job(job_id), Field.PROGRESS.decode()))


async def history(redis: Redis, keys: QueueKeys, *, minutes: int) -> list[MinuteCounts]:
    """Outcome counts of the last ``minutes`` minutes (the current one last, all of them
    present, zeros included), by the Redis clock (two round trips)."""
    seconds, _ = await server_time(redis, keys.base)
    this_minute = seconds // 60
    first = this_minute - minutes + 1
    hours = range(first // 60, this_minute // 60 + 1)
    async with redis.pipeline(transaction=False) as pipe:
        for hour in hours:
            pipe.hgetall(keys.history(hour))
        replies = cast("list[dict[bytes, bytes]]", await pipe.execute())
    counts: dict[int, dict[str, int]] = {}
    for hour, fields in zip(hours, replies, strict=True):
        for name, value in fields.items():
            minute, _, code = name.partition(b":")
            outcome = HISTORY_CODES.get(code)
            if outcome is not None and minute.isdigit():
                counts.setdefault(hour * 60 + int(minute), {})[outcome] = int(value)
    return [
        MinuteCounts(minute * 60_000, **counts.get(minute, {}))
        for minute in range(first, this_minute + 1)
    ]


async def channel_entries(
    redis: Redis, keys: ChannelKeys, reader: str, *, limit: int, members_only: bool
) -> list[tuple[bytes, dict[bytes, bytes]]] | None:
    """The log entries after the reader's cursor, oldest first, as (stream id, fields);
    None if ``members_only`` and the reader has no cursor (not a member). Two plain calls,
    not a script: a script's XRANGE reply costs Redis twice the time to convert, and a
    cursor that moves in between only means messages the reader gets again."""
    cursor = await redis.zscore(keys.cursors, reader)
    if cursor is None:
        if members_only:
            return None
        cursor = 0
    entries = await redis.xrange(keys.log, f"{int(cursor) + 1}-0", "+", count=limit)
    return cast("list[tuple[bytes, dict[bytes, bytes]]]", entries)


StreamEntries = list[tuple[bytes, dict[bytes, bytes]]]


async def topic_new_messages(
    redis: Redis,
    keys: TopicKeys,
    group: str,
    consumer: str,
    *,
    count: int,
    block_ms: int | None = None,
    wake: str | None = None,
) -> StreamEntries:
    """New messages of a topic for a subscriber group, delivered to ``consumer`` (one
    XREADGROUP). With ``block_ms``, waits that long for one, or until an entry lands on
    the ``wake`` stream (read with the same group; its entries are not returned)."""
    streams: dict[str, str] = {keys.log: ">"}
    if wake is not None:
        streams[wake] = ">"
    reply = await redis.xreadgroup(
        group, consumer, cast("Any", streams), count=count, block=block_ms
    )
    log = keys.log.encode()
    for stream, entries in cast("list[tuple[bytes, StreamEntries]]", reply or []):
        if stream == log:
            return entries
    return []


async def topic_dead_entries(redis: Redis, keys: TopicKeys, limit: int) -> StreamEntries:
    """The newest ``limit`` dead letters of a topic, oldest first."""
    entries = await redis.xrevrange(keys.dead, count=limit)
    return list(reversed(cast("StreamEntries", entries)))


async def channel_names(redis: Redis, prefix: str) -> list[str]:
    """Every "<kind>:<name>" listed under ``prefix``: mailboxes sent to, groups joined,
    topics with a subscriber group (``keys.channels_registry``), sorted."""
    listed: set[bytes] = await redis.smembers(channels_registry(prefix))  # type: ignore[assignment]
    return sorted(raw.decode("utf-8", "replace") for raw in listed)
