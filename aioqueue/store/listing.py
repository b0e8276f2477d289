"""Pages of a queue's jobs picked by what they are, not only where they are: the jobs of
one task in any list, the retrying ones (scheduled again after a failed attempt), the
complete ones (``completed``: the index ack.lua keeps of those that keep a record).

Nothing indexes jobs by task, so such a page walks its list in order (ready lists 9..0,
the schedule by due time, leases by deadline, the dead oldest first, the completed
newest first), reading records a chunk at a time, until the page is full or ``scan``
entries were read: the cost of a page is bounded, and ``JobPage`` says whether the list
was read to its end. Offsets count matches. A page of one place with no filter is read
where it falls (``place``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, cast

from ..core.records import Field, JobInfo, JobPage, JobStatus
from . import reads, tenants

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from ..core.keys import QueueKeys

CHUNK = 200  # records per round trip of a walk


async def dead_jobs(redis: Redis, keys: QueueKeys, *, limit: int, offset: int) -> list[JobInfo]:
    """Dead jobs, oldest first, with their records (two round trips)."""
    raw_ids = cast("list[bytes]", await redis.zrange(keys.dead, offset, offset + limit - 1))
    return await reads.records(redis, keys, raw_ids)


ListedState = Literal["ready", "scheduled", "active", "dead", "complete", "retrying"]
"""The lists of a queue's jobs: where they are (ready, scheduled, active, dead), the
complete ones that keep a record, and the retrying ones (scheduled after a failed
attempt): the last two are always walked (``find``)."""
LISTED_STATES: tuple[ListedState, ...] = (
    "ready", "scheduled", "active", "dead", "complete", "retrying",
)  # fmt: skip


Place = Literal["ready", "scheduled", "active", "dead"]


async def place(
    redis: Redis, keys: QueueKeys, state: Place, *, limit: int, offset: int
) -> list[JobInfo]:
    """A page of the jobs in one place, with their records: ready ones in the order
    they will be taken (highest priority first, FIFO within one), scheduled ones by due
    time (with it), active ones by lease deadline, dead ones oldest first. A few round
    trips, no scan. Offsets count jobs: the ready entry of a cancelled job, which take has
    yet to skip, is neither listed nor counted, so a page is full unless the listing ends
    there (or a job moved on between the reads)."""
    if state == "dead":
        return await dead_jobs(redis, keys, limit=limit, offset=offset)
    due: dict[bytes, float | None] = {}
    if state in ("scheduled", "active"):
        key = keys.schedule if state == "scheduled" else keys.active
        entries = cast(
            "list[tuple[bytes, float]]",
            await redis.zrange(key, offset, offset + limit - 1, withscores=True),
        )
        raw_ids = [job_id for job_id, _ in entries]
        if state == "scheduled":
            due = {job_id: reads.score_ms(score) for job_id, score in entries}
        expected = JobStatus.SCHEDULED if state == "scheduled" else JobStatus.ACTIVE
    elif state == "ready":
        raw_ids = await _ready_ids(redis, keys, limit=limit, offset=offset)
        expected = JobStatus.QUEUED
    else:
        raise ValueError(f"state must be one of ready, scheduled, active, dead, not {state!r}")
    listed = await reads.records(redis, keys, raw_ids, due)
    return [info for info in listed if info.status is expected]


async def _ready_ids(redis: Redis, keys: QueueKeys, *, limit: int, offset: int) -> list[bytes]:
    """Ids of queued jobs on the ready lists from the ``offset``-th, highest priority
    first. A level without cancelled entries is read where the page falls; one with some
    (``skipped``) from its head to the page, as they may be anywhere in it; one with
    tenants' jobs in the order take serves them (``tenants.fair_order``), from its head."""
    lengths, stale, fair = await _level_sizes(redis, keys)
    slices: list[tuple[str, int, int, int, int]] = []
    tenant_pages: list[tuple[int, int, int, int, int]] = []
    skip, want = offset, limit
    for level in range(9, -1, -1):
        extra = stale.get(level, 0)
        live = max(0, lengths[level] + fair.get(level, 0) - extra)
        if want <= 0 or skip >= live:
            skip -= min(skip, live)
            continue
        take = min(want, live - skip)
        key = keys.ready(level)
        if fair.get(level):
            tenant_pages.append((len(slices), level, skip + take + extra, skip, take))
        elif extra:  # from the head: of the queued jobs there, pass over `skip`, keep `take`
            slices.append((key, 0, skip + take + extra - 1, skip, take))
        else:
            slices.append((key, skip, skip + take - 1, 0, take))
        want, skip = want - take, 0
    async with redis.pipeline(transaction=False) as pipe:
        for key, start, stop, _, _ in slices:
            pipe.lrange(key, start, stop)
        pages = cast("list[list[bytes]]", await pipe.execute())
    found: list[list[bytes]] = []
    for (_, start, stop, drop, take), page in zip(slices, pages, strict=True):
        read_all = stop - start + 1 > take  # a level with cancelled entries
        found.append((await _queued(redis, keys, page))[drop : drop + take] if read_all else page)
    for at, level, read, drop, take in reversed(tenant_pages):  # (in their places)
        entries = await tenants.fair_order(redis, keys, level, read)
        found.insert(at, (await _queued(redis, keys, entries))[drop : drop + take])
    return [job_id for page in found for job_id in page]


async def _level_sizes(
    redis: Redis, keys: QueueKeys
) -> tuple[list[int], dict[int, int], dict[int, int]]:
    """Per priority: its ready list's length, the entries of cancelled jobs on its lists,
    and the entries on its tenants' lists (one round trip)."""
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys.ready_lists():
            pipe.llen(key)
        pipe.hgetall(keys.skipped)
        pipe.hgetall(keys.tenant_key("ready"))
        *lengths, skipped, fair = await pipe.execute()
    return [int(n) for n in lengths], reads.stale_entries(skipped), reads.stale_entries(fair)


async def _queued(redis: Redis, keys: QueueKeys, ids: list[bytes]) -> list[bytes]:
    """Those of ``ids`` whose job is queued (one round trip: their state fields)."""
    prefix = keys.job_prefix.encode()
    async with redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hget(prefix + job_id, Field.STATE.decode())
        states = cast("list[bytes | None]", await pipe.execute())
    return [job_id for job_id, state in zip(ids, states, strict=True) if state == b"queued"]


# (start, count) -> the list's ids from ``start``, and their due times (the schedule's)
Source = Callable[[int, int], Awaitable[tuple[list[bytes], dict[bytes, float | None]]]]

_EXPECTED = {
    "ready": JobStatus.QUEUED, "scheduled": JobStatus.SCHEDULED, "active": JobStatus.ACTIVE,
    "dead": JobStatus.DEAD, "complete": JobStatus.COMPLETE, "retrying": JobStatus.SCHEDULED,
}  # fmt: skip


async def find(
    redis: Redis,
    keys: QueueKeys,
    state: ListedState,
    *,
    task: str | None,
    limit: int,
    offset: int,
    scan: int,
) -> JobPage:
    """A page of the jobs of ``state`` (and of ``task``, if given), in the list's order."""
    if task is None and state in ("ready", "scheduled", "active", "dead"):
        jobs = await place(redis, keys, state, limit=limit, offset=offset)
        return JobPage(jobs, offset + len(jobs), exhausted=len(jobs) < limit)
    expected = _EXPECTED[state]

    def keep(info: JobInfo) -> bool:
        if info.status is not expected or (task is not None and info.task != task):
            return False
        return state != "retrying" or info.attempts >= 1

    source = await _source(redis, keys, state, scan)
    return await _walk(redis, keys, source, keep, limit, offset, scan)


async def _walk(
    redis: Redis,
    keys: QueueKeys,
    source: Source,
    keep: Callable[[JobInfo], bool],
    limit: int,
    offset: int,
    scan: int,
) -> JobPage:
    found: list[JobInfo] = []
    matches = position = 0
    while position < scan and len(found) < limit:
        want = min(CHUNK, scan - position)
        ids, due = await source(position, want)
        position += len(ids)
        for info in await reads.records(redis, keys, ids, due):
            if keep(info):
                if offset <= matches < offset + limit:
                    found.append(info)
                matches += 1
        if len(ids) < want:  # the list ended
            return JobPage(found, position, exhausted=True)
    return JobPage(found, position, exhausted=False)


async def _source(redis: Redis, keys: QueueKeys, state: ListedState, scan: int) -> Source:
    if state == "ready":
        return await _ready(redis, keys, scan)
    key = {"scheduled": keys.schedule, "retrying": keys.schedule, "active": keys.active,
           "dead": keys.dead, "complete": keys.completed}[state]  # fmt: skip
    newest_first, scheduled = state == "complete", key == keys.schedule

    async def read(start: int, count: int) -> tuple[list[bytes], dict[bytes, float | None]]:
        entries = cast(
            "list[tuple[bytes, float]]",
            await redis.zrange(key, start, start + count - 1, desc=newest_first, withscores=True),
        )
        due = {job_id: reads.score_ms(score) for job_id, score in entries} if scheduled else {}
        return [job_id for job_id, _ in entries], due

    return read


async def _ready(redis: Redis, keys: QueueKeys, scan: int) -> Source:
    """The ready lists as one, in the order take visits them (9..0), as they are now; a
    level with tenants' jobs in the order take serves them (its first ``scan``)."""
    lengths, _, fair = await _level_sizes(redis, keys)
    served: dict[int, list[bytes]] = {}  # a tenants' level's entries, read once

    async def read(start: int, count: int) -> tuple[list[bytes], dict[bytes, float | None]]:
        found: list[bytes] = []
        for level in range(9, -1, -1):
            length = lengths[level] + fair.get(level, 0)
            if count <= 0:
                break
            if start >= length:
                start -= length
                continue
            if fair.get(level):
                if level not in served:
                    served[level] = await tenants.fair_order(redis, keys, level, scan)
                page = served[level][start : start + count]
            else:
                page = cast(
                    "list[bytes]", await redis.lrange(keys.ready(level), start, start + count - 1)
                )
            found += page
            count -= min(count, length - start)
            start = 0
        return found, {}

    return read
